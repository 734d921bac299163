"""The Gate under a careless or concurrent consumer: what the consumer holds is its
own, and no two calls on a session or a step can both act.

Found by review of issue 10 Part 2: the input's steps were the session's own
objects (an allowed call could be rewritten before `execute`), two concurrent
`step()` or `propose()` calls both acted, and `close()` during `execute` gave the
lease up while the tool still ran.

The tests that take `any_store` run on SQLite and on PostgreSQL (issue 21 item 5;
decision 0105); the one that reads the file behind the store and the one that waits for
a dropped session to be collected stay on SQLite for now.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Gate, SideEffect, ToolCall, ToolResult, ToolSpec, VerdictOutcome
from conftest import FakeClock, Ids, RecordingTool
from support.rows import snapshot


class NotSix:
    """Allows any call whose `x` is not 666."""

    def evaluate(
        self, request: agentrt.ToolRequest, view: agentrt.RunView
    ) -> agentrt.PolicyDecision:
        if request.args.get("x") == 666:
            return agentrt.PolicyDecision.deny("666 is not allowed")
        return agentrt.PolicyDecision.allow()


def gate(store: agentrt.Store, *tools: Any) -> Gate:
    return Gate(store=store, policy=NotSix(), tools=list(tools), now=FakeClock(), new_id=Ids())


def test_what_the_consumer_does_to_its_input_changes_nothing_recorded_or_executed(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    read = RecordingTool("read", SideEffect.READ_ONLY, result={"files": ["a"]})
    session = gate(store, read).begin_sync("read")
    first = session.step_sync()
    assert first is not None
    first.propose_sync(Decision.tool_call("read", {"x": 1}))
    first.execute_sync()
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("read", {"x": 2})).outcome == "allowed"
    shown = session.input()
    # The consumer rewrites what it was shown: the allowed call, an earlier result, the run.
    shown.steps[-1].decision.args["x"] = 666  # type: ignore[union-attr]
    shown.steps[0].observation.content["files"].append("b")  # type: ignore[union-attr]
    step.execute_sync()
    assert [call.args for call in read.calls] == [{"x": 1}, {"x": 2}]
    recorded = store.list_steps(session.run_id)
    assert [s.decision.args for s in recorded] == [{"x": 1}, {"x": 2}]  # type: ignore[union-attr]
    assert recorded[0].observation.content == {"files": ["a"]}  # type: ignore[union-attr]
    session.close_sync()


def test_an_input_copies_only_the_steps_written_since_the_last_one(
    any_store: agentrt.Store,
) -> None:
    """A run of n steps costs one copy per step written, not n per input (issue 20): the
    copies of steps unchanged since the last input are the very same objects, so a
    consumer's edit to one stays in the next input; a step written again is copied again."""
    store = any_store
    read = RecordingTool("read", SideEffect.READ_ONLY, result={"files": ["a"]})
    session = gate(store, read).begin_sync("read")
    for x in range(3):
        step = session.step_sync()
        assert step is not None
        step.propose_sync(Decision.tool_call("read", {"x": x}))
        step.execute_sync()
    before = session.input()
    before.steps[0].observation.content["files"].append("mine")  # type: ignore[union-attr]
    step = session.step_sync()  # a fourth step claimed: one new step, none replaced
    assert step is not None
    after_claim = session.input()
    assert [a is b for a, b in zip(before.steps, after_claim.steps, strict=False)] == [True] * 3
    assert after_claim.steps[0].observation.content == {"files": ["a", "mine"]}  # type: ignore[union-attr]
    step.propose_sync(Decision.tool_call("read", {"x": 3}))  # the fourth step written again
    after_propose = session.input()
    assert after_propose.steps[:3] == after_claim.steps[:3]
    assert all(a is b for a, b in zip(after_claim.steps[:3], after_propose.steps[:3], strict=True))
    assert after_propose.steps[3] is not after_claim.steps[3]
    assert after_propose.steps[3].decision is not None
    assert after_propose.steps[3].decision.args == {"x": 3}
    step.execute_sync()
    session.close_sync()
    assert [s.decision.args for s in store.list_steps(session.run_id)] == [  # type: ignore[union-attr]
        {"x": 0},
        {"x": 1},
        {"x": 2},
        {"x": 3},
    ]


def test_two_concurrent_step_calls_claim_one_step(any_store: agentrt.Store) -> None:
    store = any_store

    async def main() -> list[Any]:
        session = await gate(store).begin("two claims")
        try:
            return await asyncio.gather(session.step(), session.step(), return_exceptions=True)
        finally:
            await session.close()

    results = asyncio.run(main())
    assert sum(isinstance(r, agentrt.RunStateError) for r in results) == 1
    (run,) = store.list_runs()
    assert [s.index for s in store.list_steps(run.id)] == [0]


def test_a_second_propose_concurrent_or_after_a_cancelled_one_records_no_second_decision(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    read = RecordingTool("read", SideEffect.READ_ONLY)

    async def main() -> tuple[list[Any], Any]:
        session = await gate(store, read).begin("two proposals")
        step = await session.step()
        assert step is not None
        both = await asyncio.gather(
            step.propose(Decision.tool_call("read", {"x": 1})),
            step.propose(Decision.tool_call("read", {"x": 2})),
            return_exceptions=True,
        )
        await session.close()
        return both, session.run_id

    both, run_id = asyncio.run(main())
    (verdict,) = [r for r in both if not isinstance(r, BaseException)]
    (refused,) = [r for r in both if isinstance(r, BaseException)]
    assert isinstance(refused, agentrt.RunStateError)
    assert verdict.outcome == VerdictOutcome.ALLOWED
    decided = [e.payload for e in store.list_events(run_id=run_id) if e.type == "step.decided"]
    assert len(decided) == 1
    (step,) = store.list_steps(run_id)
    assert step.decision is not None and step.decision.args == verdict.request.args


class Slow:
    """An async local change that takes `seconds` and says when it started."""

    def __init__(self, seconds: float) -> None:
        self.spec = ToolSpec(
            name="slow",
            description="takes a while",
            input_schema={"type": "object"},
            side_effect=SideEffect.LOCAL_MUTATION,
            timeout=timedelta(seconds=10),
        )
        self.seconds = seconds
        self.started = threading.Event()
        self.calls = 0

    async def call(self, call: ToolCall) -> ToolResult:
        self.calls += 1
        self.started.set()
        await asyncio.sleep(self.seconds)
        return ToolResult({"done": True})


@pytest.mark.slow
def test_close_during_execute_keeps_the_lease_until_the_outcome_is_recorded(
    store: agentrt.Store, db_path: Path
) -> None:
    slow = Slow(0.6)
    owners: list[str] = []

    async def main() -> tuple[Any, str]:
        session = await gate(store, slow).begin("slow change")
        step = await session.step()
        assert step is not None
        await step.propose(Decision.tool_call("slow", {}))
        running = asyncio.create_task(step.execute())
        while not slow.started.is_set():
            await asyncio.sleep(0.01)
        await session.close()  # the tool is still running
        owners.append(store.lease(session.run_id).owner)
        observation = await running
        return observation, session.run_id

    observation, run_id = asyncio.run(main())
    assert owners[0] != ""  # the lease was kept while the tool ran
    assert observation.content == {"done": True}
    (step,) = store.list_steps(run_id)
    assert step.status == "done"
    assert store.lease(run_id).owner == ""  # given back once the outcome was recorded
    assert slow.calls == 1
    types = [e.type for e in store.list_events(run_id=run_id)]
    assert types.count("step.tool_finished") == 1 and "lease.taken_over" not in types
    assert snapshot(db_path)  # the file reads whole


@pytest.mark.slow
def test_a_session_dropped_without_close_stops_renewing_its_lease_once_collected(
    store: agentrt.Store,
) -> None:
    import gc
    import time

    read = RecordingTool("read", SideEffect.READ_ONLY)
    first = Gate(
        store=store,
        policy=NotSix(),
        tools=[read],
        now=FakeClock(),
        new_id=Ids(),
        lease_ttl=timedelta(milliseconds=300),
    )
    session = first.begin_sync("a loop that forgets to close")
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    run_id = session.run_id
    del session, step  # the loop's bug: no close()
    gc.collect()
    # A renewal already under way when the session was collected lands: wait for the
    # heartbeat's thread to end (on the event, not for a time that load can outlast).
    beat = f"agentrt-heartbeat-{run_id[:8]}"
    deadline = time.monotonic() + 60
    while any(t.name == beat for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the heartbeat of a collected session still runs"
        time.sleep(0.01)
    renewed = store.lease(run_id).expires_at
    time.sleep(0.7)  # past two lease lengths: a live heartbeat would have renewed
    assert store.lease(run_id).expires_at == renewed
    # The run can be taken over (as a crash would leave it), by the same gate too.
    again, verdict = first.attach_sync(run_id)
    assert again.run.status == "RUNNING" and verdict is None
    assert read.calls == []  # the allowed call was never run, and is not run by attach
    again.close_sync()
