"""Processes race on one PostgreSQL record after its owner is SIGKILLed mid-tool.

A child (`tests/postgres_child.py kill`) is killed by SIGKILL inside a remote
mutation, its lease left held. Four processes, released together, each resume
the run: exactly one takes it over, the interrupted side effect waits for a
person (an `interrupted_side_effect` approval), the tool is not run again, and
the others are refused, changing nothing (issue 21 item 6).

Two ways the owner is known gone: on this host by proof (its pid is dead), and
as another host would see it, by the lease's expiry on the server's clock (the
holder's record names another host, so no proof can decide). The variant with
processes in separate network namespaces is not here (decision 0087).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt._clock import format_time
from support.postgres import postgres_schema

HERE = Path(__file__).resolve().parent
RUN = "9c" * 16
ANOTHER_HOST = '{"host":"another-host","pid":1,"start":"1"}'


@pytest.fixture
def url() -> Any:
    with ExitStack() as stack:
        yield postgres_schema(stack, "the takeover race")


def child(mode: str, url: str, dir: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "postgres_child.py"), mode, url, RUN, "0", str(dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("gone", ["owner process gone", "lease expired"])
def test_racers_after_a_sigkill_mid_tool_exactly_one_takes_over_and_a_person_is_asked(
    url: str, tmp_path: Path, gone: str
) -> None:
    agentrt.open_store(url).close()
    killed = child("kill", url, tmp_path)
    killed.communicate(timeout=120)
    assert killed.returncode == -9  # SIGKILL inside the remote mutation
    if gone == "lease expired":
        base, _, schema = url.rpartition("schema=")
        with psycopg.connect(base.rstrip("?&"), autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            conn.execute(
                "UPDATE runs SET lease_expires_at = %s, lease_holder = %s WHERE id = %s",
                (format_time(row[0] - timedelta(seconds=1)), ANOTHER_HOST, RUN),
            )

    go = tmp_path / "go"
    racers = [child("resume", url, tmp_path, GO_FILE=str(go)) for _ in range(4)]
    go.write_text("")
    outputs = [r.communicate(timeout=120) for r in racers]
    assert [r.returncode for r in racers] == [0, 0, 0, 0], outputs
    said = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    won = [s for s in said if "status" in s]
    lost = [s for s in said if "error" in s]
    assert won == [{"status": "WAITING_FOR_APPROVAL"}], said
    assert len(lost) == 3
    for refusal in lost:
        assert issubclass(getattr(agentrt, refusal["error"]), agentrt.RunStateError), refusal

    store = agentrt.open_existing(url, read_only=True)
    try:
        events = store.list_events(RUN)
        types = [e.type for e in events]
        assert types.count("lease.taken_over") == 1
        assert types.count("step.interrupted") == 1
        assert types.count("approval.requested") == 1
        (taken,) = [e for e in events if e.type == "lease.taken_over"]
        assert taken.payload["proof"]["by"] == gone
        assert store.get_run(RUN).status == "WAITING_FOR_APPROVAL"
        (approval,) = store.pending_approvals(RUN)
        assert approval.kind == "interrupted_side_effect"
        assert approval.capability == {"tool": "wait", "args": {}}
        assert store.verify_events().intact
    finally:
        store.close()
    journal = (tmp_path / "journal").read_text().splitlines()
    assert [line.split()[1] for line in journal] == ["wait"]  # never run again unasked
