"""Runs left RUNNING the ways a person finds them: held by a process SIGKILLed while it held
the lease, or by nobody (a session that closed). For the tests of what the views say of a
run's lease (`show`, `runs`, the console; decisions 0190, 0196)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import agentrt
from agentrt import Decision, Gate
from agentrt.scripted import ScriptedAgent

from .gates import open_step
from .tools import read_tool

_KILLED_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    import agentrt
    store = agentrt.open_store(sys.argv[1])
    gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), lease_owner=sys.argv[2])
    session = gate.begin_sync("charge the card")
    print(session.run.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def killed_run(database: str, env: dict[str, str], owner: str = "worker") -> str:
    """A RUNNING run whose process (`owner`'s) was killed (SIGKILL) while it held the lease."""
    worker = subprocess.run(
        [sys.executable, "-c", _KILLED_WORKER, database, owner],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert worker.returncode == -9, worker.stderr
    return worker.stdout.strip()


def abandoned_run(database: str) -> str:
    """A RUNNING run whose session closed after an allowed call: nobody holds it."""
    store = agentrt.open_store(database)
    try:
        gate = Gate(store=store, policy=agentrt.default_policy(), tools=[read_tool()])
        session, step = open_step(gate, "read it")
        assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
        session.close_sync()
        return session.run.id
    finally:
        store.close()


@contextmanager
def live_run(database: str) -> Iterator[tuple[agentrt.Store, str]]:
    """A RUNNING run whose session is open in this process (its lease held by `worker`),
    with its store; closed after."""
    store = agentrt.open_store(database)
    gate = Gate(store=store, policy=agentrt.default_policy(), lease_owner="worker")
    session = gate.begin_sync("charge the card live")
    try:
        yield store, session.run.id
    finally:
        session.close_sync()
        store.close()


def completed_run(database: str) -> str:
    """A run that ended (COMPLETED): no lease to say anything of."""
    store = agentrt.open_store(database)
    try:
        driver = agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.complete("done")]),
            policy=agentrt.default_policy(),
        )
        return driver.start_sync("nothing to do").id
    finally:
        store.close()


def released_at_the_lease_read(monkeypatch: Any, database: str, run_id: str) -> None:
    """The moment between a view's read of a run and its read of the run's lease: the first
    `leases_of` (in this process, on the backend's store) is preceded by another store
    giving the run's lease back (the run left RUNNING, nobody holding it), as a program
    doing so at that moment would."""
    with agentrt.open_existing(database, read_only=True) as probe:
        store_class = type(probe)
        owner = probe.lease(run_id).owner
    read = store_class.leases_of
    done: list[bool] = []

    def leases_of(self: Any, run_ids: Any) -> Any:
        if not done:
            done.append(True)
            with agentrt.open_existing(database) as other, other.transaction() as tx:
                assert tx.release_lease(run_id, owner, epoch=1)
        return read(self, run_ids)

    monkeypatch.setattr(store_class, "leases_of", leases_of)
