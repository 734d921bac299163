"""A deadlock the PostgreSQL server detects while the store writes is said as one.

A real deadlock, on the test server (`AGENTRT_TEST_POSTGRES_URL`), between the store's
write transaction and a session of the test's own, made so that the store's backend is
the one the server ends, with no race on a clock:

1. session A holds the run's row (`FOR UPDATE`), session B its chain partition's head;
2. the store's transaction begins (its tables' `ROW EXCLUSIVE` lock) and waits for the
   run's row behind A (seen on the server, `pg_locks`);
3. B asks for `SHARE` on `runs`, which waits for the store's `ROW EXCLUSIVE` (seen);
4. A ends: the store takes the run and waits for the head B holds. The cycle is there
   from the first instant of that wait, and the store's backend checks for one after its
   `deadlock_timeout` (100 ms, `PGOPTIONS`), B's after 60 s: the store's transaction is
   the one ended, with SQLSTATE 40P01.

Before decision 0175 the store said "another transaction held what this one needed past
the lock timeout (5000 ms)" of it: a wait nobody made. It now says the server found a
deadlock and ended the transaction, that it was rolled back whole, nothing written, and
whether retrying is safe (`StoreBusyError`: before any of its work was written); a Gate
step's `execute` refused so stays executable, and its retry runs the call once (decision
0179).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt import (
    Decision,
    LeaseLostError,
    RunStateError,
    RunStatus,
    SideEffect,
    StoreBusyError,
    StoreError,
    ToolCall,
    ToolResult,
)
from agentrt._chain import partition_of
from conftest import RecordingTool
from support.gates import make_gate, open_step
from support.leases import expire_lease
from support.postgres import held_run, postgres_schema
from support.rows import execute as execute_sql
from test_cli import clean_env

FOUND = (
    "PostgreSQL found this transaction and another deadlocked (SQLSTATE 40P01) and ended "
    "this one before any of its work was written, so it was rolled back whole and retrying "
    "it is safe (the server said: deadlock detected"
)


APP = "agentrt-deadlock-test"
"""The command's session's `application_name` (`PGAPPNAME`): how the test finds its backend."""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh schema; the store's sessions look for a deadlock after 100 ms, not 1 s."""
    monkeypatch.setenv("PGOPTIONS", "-c deadlock_timeout=100ms")
    with ExitStack() as stack:
        yield postgres_schema(stack, "the deadlock tests")


def session_of_our_own(url: str) -> psycopg.Connection[Any]:
    """A connection to the store's schema that never times out a lock wait and looks for a
    deadlock only after 60 s, so the store's backend is the one the server ends."""
    base, schema = url.split("?", 1)[0], url.rsplit("schema=", 1)[1]
    conn = psycopg.connect(base)
    conn.execute(f"SET search_path TO {schema}")
    conn.execute("SET lock_timeout = 0")
    conn.execute("SET deadlock_timeout = '60s'")
    return conn


def wait_until_waiting(url: str, *, pid: int | None = None, app: str = "") -> None:
    """Return once backend `pid` (or the backend whose `application_name` is `app`) waits
    for a lock (asked of the server, never slept)."""
    sql = (
        "SELECT 1 FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
        "WHERE NOT l.granted AND (a.pid = %s OR a.application_name = %s)"
    )
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as watcher:
        for _ in range(1_000_000):
            if watcher.execute(sql, (pid or 0, app or "-")).fetchone() is not None:
                return
    raise AssertionError(f"backend {pid or app} never waited for a lock")


def deadlock_around(
    url: str, run_id: str, part: int, writer: threading.Thread, *, pid: int = 0, app: str = ""
) -> None:
    """Run `writer` (whose transaction, on backend `pid` or the one named `app`, locks the
    run, then its head) into a deadlock with a session of the test's own, as the module
    says; returns once both ended."""
    a, b = session_of_our_own(url), session_of_our_own(url)
    try:
        a.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))
        b.execute("SELECT 1 FROM chain_head WHERE part = %s FOR UPDATE", (part,))
        writer.start()
        wait_until_waiting(url, pid=pid, app=app)  # the store's transaction, behind A
        got: list[str] = []

        def share() -> None:
            b.execute("LOCK TABLE runs IN SHARE MODE")  # granted once the store rolled back
            got.append("share")
            b.rollback()

        blocked = threading.Thread(target=share)
        blocked.start()
        wait_until_waiting(url, pid=b.info.backend_pid)
        a.rollback()
        writer.join()
        blocked.join()
        assert got == ["share"]
    finally:
        a.close()
        b.close()


def test_a_deadlock_at_a_gate_steps_execute_is_said_as_one_and_nothing_is_written(
    url: str,
) -> None:
    with agentrt.open_store(url) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        session, step = open_step(make_gate(store, tool), "goal")
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        before = [e.type for e in store.list_events(session.run_id)]
        outcome: list[Any] = []

        def execute() -> None:
            try:
                outcome.append(step.execute_sync())
            except BaseException as e:  # asserted below
                outcome.append(e)

        part = partition_of(session.run_id, store.partitions)
        deadlock_around(
            url,
            session.run_id,
            part,
            threading.Thread(target=execute),
            pid=store._pg.info.backend_pid,  # type: ignore[attr-defined]
        )

        [error] = outcome
        assert type(error) is StoreBusyError
        assert str(error).startswith(f"a statement of the transaction failed: {FOUND}")
        assert "lock timeout" not in str(error)
        assert isinstance(error.__cause__, psycopg.errors.DeadlockDetected)
        # Rolled back whole: the tool never ran, nothing of the step was written.
        assert tool.calls == []
        assert before == ["run.created", "run.started"]
        assert [e.type for e in store.list_events(session.run_id)] == before
        assert store.verify_events().intact
        # Not wedged: the step stays open and allowed (decision 0179), the session's next
        # step is refused until it is executed, and the retry makes the same commit: the
        # call runs once, step 0's events are whole, and the chain holds.
        assert session.current() is step
        with pytest.raises(RunStateError, match="refused busy before the tool started"):
            session.step_sync()
        assert step.execute_sync().kind == "tool_result"
        assert len(tool.calls) == 1
        assert [e.type for e in store.list_events(session.run_id)] == [
            *before,
            "step.started",
            "step.decided",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert store.verify_events().intact
        session.close_sync()


def test_a_deadlock_of_the_commands_cancel_exits_1_saying_so_and_the_run_goes_on(
    url: str,
) -> None:
    with agentrt.open_store(url) as store:
        session, _step = open_step(make_gate(store), "goal")
        run_id = session.run_id
        part = partition_of(run_id, store.partitions)
        before = [e.type for e in store.list_events(run_id)]
        done: list[subprocess.CompletedProcess[str]] = []

        def cancel() -> None:
            done.append(
                subprocess.run(
                    [sys.executable, "-m", "agentrt", "--db", url, "cancel", run_id, "--by", "op"],
                    capture_output=True,
                    text=True,
                    env=clean_env(PGOPTIONS="-c deadlock_timeout=100ms", PGAPPNAME=APP),
                    stdin=subprocess.DEVNULL,
                    timeout=120,
                )
            )

        deadlock_around(url, run_id, part, threading.Thread(target=cancel), app=APP)

        [result] = done
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert FOUND in line, line
        assert "lock timeout" not in line
        # Nothing changed: the run still runs, held by the session, its events as they were.
        run = store.get_run(run_id)
        assert run.status == RunStatus.RUNNING
        assert [e.type for e in store.list_events(run_id)] == before
        assert store.verify_events().intact
        session.close_sync()


def test_a_deadlock_after_the_transaction_wrote_is_a_plain_store_error_and_nothing_is_written(
    url: str,
) -> None:
    """Once a statement of the transaction changed something, a retry would run its work
    twice: the deadlock is a plain `StoreError`, saying so, and the change is rolled back."""
    with agentrt.open_store(url) as store:
        held_run(store, "r1")
        held_run(store, "r2")
        b = session_of_our_own(url)
        try:
            b.execute("SELECT 1 FROM runs WHERE id = 'r2' FOR UPDATE")
            got: list[str] = []

            def wait_for_r1() -> None:
                b.execute("SELECT 1 FROM runs WHERE id = 'r1' FOR UPDATE")
                got.append("r1")
                b.rollback()

            blocked = threading.Thread(target=wait_for_r1)
            with pytest.raises(StoreError) as raised, store.transaction() as tx:
                assert tx.lock_run("r1") is not None
                tx.execute("UPDATE runs SET goal = 'changed' WHERE id = 'r1'")
                blocked.start()
                wait_until_waiting(url, pid=b.info.backend_pid)
                tx.execute("UPDATE runs SET goal = 'changed' WHERE id = 'r2'")
            blocked.join()
            assert got == ["r1"]
        finally:
            b.close()
        error = raised.value
        assert type(error) is StoreError
        assert str(error).startswith(
            "a statement of the transaction failed: PostgreSQL found this transaction and "
            "another deadlocked (SQLSTATE 40P01) and ended this one, so it was rolled back "
            "whole and nothing of it was written; its work had begun, so agentrt does not "
            "retry it on its own (the server said: deadlock detected"
        )
        assert isinstance(error.__cause__, psycopg.errors.DeadlockDetected)
        assert [store.get_run(r).goal for r in ("r1", "r2")] == ["goal", "goal"]
        assert store.verify_events().intact


class HeldTool(RecordingTool):
    """A tool that, once called, waits for `proceed` before it returns."""

    def __init__(self) -> None:
        super().__init__("note", SideEffect.READ_ONLY)
        self.running, self.proceed = threading.Event(), threading.Event()

    def call(self, call: ToolCall) -> ToolResult:
        self.running.set()
        assert self.proceed.wait(60)
        return super().call(call)


@pytest.mark.parametrize("lease", ["lapsed", "taken"])
def test_an_outcome_write_ended_by_a_deadlock_past_the_lease_says_deadlock_not_busy(
    url: str, lease: str
) -> None:
    """A tool's outcome is known: its write is retried past a busy store while the lease is
    the session's (decision 0012). When the last try was ended by the server for a deadlock
    (SQLSTATE 40P01, decision 0175) and the lease has lapsed (or another owner took the run)
    meanwhile, the `LeaseLostError` says so, not "the database stayed busy" (nobody waited
    past a timeout). The lease is made lapsed (its expiry an hour back: the server's clock
    judges it) or taken while the tool runs, then its outcome's write is run into a real
    deadlock, as the module says."""
    with agentrt.open_store(url) as store:
        tool = HeldTool()
        # A lease of an hour: the heartbeat does not renew it while the test runs.
        gate = make_gate(store, tool, lease_ttl=timedelta(hours=1))
        session, step = open_step(gate, "goal")
        run_id = session.run_id
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        outcome: list[Any] = []

        def execute() -> None:
            try:
                outcome.append(step.execute_sync())
            except BaseException as e:  # asserted below
                outcome.append(e)

        executing = threading.Thread(target=execute)
        executing.start()
        assert tool.running.wait(60)
        if lease == "lapsed":
            expired = expire_lease(url, run_id, holder_elsewhere=False)
            said = (
                f"the outcome's write was ended by a deadlock (PostgreSQL found it and another "
                f"transaction each waiting for the other, SQLSTATE 40P01) and the lease on run "
                f"{run_id} had lapsed at {expired}, so it was not tried again; the outcome was "
                "not recorded and is left for the next owner"
            )
        else:
            execute_sql(
                url, "UPDATE runs SET lease_owner = 'other/000000000000' WHERE id = ?", (run_id,)
            )
            said = (
                f"run {run_id} changed owner or status while its write was retried after a "
                "deadlock (SQLSTATE 40P01); the outcome was not recorded and is left for the "
                "current owner"
            )

        def outcome_written() -> None:  # the tool returns; its outcome's write comes next
            tool.proceed.set()
            executing.join(60)

        part = partition_of(run_id, store.partitions)
        deadlock_around(
            url,
            run_id,
            part,
            threading.Thread(target=outcome_written),
            pid=store._pg.info.backend_pid,  # type: ignore[attr-defined]
        )

        [error] = outcome
        assert type(error) is LeaseLostError
        assert str(error) == said
        assert isinstance(error.__cause__, StoreBusyError)
        assert FOUND in str(error.__cause__)
        assert len(tool.calls) == 1
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "executing")]
        assert "step.tool_finished" not in [e.type for e in store.list_events(run_id)]
        assert store.verify_events().intact
        if lease == "lapsed":
            session.close_sync()
