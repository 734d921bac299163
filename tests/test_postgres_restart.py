"""The server drops a running loop's connections: a clear error, nothing lost, recovery goes on.

What a server restart does to its clients is end every connection
(`pg_terminate_backend` is that, for one program's connections only: the test
server is shared, so it is not restarted; docs/decisions/0087). A driver in a
child process (`tests/postgres_child.py lose`) has its connections ended while
it decides its second step; its next write must fail as a `StoreError` that
names no password, the record must hold everything committed before (the first
step's tool ran once, the chain verifies), and a restarted program's recovery
must take the run over and finish it, over a new connection. When the
connections are ended inside a remote mutation, its outcome is never recorded:
recovery asks a person (`interrupted_side_effect`) and does not run it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import agentrt
import postgres_child
from agentrt import Decision
from agentrt.scripted import ScriptedAgent
from support.postgres import postgres_schema

HERE = Path(__file__).resolve().parent

RUN = "7e" * 16
PASSWORD = "s3cret-never-shown"


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the connection-loss test")


def with_password(url: str) -> str:
    """`url` with a password (the test server trusts its clients, so it is never asked)."""
    scheme, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user}:{PASSWORD}@{host}"


def test_a_dropped_connection_is_a_store_error_loses_nothing_and_recovery_goes_on(
    url: str, tmp_path: Path
) -> None:
    agentrt.open_store(url).close()
    name = f"agentrt_lose_{uuid.uuid4().hex[:12]}"
    child_url = f"{with_password(url)}&application_name={name}"
    note = tmp_path / "terminated"
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "postgres_child.py"),
            "lose",
            child_url,
            RUN,
            "0",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "TERMINATE_FROM": url.partition("?")[0],
            "TERMINATED_NOTE": str(note),
            "LEASE_TTL": "30",
        },
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert int(note.read_text()) >= 1  # the server ended the loop's connection(s)
    # The loop's error: a StoreError (or a kind of one), saying what failed, no password.
    assert issubclass(getattr(agentrt, said["error"]), agentrt.StoreError), said
    assert "nothing was written" in said["message"] or "failed" in said["message"], said
    assert PASSWORD not in done.stdout + done.stderr

    # Nothing committed is lost: the first step's tool ran once and its result is kept;
    # the second step's decision was never recorded; the chain verifies.
    store = agentrt.open_existing(url, read_only=True)
    try:
        run = store.get_run(RUN)
        assert run.status == "RUNNING"
        steps = store.list_steps(RUN)
        assert [(s.index, s.status) for s in steps][:1] == [(0, "done")]
        assert all(s.decision is None for s in steps[1:])
        assert store.verify_events().intact
    finally:
        store.close()
    assert [line.split()[1] for line in (tmp_path / "journal").read_text().splitlines()] == [
        "lookup"
    ]

    # A restarted program recovers it: the loop that stopped on the error gave its lease
    # back (decision 0163), so it takes the run over at once, on a new connection, and
    # finishes it; the tool is not run again.
    recoverer = agentrt.Driver(
        store=agentrt.open_store(url),
        # The same script: the recorded steps settle its first entry (the lookup).
        agent=ScriptedAgent([Decision.tool_call("lookup", {}), Decision.complete({"done": True})]),
        policy=postgres_child.policy(),
        tools=[
            postgres_child.Tool("wait", agentrt.SideEffect.REMOTE_MUTATION, tmp_path, die=False),
            postgres_child.Tool("lookup", agentrt.SideEffect.READ_ONLY, tmp_path, die=False),
        ],
        lease_owner="restarted",
    )
    try:
        (recovered,) = recoverer.recover_sync()
        assert recovered.run is not None and recovered.run.status == "COMPLETED", recovered
        events = recoverer.store.list_events(RUN)
        # No lease to take over (`lease.taken_over` is recorded only when there was one).
        assert [e for e in events if e.type == "lease.taken_over"] == []
        assert "run.resumed" in [e.type for e in events]
        assert recoverer.store.verify_events().intact
    finally:
        recoverer.store.close()
    assert len((tmp_path / "journal").read_text().splitlines()) == 1


def test_a_connection_dropped_while_a_side_effect_runs_leaves_it_for_a_person(
    url: str, tmp_path: Path
) -> None:
    agentrt.open_store(url).close()
    name = f"agentrt_lose_{uuid.uuid4().hex[:12]}"
    child_url = f"{with_password(url)}&application_name={name}"
    note = tmp_path / "terminated"
    child = [sys.executable, str(HERE / "postgres_child.py")]
    done = subprocess.run(
        [*child, "lose-mid-tool", child_url, RUN, "0", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "TERMINATE_FROM": url.partition("?")[0],
            "TERMINATED_NOTE": str(note),
        },
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert int(note.read_text()) >= 1
    assert issubclass(getattr(agentrt, said["error"]), agentrt.StoreError), said
    assert PASSWORD not in done.stdout + done.stderr

    # The record says the remote mutation started and nothing of its outcome: recovery
    # cannot know whether it took effect, so a person is asked; it is not run again.
    recoverer = agentrt.Driver(
        store=agentrt.open_store(url),
        agent=ScriptedAgent([Decision.tool_call("wait", {}), Decision.complete({"done": True})]),
        policy=postgres_child.policy(),
        tools=[
            postgres_child.Tool("wait", agentrt.SideEffect.REMOTE_MUTATION, tmp_path, die=False),
            postgres_child.Tool("lookup", agentrt.SideEffect.READ_ONLY, tmp_path, die=False),
        ],
        lease_owner="restarted",
    )
    try:
        (recovered,) = recoverer.recover_sync()
        assert recovered.run is not None, recovered
        assert recovered.run.status == "WAITING_FOR_APPROVAL", recovered
        (approval,) = recoverer.store.pending_approvals(RUN)
        assert approval.kind == "interrupted_side_effect"
        assert approval.capability == {"tool": "wait", "args": {}}
        assert recoverer.store.verify_events().intact
    finally:
        recoverer.store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert [line.split()[1] for line in journal] == ["wait"]
