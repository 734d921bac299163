"""A Gate step's `execute` refused busy before its tool started stays executable (decision 0179).

The store refuses the commit that would start the tool (the step's kept claim and
decision, its policy, `step.tool_started`) with `StoreBusyError` when another connection
holds what it needs past the store's wait: rolled back whole, nothing of the step written,
the tool certainly not started. The step stays open and allowed, and a retry of `execute`
makes that same commit; the session's next `step()` is refused meanwhile, so no step is
left `deciding` under a run that went on. Once `step.tool_started` is durable the step is
never executed again.

A real lock, held by a connection of the test's own from before `execute` until after it
returned, on each backend (`database`): SQLite's write lock (`BEGIN IMMEDIATE`) past a
busy timeout of 50 ms; PostgreSQL's run row (`FOR UPDATE`) past a lock timeout of 50 ms
(the deadlock of `test_postgres_deadlock.py` is the other way the server refuses it). No
race: the lock is taken before the call and released after it; only the wait's length is
a clock's, and it is shortened, not raced.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import agentrt
import agentrt._store.postgres._connection as pg_connection
import agentrt._store.sqlite._connection as sqlite_connection
from agentrt import (
    Decision,
    Limits,
    RunStateError,
    SideEffect,
    StepStatus,
    StoreBusyError,
    VerdictOutcome,
)
from agentrt._commit_plan import POINT_TOOL_EFFECT
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.gates import make_gate, open_step
from support.tools import push_tool

WAIT_MS = 50

SQLITE_BUSY = (
    "cannot begin a write transaction: another connection held the database's write lock "
    f"past the busy timeout ({WAIT_MS} ms); nothing was written"
)
POSTGRES_BUSY = (
    "a statement of the transaction failed: another transaction held what this one needed "
    f"past the lock timeout ({WAIT_MS} ms)"
)
STEP_EVENTS = ["step.started", "step.decided", "step.policy", "step.tool_started"]


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's wait for a lock another connection holds, 50 ms instead of 5 s (read when
    a store's connection is configured, so set before each test opens its store)."""
    monkeypatch.setattr(sqlite_connection, "BUSY_TIMEOUT_MS", WAIT_MS)
    monkeypatch.setattr(pg_connection, "LOCK_TIMEOUT_MS", WAIT_MS)


def said_busy(database: str) -> str:
    return POSTGRES_BUSY if database.startswith("postgresql") else SQLITE_BUSY


@contextmanager
def held(database: str, run_id: str) -> Iterator[None]:
    """What the store's next write of `run_id` needs, held by a connection of the test's own
    until the block ends: SQLite's write lock, or PostgreSQL's row of the run."""
    if database.startswith("postgresql"):
        base, schema = database.split("?", 1)[0], database.rsplit("schema=", 1)[1]
        pg = psycopg.connect(base)
        try:
            pg.execute(f"SET search_path TO {schema}")
            assert pg.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,)).fetchone()
            yield
        finally:
            pg.rollback()
            pg.close()
        return
    lite = sqlite3.connect(database, isolation_level=None)
    try:
        lite.execute("BEGIN IMMEDIATE")
        yield
    finally:
        lite.execute("ROLLBACK")
        lite.close()


def statuses(store: agentrt.Store, run_id: str) -> list[tuple[int, str]]:
    return [(s.index, s.status) for s in store.list_steps(run_id)]


def test_an_execute_refused_busy_writes_nothing_and_a_retry_runs_the_call_once(
    database: str,
) -> None:
    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        session, step = open_step(make_gate(store, tool), "goal")
        run_id = session.run_id
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        claimed_at = step.step.started_at
        before = event_types(store, run_id)
        assert before == ["run.created", "run.started"]

        with held(database, run_id):
            with pytest.raises(StoreBusyError) as raised:
                step.execute_sync()
            assert type(raised.value) is StoreBusyError
            assert str(raised.value).startswith(said_busy(database))
            # Still open and allowed: the session's next step is refused, writing nothing,
            # and a retry while the lock is still held is refused busy again, harmlessly.
            assert session.current() is step and not session.done
            with pytest.raises(RunStateError) as refused:
                session.step_sync()
            assert str(refused.value) == (
                f"step 0 of run {run_id} is still open: its execute was refused busy before "
                "the tool started, and nothing of that execute was written; execute it again, "
                "or close the session"
            )
            with pytest.raises(StoreBusyError):
                step.execute_sync()

        # Rolled back whole: the tool never ran, nothing of the step was written.
        assert tool.calls == []
        assert event_types(store, run_id) == before
        assert statuses(store, run_id) == []
        # The retry makes the same commit (the claim as claimed, the decision as proposed).
        observation = step.execute_sync()
        assert observation.kind == "tool_result"
        assert [c.args for c in tool.calls] == [{"x": 1}]
        assert event_types(store, run_id) == before + STEP_EVENTS + ["step.tool_finished"]
        [recorded] = store.list_steps(run_id)
        assert (recorded.index, recorded.status) == (0, StepStatus.DONE)
        assert recorded.started_at == claimed_at
        assert recorded.decision == Decision.tool_call("note", {"x": 1})
        assert session.current() is None
        with pytest.raises(RunStateError, match="step 0 was executed already; a call runs once"):
            step.execute_sync()
        # The run goes on from step 1.
        again = session.step_sync()
        assert again is not None and again.index == 1
        assert again.propose_sync(Decision.complete("done")).outcome == "ended"
        assert statuses(store, run_id) == [(0, StepStatus.DONE), (1, StepStatus.DONE)]
        assert len(tool.calls) == 1
        assert store.verify_events().intact
        session.close_sync()


def test_the_async_execute_refused_busy_is_retried_by_awaiting_it_again(database: str) -> None:
    async def scenario(store: agentrt.Store, tool: RecordingTool) -> str:
        session = await make_gate(store, tool).begin("goal")
        step = await session.step()
        assert step is not None
        verdict = await step.propose(Decision.tool_call("note", {"x": 2}))
        assert verdict.outcome == VerdictOutcome.ALLOWED
        with held(database, session.run_id), pytest.raises(StoreBusyError, match="past the"):
            await step.execute()
        assert tool.calls == []
        assert event_types(store, session.run_id) == ["run.created", "run.started"]
        assert session.current() is step
        observation = await step.execute()
        assert observation.kind == "tool_result"
        with pytest.raises(RunStateError, match="executed already"):
            await step.execute()
        await session.close()
        return session.run_id

    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        run_id = asyncio.run(scenario(store, tool))
        assert [c.args for c in tool.calls] == [{"x": 2}]
        assert event_types(store, run_id) == [
            "run.created",
            "run.started",
            *STEP_EVENTS,
            "step.tool_finished",
        ]
        assert store.verify_events().intact


def _approved(store: agentrt.Store, push: RecordingTool, clock: FakeClock, **kw: Any) -> str:
    """A run paused on `push` {"x": 1} and approved by alice; its id."""
    session = make_gate(store, push, clock=clock, ids=Ids("b")).begin_sync("push", **kw)
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("push", {"x": 1})).outcome == "pending"
    session.close_sync()
    (pending,) = store.pending_approvals(session.run_id)
    agentrt.Operator(store, now=clock).approve(session.run_id, pending.id, by="alice")
    return session.run_id


def test_a_waiting_runs_execute_refused_busy_resumes_it_on_the_retry(database: str) -> None:
    with agentrt.open_store(database) as store:
        push, clock = push_tool(), FakeClock()
        run_id = _approved(store, push, clock)
        session, verdict = make_gate(store, push, clock=clock).attach_sync(run_id)
        assert verdict is not None and verdict.outcome == "allowed"
        step = session.current()
        assert step is not None
        before = event_types(store, run_id)
        with held(database, run_id), pytest.raises(StoreBusyError):
            step.execute_sync()
        # Nothing of the resume was written: the run still waits, its lease this session's.
        assert push.calls == []
        assert event_types(store, run_id) == before
        run = store.get_run(run_id)
        assert run.status == "WAITING_FOR_APPROVAL"
        assert store.lease(run_id).owner == session._gate.lease_owner
        assert session.current() is step and not session.done
        # The step's claim, decision and approval were recorded long before: what was not
        # written is the refused execute's resume.
        with pytest.raises(RunStateError) as refused:
            session.step_sync()
        assert str(refused.value) == (
            f"step 0 of run {run_id} is still open: its execute was refused busy before "
            "the tool started, and nothing of that execute was written; execute it again, "
            "or close the session"
        )
        observation = step.execute_sync()
        assert observation.kind == "tool_result"
        assert [c.args for c in push.calls] == [{"x": 1}]
        assert event_types(store, run_id) == [
            *before,
            "run.resumed",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert store.get_run(run_id).status == "RUNNING"
        assert store.verify_events().intact
        session.close_sync()


def test_the_retry_of_a_waiting_runs_execute_judges_its_grant_at_the_retry(
    database: str,
) -> None:
    """The grant is judged against the clock when the retry runs, not when the refused
    attempt read it: a grant that lapsed between the two cancels the run, nothing run."""
    with agentrt.open_store(database) as store:
        push, clock = push_tool(), FakeClock()
        run_id = _approved(store, push, clock, limits=Limits(grant_ttl=timedelta(minutes=5)))
        session, verdict = make_gate(store, push, clock=clock).attach_sync(run_id)
        assert verdict is not None and verdict.outcome == "allowed"
        step = session.current()
        assert step is not None
        with held(database, run_id), pytest.raises(StoreBusyError):
            step.execute_sync()  # the grant judged live: a minute old at most
        clock.advance(timedelta(minutes=6))
        observation = step.execute_sync()
        assert observation.kind == "policy_denied"
        assert push.calls == []
        run = store.get_run(run_id)
        assert (run.status, run.reason) == ("CANCELLED", "approval_expired")
        assert "step.tool_started" not in event_types(store, run_id)
        assert session.done
        session.close_sync()


def test_closing_after_an_execute_refused_busy_leaves_the_step_deciding_for_attach(
    database: str,
) -> None:
    """A caller that gives up instead of retrying closes the session: the step's claim and
    decision are committed (`deciding`), as after an allowed verdict that was never
    executed; the next attach interrupts it and the run goes on, the call not made."""
    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        session, step = open_step(make_gate(store, tool), "goal")
        run_id = session.run_id
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        with held(database, run_id), pytest.raises(StoreBusyError):
            step.execute_sync()
        session.close_sync()
        assert tool.calls == []
        assert statuses(store, run_id) == [(0, StepStatus.DECIDING)]
        assert event_types(store, run_id) == [
            "run.created",
            "run.started",
            "step.started",
            "step.decided",
        ]
        assert store.lease(run_id).owner == ""
        attached, verdict = make_gate(store, tool, ids=Ids("c")).attach_sync(run_id)
        assert verdict is None  # taken over: nothing judged, the run goes on
        assert statuses(store, run_id) == [(0, StepStatus.INTERRUPTED)]
        again = attached.step_sync()
        assert again is not None and again.index == 1
        assert again.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        assert again.execute_sync().kind == "tool_result"
        assert len(tool.calls) == 1
        assert statuses(store, run_id) == [(0, StepStatus.INTERRUPTED), (1, StepStatus.DONE)]
        assert store.verify_events().intact
        attached.close_sync()


def test_a_busy_error_once_the_tool_started_never_makes_the_step_executable_again(
    database: str,
) -> None:
    """`step.tool_started` is durable: whatever is raised after it (here a `StoreBusyError`
    injected through the test kit's probe at the tool's effect), the step is not executed
    again by this session, and the record shows it `executing`."""

    def probe(point: str, _: object) -> None:
        if point == POINT_TOOL_EFFECT:
            raise StoreBusyError("injected after the tool ran")

    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        session, step = open_step(make_gate(store, tool, probe=probe), "goal")
        run_id = session.run_id
        assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        with pytest.raises(StoreBusyError, match="injected after the tool ran"):
            step.execute_sync()
        assert len(tool.calls) == 1
        assert event_types(store, run_id)[-1] == "step.tool_started"
        assert statuses(store, run_id) == [(0, StepStatus.EXECUTING)]
        assert session.current() is None
        with pytest.raises(RunStateError, match="step 0 was executed already; a call runs once"):
            step.execute_sync()
        assert len(tool.calls) == 1
        session.close_sync()


def test_the_drivers_tool_start_refused_busy_raises_and_a_resume_asks_again(
    database: str,
) -> None:
    """The Driver is unchanged: the `StoreBusyError` reaches its caller with nothing of the
    step written (the lease given back if the store lets it, else left to this driver,
    whose resume takes it at once), and the resume asks the agent for step 0 again: the
    call runs once."""
    with agentrt.open_store(database) as store:
        tool = RecordingTool("note", SideEffect.READ_ONLY)
        asked: list[int] = []
        lock: list[Any] = []

        def agent(shown: agentrt.StepInput) -> Decision:
            asked.append(len(shown.steps))
            if len(asked) == 1:  # the lock is taken while the agent decides step 0
                holding = held(database, shown.run.id)
                holding.__enter__()
                lock.append(holding)
            if tool.calls:
                return Decision.complete("done")
            return Decision.tool_call("note", {"x": 1})

        def driver_of(ids: Ids) -> agentrt.Driver:
            return agentrt.Driver(
                store=store,
                agent=agent,
                policy=agentrt.default_policy(),
                tools=[tool],
                now=FakeClock(),
                new_id=ids,
            )

        driver = driver_of(Ids())
        try:
            with pytest.raises(StoreBusyError) as raised:
                driver.start_sync("goal")
        finally:
            for holding in lock:
                holding.__exit__(None, None, None)
        assert str(raised.value).startswith(said_busy(database))
        [run] = store.list_runs()
        assert tool.calls == []
        assert run.status == "RUNNING"
        assert event_types(store, run.id) == ["run.created", "run.started"]
        # Its give-back was refused busy too (the lock was still held): the lease is still
        # this driver's, so another driver waits for it to lapse, and this one takes it.
        assert store.lease(run.id).owner == driver.lease_owner
        with pytest.raises(agentrt.RunLeasedError):
            driver_of(Ids("d")).resume_sync(run.id)
        assert event_types(store, run.id) == ["run.created", "run.started"]
        resumed = driver.resume_sync(run.id)
        assert (resumed.status, resumed.reason) == ("COMPLETED", "goal_completed")
        assert asked == [1, 1, 2]  # step 0 asked again, then step 1
        assert len(tool.calls) == 1
        assert statuses(store, run.id) == [(0, StepStatus.DONE), (1, StepStatus.DONE)]
        assert event_types(store, run.id)[2:] == [
            "lease.taken_over",
            "run.resumed",
            *STEP_EVENTS,
            "step.tool_finished",
            "step.started",
            "step.decided",
            "run.finished",
        ]
        assert store.verify_events().intact
