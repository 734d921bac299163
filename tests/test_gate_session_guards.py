"""What a Gate session refuses after a failed commit, while a tool runs, and when it was
closed meanwhile (decision 0136; found by an attack on the session's lifecycle).

- A commit that fails after its transaction moved the session's copy ahead of the rows
  (the outcome of a call that ran, say) leaves the session unusable: every further call
  is refused in one sentence, its run is read back so that what it shows follows the
  record, and its close gives the lease back, so that the next owner judges the step
  left in flight (a person decides about a call that may have happened).
- No second step is claimed while a tool of the session runs.
- A refused `_execute_then_close` changes nothing; a `propose` whose session was closed
  by another task meanwhile says so.

The failed commit is a probe raising inside its transaction (`probe_in_tx`), as a full
disk or a dropped connection would fail it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolCall, ToolResult
from conftest import RecordingTool, event_types
from support.gates import make_gate


class DiskFull(Exception):
    pass


def fail_once_at(point: str) -> Any:
    failed: list[str] = []

    def in_tx(at: str, session: object) -> None:
        if at == point and not failed:
            failed.append(at)
            raise DiskFull("the disk is full")

    return in_tx


BROKEN = (
    "the tool finished commit of run {run} failed (DiskFull: the disk is full); what it "
    "would have recorded is not in the record; this session can no longer be used: close "
    "it (its lease is given back) and attach again, where the step left in flight is "
    "judged (decision 0136)"
)


def test_a_session_whose_outcome_commit_failed_refuses_every_call_and_a_person_decides(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    pay = RecordingTool("pay", SideEffect.LOCAL_MUTATION)
    session = make_gate(store, pay, probe_in_tx=fail_once_at("step.tool_finished")).begin_sync(
        "pay once"
    )
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("pay", {"x": 1})).outcome == "allowed"
    with pytest.raises(DiskFull):
        step.execute_sync()
    run_id = session.run_id
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "executing")]
    # The consumer's loop catches the error and goes on with the same session: refused.
    with pytest.raises(agentrt.RunStateError) as refused:
        session.step_sync()
    assert str(refused.value) == BROKEN.format(run=run_id)
    assert session.run.status == "RUNNING"  # read back: what the record holds
    session.close_sync()
    assert store.lease(run_id).owner == ""
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "executing")]
    assert len(pay.calls) == 1
    # The next owner finds the call in flight: interrupted, and a person decides.
    other = make_gate(store, pay)
    again, verdict = other.attach_sync(run_id)
    assert verdict is not None and verdict.outcome == "pending"
    (approval,) = store.pending_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    again.close_sync()
    assert len(pay.calls) == 1


def test_a_terminal_tools_failed_outcome_commit_shows_the_run_as_recorded_and_frees_it(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    finish = RecordingTool("finish", SideEffect.LOCAL_MUTATION, terminal=True)
    gate = make_gate(store, finish, probe_in_tx=fail_once_at("step.tool_finished"))
    session = gate.begin_sync("finish")
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("finish", {"x": 1})).outcome == "allowed"
    with pytest.raises(DiskFull):
        step.execute_sync()
    # The copy said COMPLETED; the record holds RUNNING, and so does the session now.
    assert session.run.status == store.get_run(session.run_id).status == "RUNNING"
    session.close_sync()
    assert store.lease(session.run_id).owner == ""


def test_a_steps_failed_first_commit_runs_nothing_and_leaves_what_a_death_would(
    any_store: agentrt.Store,
) -> None:
    """The step's first commit fails in front of the tool's start (its claim and decision,
    kept in memory, go with it): nothing ran; the session, whose copy had the call
    started, is not used again; its close commits the claim and decision alone, as a
    death before the start would leave them, and the next owner goes on."""
    store = any_store
    pay = RecordingTool("pay", SideEffect.LOCAL_MUTATION)
    session = make_gate(store, pay, probe_in_tx=fail_once_at("step.tool_started")).begin_sync("pay")
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("pay", {"x": 1})).outcome == "allowed"
    with pytest.raises(DiskFull):
        step.execute_sync()
    assert pay.calls == []
    assert session._rs.broken is not None  # the start was in the copy, not in the rows
    session.close_sync()
    run_id = session.run_id
    # As a death before the tool's start would leave it: the claim and decision kept.
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    again, verdict = make_gate(store, pay).attach_sync(run_id)
    assert verdict is None
    step = again.step_sync()
    assert step is not None and step.index == 1
    again.close_sync()
    assert pay.calls == []


def test_no_second_step_is_claimed_while_a_tool_of_the_session_runs(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    started, release = threading.Event(), threading.Event()

    def slow(call: ToolCall) -> ToolResult:
        started.set()
        assert release.wait(10)
        return ToolResult({"ok": True})

    change = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=slow)

    async def main() -> str:
        session = await make_gate(store, change).begin("one step at a time")
        first = await session.step()
        assert first is not None
        assert (await first.propose(Decision.tool_call("change", {"x": 1}))).outcome == "allowed"
        executing = asyncio.create_task(first.execute())
        assert await asyncio.to_thread(started.wait, 10)
        with pytest.raises(agentrt.RunStateError) as refused:
            await session.step()  # another task of the loop, while the tool runs
        assert str(refused.value) == (
            f"a tool of run {session.run_id} is still running; the next step is claimed "
            "once its execute has returned"
        )
        release.set()
        await executing
        second = await session.step()  # once it returned
        assert second is not None and second.index == 1
        await session.close()
        return session.run_id

    run_id = asyncio.run(main())
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
        (0, "done"),
        (1, "deciding"),
    ]
    assert len(change.calls) == 1


def test_a_refused_execute_then_close_changes_nothing(any_store: agentrt.Store) -> None:
    store = any_store
    change = RecordingTool("change", SideEffect.LOCAL_MUTATION)
    session = make_gate(store, change).begin_sync("misuse changes nothing")
    step = session.step_sync()
    assert step is not None
    with pytest.raises(agentrt.RunStateError, match="has no allowed verdict"):
        asyncio.run(step._execute_then_close())  # not proposed yet: refused
    assert step.propose_sync(Decision.tool_call("change", {"x": 1})).outcome == "allowed"
    step.execute_sync()  # a plain execute keeps the lease
    assert store.lease(session.run_id).owner != ""
    assert session.step_sync() is not None  # and the session goes on
    session.close_sync()


class SlowDeny:
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def evaluate(
        self, request: agentrt.ToolRequest, view: agentrt.RunView
    ) -> agentrt.PolicyDecision:
        self.entered.set()
        await self.go.wait()
        return agentrt.PolicyDecision.deny("no")


def test_a_propose_whose_session_was_closed_meanwhile_says_so(any_store: agentrt.Store) -> None:
    store = any_store
    change = RecordingTool("change", SideEffect.LOCAL_MUTATION)

    async def main() -> str:
        policy = SlowDeny()
        session = await make_gate(store, change, policy=policy).begin("closed mid-propose")
        step = await session.step()
        assert step is not None
        proposing = asyncio.create_task(step.propose(Decision.tool_call("change", {"x": 1})))
        await policy.entered.wait()
        await session.close()
        policy.go.set()
        with pytest.raises(agentrt.SessionClosedError) as closed:
            await proposing
        assert str(closed.value) == (
            f"the gate session of run {session.run_id} was closed while step 0's decision "
            "was judged; its verdict was not recorded"
        )
        return session.run_id

    run_id = asyncio.run(main())
    # The close left the step open with its decision, as a crash would leave it.
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    assert store.lease(run_id).owner == ""
    assert "step.failed" not in event_types(store, run_id)
