"""Edges of a Gate session a reading suspected, each made here at will (decision 0209).

- A claim (`step()`) abandoned with its event loop in its status read, its coroutine closed
  when the cycle collector finds it on a thread that holds the session's close lock (a
  close looking under it): it must not wait for that lock, held by its own thread.

Every race is ordered by events or made by hand (a collection under a lock), no real clock.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

import agentrt
from agentrt import SideEffect, _session, _step
from conftest import RecordingTool
from support.abandoned import end_abandoned, end_abandoned_on
from support.gates import collected_while_held, hold_next_group, make_gate
from support.models import TINY_REQUEST, Replies


def change_tool() -> RecordingTool:
    return RecordingTool("change", SideEffect.LOCAL_MUTATION)


def test_a_claim_abandoned_with_its_loop_collected_while_its_session_is_locked_is_not_a_deadlock(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's loop is closed while its `step()` reads the run's status; the claim's
    coroutine is closed when the cycle collector finds it, on whatever thread allocates then:
    one inside a close's look under the session's close lock must not wait for that lock a
    second time, for ever. Nothing of the step was claimed: the session is usable after."""
    store = any_store
    gate = make_gate(store, change_tool())
    session = gate.begin_sync("its loop closed under a claim, then collected")
    theirs = asyncio.new_event_loop()
    reached = theirs.create_future()

    async def read_never_answered(fn: Any) -> Any:
        """The status read, in flight when the loop is closed: never answered."""
        reached.set_result(None)
        return await asyncio.get_running_loop().create_future()

    monkeypatch.setattr(_step, "run_io", read_never_answered)
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        claiming = theirs.create_task(session.step())
        theirs.run_until_complete(reached)
        theirs.close()  # the consumer's loop, closed under the claim's status read
        monkeypatch.undo()
        assert not claiming.done()
        task = weakref.ref(claiming)
        del claiming
        collected_while_held(session._close_lock, task, "claim")
    finally:
        gc.enable()
    # Nothing of the abandoned claim was kept: the session claims step 0 afresh.
    step = session.step_sync()
    assert step is not None and step.index == 0
    session.close_sync()
    assert store.lease(session.run_id).owner == ""
    assert [s.status for s in store.list_steps(session.run_id)] == ["deciding"]


@pytest.mark.parametrize("commit", ["never", "before"])
def test_a_dispatch_closed_from_outside_with_the_steps_claim_leaves_the_session_unusable(
    any_store: agentrt.Store, commit: str
) -> None:
    """The consumer's loop is closed under the step's first model call, its dispatch commit
    (which carries the step's kept claim) in the store's committer; the commit is refused
    (`never`, nothing written) or made (`before`), and the call's coroutine is closed (as the
    collector closes it). What the claim became is unknown to the session: it is not used
    again, a second model call of the step included (refused, nothing written: made, it was
    recorded and charged under a step the record did not hold). The close gives the lease
    back; the record is as the commit went."""
    store = any_store
    gate = make_gate(store, change_tool(), model=Replies())
    session = gate.begin_sync("asked, its loop closed under the dispatch")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None and step.model is not None
    entered, go = hold_next_group(store, commit=commit)
    theirs = asyncio.new_event_loop()
    asking = theirs.create_task(step.model.generate(TINY_REQUEST))
    assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
    theirs.close()  # the consumer's loop, closed under the dispatch commit
    go.set()
    _session.committer_for(store).submit(lambda tx: None).result(30)  # that commit ended
    end_abandoned(asking)  # closed from outside, as the collector closes it
    before = (store.list_steps(run_id), store.list_model_calls(run_id), store.get_run(run_id))
    with pytest.raises(agentrt.RunStateError, match="can no longer be used") as refused:
        asyncio.run(step.model.generate(TINY_REQUEST))
    assert f"the model call of step 0 of run {run_id} was closed from outside" in str(refused.value)
    with pytest.raises(agentrt.RunStateError, match="can no longer be used"):
        step.propose_sync({"kind": "final", "text": "done"})
    with pytest.raises(agentrt.RunStateError, match="can no longer be used"):
        session.step_sync()
    assert (
        store.list_steps(run_id),
        store.list_model_calls(run_id),
        store.get_run(run_id),
    ) == before
    session.close_sync()
    assert store.lease(run_id).owner == ""
    steps = [(s.index, s.status) for s in store.list_steps(run_id)]
    calls = [(c.step_id, c.status) for c in store.list_model_calls(run_id)]
    if commit == "never":
        assert (steps, calls) == ([], [])
    else:
        assert (steps, calls) == ([(0, "deciding")], [(step.id, "dispatched")])
    assert store.get_run(run_id).status == "RUNNING"
    assert store.verify_events().intact
    end_abandoned_on(theirs)  # the tasks the runtime started on it, ended here (it is gone)
