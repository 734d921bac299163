"""A Gate session's write closed from outside (its loop closed under it, then its coroutine
closed, as the cycle collector closes it) while it carried the step's kept claim and decision.

A step's claim and decision are kept in memory and join the step's next commit (decision 0088):
a step's failure, a decision judged invalid, the commit that starts the tool. A write whose
coroutine is closed from outside never learns whether its commit was made: its group in the
store's committer goes on without it, as a cancelled write's does. Before, such a write handed
what it kept back to the session, as a refusal does, and the close then committed it again
(`plan.LEFT_OPEN`): once made, the second claim of the step was refused and the close warned
that the step "was left unrecorded" though it is in the record; refused, the step was recorded
`deciding`, where a crash before the step's first commit leaves nothing. Now what it kept goes
with it (decision 0198's left open, 0202's review for the close's own commit): the record is
as the abandoned commit's group left it, and the lease is given back.

The commit is held in the committer's thread until the loop is closed: no clock raced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, StepStatus, _session
from conftest import Ids, RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import hold_next_group, make_gate

# What each write records when its commit is made, after `run.created`, `run.started`.
_MADE = {
    "a step's failure": (["step.started", "step.failed", "run.finished"], "failed"),
    "an invalid decision": (["step.started", "step.decided", "step.failed"], "failed"),
    "the tool's start": (
        ["step.started", "step.decided", "step.policy", "step.tool_started"],
        "executing",
    ),
}


def _write(write: str, session: agentrt.GateSession) -> Any:
    """The coroutine of `write` for the session's first step (claimed, and for the tool's
    start proposed and allowed, here)."""
    step = session.step_sync()
    assert step is not None
    if write == "a step's failure":
        return step.fail(RuntimeError("the model is unreachable"))
    if write == "an invalid decision":
        return step.propose(Decision.tool_call("no such tool", {}))
    assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
    return step.execute()


@pytest.mark.parametrize("commit", ["made", "refused"])
@pytest.mark.parametrize("write", list(_MADE))
def test_a_write_closed_from_outside_does_not_hand_its_kept_claim_to_the_close(
    any_store: agentrt.Store, write: str, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop is closed under the write's commit, the commit made or refused, the abandoned
    coroutines closed, then the session closed: nothing is committed again and nothing warned;
    the record is the abandoned commit's (made) or holds nothing of the step (refused, as a
    crash before the step's first commit), the lease is given back and the gate attaches the
    run again."""
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool, ids=Ids("a"))
    session = gate.begin_sync("a write closed from outside")
    run_id = session.run_id
    writing = _write(write, session)
    theirs = asyncio.new_event_loop()
    entered, go = hold_next_group(store, commit="before" if commit == "made" else "never")
    try:
        task = theirs.create_task(writing)
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.run_until_complete(asyncio.sleep(0))  # the write waits for its commit
        abandoned = [task, *(t for t in asyncio.all_tasks(theirs) if t is not task)]
        theirs.close()  # the consumer's loop, closed under the write's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # made or refused
        for abandoned_task in abandoned:  # as the collector closes them
            end_abandoned(abandoned_task)
        with caplog.at_level(logging.WARNING, logger="agentrt"):
            session.close_sync()
        assert [r.getMessage() for r in caplog.records if r.name == "agentrt"] == [], (
            "the close committed the abandoned write's kept claim again"
        )
        assert store.lease(run_id).owner == ""
        events, status = _MADE[write]
        if commit == "made":
            assert event_types(store, run_id) == ["run.created", "run.started", *events]
            left = [(0, status)]
        else:
            assert event_types(store, run_id) == ["run.created", "run.started"], (
                "the close recorded the refused write's kept claim"
            )
            left = []
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == left
        if store.get_run(run_id).status == "RUNNING":
            again, verdict = gate.attach_sync(run_id)
            assert verdict is None
            interrupted = [(0, StepStatus.INTERRUPTED)] if status == "executing" and left else left
            assert [(s.index, s.status) for s in store.list_steps(run_id)] == interrupted
            again.close_sync()
        assert tool.calls == []
        assert store.verify_events().intact
    finally:
        go.set()
