"""A Gate step's `execute` cancelled while the commit that starts its tool is in flight.

The group committer makes a work it has begun whatever its caller does (its invariants):
the caller is told `CancelledError`, and the commit is made or fails with its group. So
the session cannot know whether `step.tool_started` is in the record, and its copy may
be ahead of the rows or behind them: the session is not used again (`broken`, decision
0136), and `close` then `attach` judge the step as a crash left it.

Before, the session's next `step()` was accepted. When the commit had been made, the
run went on to its end with step 0 `executing` for good: a tool start neither finished
nor interrupted, its tool never called (the test kit's `step_left_in_flight`). When it
had failed, the next step's first commit was refused ("moved while claiming").

The commit is held in the committer's thread by a wrapper of the store's `transactions`
(made, or refused, then held) until the test has cancelled the caller: no clock raced.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import agentrt
from agentrt import Decision, RunStateError, SideEffect, StepStatus
from conftest import Ids, RecordingTool, event_types
from support.gates import hold_next_group, make_gate


async def cancelled_execute(
    session: agentrt.GateSession, entered: threading.Event, go: threading.Event
) -> None:
    step = session.current()
    assert step is not None
    task = asyncio.ensure_future(step.execute())
    assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
    task.cancel()
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def refusal(run_id: str) -> str:
    return (
        f"the execute of step 0 of run {run_id} was cancelled before its outcome was "
        "recorded: whether its tool's start is in the record is unknown to this session; "
        "this session can no longer be used: close it (its lease is given back) and attach "
        "again, where the step left in flight is judged (decision 0136)"
    )


@pytest.mark.parametrize("made", [True, False], ids=["start-made", "start-refused"])
def test_an_execute_cancelled_during_its_start_commit_ends_the_sessions_steps(
    database: str, made: bool
) -> None:
    store = agentrt.open_store(database)
    tool = RecordingTool("note", SideEffect.READ_ONLY)

    async def scenario() -> str:
        session = await make_gate(store, tool).begin("goal")
        step = await session.step()
        assert step is not None
        verdict = await step.propose(Decision.tool_call("note", {"x": 1}))
        assert verdict.outcome == "allowed"
        entered, go = hold_next_group(store, commit="before" if made else "never")
        await cancelled_execute(session, entered, go)
        written = event_types(store, session.run_id)
        with pytest.raises(RunStateError) as refused:
            await session.step()
        assert str(refused.value) == refusal(session.run_id)
        assert event_types(store, session.run_id) == written  # the refusal wrote nothing
        await session.close()
        return session.run_id

    try:
        run_id = asyncio.run(scenario())
        assert tool.calls == []
        if made:
            assert event_types(store, run_id) == [
                "run.created",
                "run.started",
                "step.started",
                "step.decided",
                "step.policy",
                "step.tool_started",
            ]
            left = [(0, StepStatus.EXECUTING)]
        else:
            assert event_types(store, run_id) == ["run.created", "run.started"]
            left = []
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == left
        # The next attach judges it as a crash left it: a read-only call's start
        # interrupted (or no step at all), and the run goes on.
        attached, verdict = make_gate(store, tool, ids=Ids("c")).attach_sync(run_id)
        assert verdict is None
        again = attached.step_sync()
        assert again is not None and again.index == len(left)
        assert again.propose_sync(Decision.complete("done")).outcome == "ended"
        statuses = [(s.index, s.status) for s in store.list_steps(run_id)]
        assert statuses == [(0, StepStatus.INTERRUPTED)] * made + [(len(left), StepStatus.DONE)]
        assert store.verify_events().intact
        attached.close_sync()
    finally:
        store.close()


def refusal_after_start(run_id: str) -> str:
    return (
        f"the execute of step 0 of run {run_id} was cancelled before its outcome was "
        "recorded: its tool's start is in the record (the session committed "
        "step.tool_started), and whether its outcome is in the record is unknown to this "
        "session; this session can no longer be used: close it (its lease is given back) "
        "and attach again, where the step left in flight is judged (decision 0136)"
    )


def test_an_execute_cancelled_during_its_outcome_commit_says_its_start_is_recorded(
    database: str,
) -> None:
    """The start commit returned (the session knows `step.tool_started` is durable), the tool
    ran, and the caller is cancelled while the outcome's commit is in flight (refused, so
    the session's copy has no observation): the session is broken, and what it says is what
    it knows, the start recorded and the outcome unknown (not "whether its tool's start is
    in the record is unknown", which the start-commit cancel says, above)."""
    store = agentrt.open_store(database)
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    held: list[tuple[threading.Event, threading.Event]] = []

    def probe(point: str, rs: object) -> None:
        if point == "tool.effect":  # the tool returned; its outcome's commit comes next
            held.append(hold_next_group(store, commit="never"))

    async def scenario() -> str:
        session = await make_gate(store, tool, probe=probe).begin("goal")
        step = await session.step()
        assert step is not None
        verdict = await step.propose(Decision.tool_call("note", {"x": 1}))
        assert verdict.outcome == "allowed"
        task = asyncio.ensure_future(step.execute())
        while not held:
            await asyncio.sleep(0)
        entered, go = held[0]
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        written = event_types(store, session.run_id)
        with pytest.raises(RunStateError) as refused:
            await session.step()
        assert str(refused.value) == refusal_after_start(session.run_id)
        assert event_types(store, session.run_id) == written
        await session.close()
        return session.run_id

    try:
        run_id = asyncio.run(scenario())
        assert [c.args for c in tool.calls] == [{"x": 1}]
        assert event_types(store, run_id)[-2:] == ["step.policy", "step.tool_started"]
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.EXECUTING)
        ]
        attached, verdict = make_gate(store, tool, ids=Ids("c")).attach_sync(run_id)
        assert verdict is None
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED)
        ]
        assert store.verify_events().intact
        attached.close_sync()
    finally:
        store.close()
