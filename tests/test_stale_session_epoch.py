"""A stale session of one owner never writes under that owner's newer lease (decision 0204).

One owner string stands for every session of a Gate or Driver (decisions 0187, 0195). A
session whose write was abandoned with its event loop is let go of at once (decision 0198),
so the same gate may take the run again (epoch 2) while that write still waits in the
store's committer. A write made then is judged by the session's epoch as well as its owner:
a tool's outcome commit too, which judged the owner alone (the step it finishes is
`executing` again when the newer session runs the same call again, as a tool's
reconciliation that answers "safe to repeat" has it, decision 0067).

The commit is held in the committer's thread, and the newer session's tool waits on it:
no clock raced.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import agentrt
from agentrt import Decision, Reconciled, SideEffect, StepStatus, ToolCall, ToolResult, _session
from conftest import RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import hold_next_group, make_gate


class RepeatableNote(RecordingTool):
    """A local mutation whose own reconciliation says an interrupted call is safe to repeat;
    `during` runs inside each call (on the tool's thread)."""

    def __init__(self) -> None:
        super().__init__("note", SideEffect.LOCAL_MUTATION, result=self._result)
        self.during: list[Any] = []

    def _result(self, call: ToolCall) -> ToolResult:
        self.during.pop(0)()
        return ToolResult(content={"call": len(self.calls)}, summary=f"note {len(self.calls)}")

    def reconcile(self, call: ToolCall) -> Reconciled:
        return Reconciled.not_found("nothing of it was kept", safe_to_repeat=True)


def test_a_tool_outcome_abandoned_with_its_loop_is_not_recorded_over_the_same_gates_rerun(
    any_store: agentrt.Store,
) -> None:
    """Session 1 (epoch 1) runs step 0's call; its outcome commit is held in the committer
    and its loop closed, so its close gives the lease back without waiting for it. The same
    gate attaches the run (a takeover: epoch 2, step 0 interrupted), the tool's
    reconciliation says the call is safe to repeat, and session 2 runs it again on step 0
    (`executing` again). Session 1's outcome, made while session 2's call runs, must not
    finish session 2's step: session 2 records its own outcome, and the run goes on."""
    store = any_store
    tool = RepeatableNote()
    gate = make_gate(store, tool)
    session = gate.begin_sync("a stale outcome")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
    held: list[Any] = []
    armed = threading.Event()

    def hold_the_outcome() -> None:  # the next group commit is this call's outcome
        held.extend(hold_next_group(store, commit="after"))
        armed.set()

    tool.during.append(hold_the_outcome)
    theirs = asyncio.new_event_loop()
    executing = theirs.create_task(step.execute())
    committer = _session.committer_for(store)
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, armed.wait, 30))
        entered, go = held
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # the consumer's loop, closed under the outcome's commit
        session.close_sync()  # not waiting for the abandoned outcome: the lease given back
        assert store.lease(run_id).owner == ""
        again, verdict = gate.attach_sync(run_id)  # the same gate: epoch 2, same owner
        assert verdict is not None and verdict.outcome == "allowed"
        assert (store.lease(run_id).owner, store.lease(run_id).epoch) == (gate.lease_owner, 2)
        seen: list[tuple[list[str], list[tuple[int, str]]]] = []

        def stale_outcome_made_meanwhile() -> None:
            go.set()  # session 1's outcome reaches the store now, during session 2's call
            committer.submit(lambda tx: None).result(30)  # made (or refused) by now
            steps = [(s.index, str(s.status)) for s in store.list_steps(run_id)]
            seen.append((event_types(store, run_id), steps))

        tool.during.append(stale_outcome_made_meanwhile)
        open_step = again.current()
        assert open_step is not None
        try:
            observation: object = open_step.execute_sync()
        except agentrt.RunStateError as refused:  # its step finished by session 1 meanwhile
            observation = refused
        ((events, steps),) = seen
        assert steps == [(0, "executing")], "session 1's outcome finished session 2's step"
        assert events[-3:] == ["run.resumed", "step.policy", "step.tool_started"]
        assert isinstance(observation, agentrt.Observation)
        assert observation.kind == "tool_result" and observation.content == {"call": 2}
        (done,) = store.list_steps(run_id)
        assert (done.status, done.observation and done.observation.content) == (
            StepStatus.DONE,
            {"call": 2},
        )
        assert event_types(store, run_id).count("step.tool_finished") == 1
        nxt = again.step_sync()
        assert nxt is not None and nxt.index == 1
        assert nxt.propose_sync(Decision.complete("done")).outcome == "ended"
        again.close_sync()
        assert store.get_run(run_id).status == "COMPLETED"
        assert store.verify_events().intact
    finally:
        if held:
            held[1].set()
        end_abandoned(executing)  # the abandoned execute, ended here (its loop is gone)
