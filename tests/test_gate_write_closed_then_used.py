"""A Gate step's failure (`fail`) cut short in its commit: cancelled, or its coroutine closed
from outside (its loop closed under it, then closed as the cycle collector closes it).

Its commit (the step's kept claim, the step failed, the run ended) goes on in the store's
committer, made or not, as its group goes; the session never learns which (decision 0206:
what it kept goes with it). The session's copy shows the step claimed either way. Before, the
session stayed usable: with the commit refused, its next `step()` judged the limits on that
copy and ended a run with no step recorded at `max_steps` (`limit.exceeded`), or claimed step
1 over a step 0 the record does not hold (each of its commits then refused by the store). Now
the session is broken, as an execute cut short before its outcome was recorded is (decision
0183): `step()` says so and writes nothing; the close gives the lease back, and `attach`
judges the record as the commit left it.

The commit is held in the committer's thread until the write is cut short: no clock raced.
"""

from __future__ import annotations

import asyncio

import pytest

import agentrt
from agentrt import RunStateError, SideEffect, _session
from conftest import Ids, RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import hold_next_group, make_gate


@pytest.mark.parametrize("commit", ["refused", "made"])
@pytest.mark.parametrize("how", ["closed from outside", "cancelled"])
def test_a_failure_cut_short_in_its_commit_leaves_the_session_unusable(
    any_store: agentrt.Store, how: str, commit: str
) -> None:
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool, ids=Ids("a"))
    session = gate.begin_sync("a failure cut short", agentrt.Limits(max_steps=1))
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    failing = step.fail(RuntimeError("the model is unreachable"))
    theirs = asyncio.new_event_loop()
    entered, go = hold_next_group(store, commit="before" if commit == "made" else "never")
    try:
        task = theirs.create_task(failing)
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.run_until_complete(asyncio.sleep(0))  # the failure waits for its commit
        if how == "cancelled":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                theirs.run_until_complete(task)
            theirs.close()
            go.set()
            _session.committer_for(store).submit(lambda tx: None).result(30)
        else:
            abandoned = [task, *(t for t in asyncio.all_tasks(theirs) if t is not task)]
            theirs.close()  # the consumer's loop, closed under the failure's commit
            go.set()
            _session.committer_for(store).submit(lambda tx: None).result(30)
            for abandoned_task in abandoned:  # as the collector closes them
                end_abandoned(abandoned_task)
        cut = "was cancelled" if how == "cancelled" else "was closed from outside"
        with pytest.raises(RunStateError) as refused:
            session.step_sync()
        assert str(refused.value) == (
            f"the failure of step 0 of run {run_id} {cut} before its commit returned: whether "
            "it is in the record is unknown to this session; this session can no longer be "
            "used: close it (its lease is given back) and attach again, where the step left "
            "in flight is judged (decision 0136)"
        )
        made = ["step.started", "step.failed", "run.finished"] if commit == "made" else []
        assert event_types(store, run_id) == ["run.created", "run.started", *made], (
            "the session went on over a copy the record does not hold"
        )
        session.close_sync()
        assert store.lease(run_id).owner == ""
        if commit == "made":
            assert store.get_run(run_id).status == "FAILED"
        else:
            again, verdict = gate.attach_sync(run_id)
            assert verdict is None
            fresh = again.step_sync()
            assert fresh is not None and fresh.index == 0
            again.close_sync()
        assert tool.calls == []
        assert store.verify_events().intact
    finally:
        go.set()
        theirs.close()
