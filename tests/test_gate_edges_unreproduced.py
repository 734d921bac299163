"""Edges of a Gate session a reading suspected, each made here at will (decision XXXX).

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
from agentrt import SideEffect, _step
from conftest import RecordingTool
from support.gates import collected_while_held, make_gate


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
