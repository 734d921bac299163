"""A close's letting go abandoned with its loop, collected on a thread that holds its gate's
lock (decision 0210).

The close's letting go (`GateSession._letting_go`) frees the run for its gate (`_free`,
`Gate._let_go`) in a `finally`: when its coroutine is closed from outside (its loop gone, the
cycle collector finding it), that runs on whatever thread allocates then. One that holds
the gate's lock at that moment (an `attach` refused "already has a live session" builds its
error under it) must not wait for that lock a second time, for ever, as decision 0209 made
for a claim under the session's close lock. So must a session dropped without a close, whose
finalizer (`_abandoned`) frees the run when the collector finds it.

Every race is ordered by events or made by hand (a collection under a lock), no real clock.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import agentrt
from agentrt import _session
from conftest import Ids
from support.abandoned import end_abandoned
from support.gates import collected_while_held, hold_next_group, make_gate


def test_a_letting_go_abandoned_with_its_loop_collected_under_its_gates_lock_is_not_a_deadlock(
    any_store: agentrt.Store,
) -> None:
    """The consumer's loop is closed while its close commits the open step (held in the
    committer, then made); the close's coroutines are collected on a thread holding the
    gate's lock. They free the run without waiting for that lock; a next close gives the
    lease back, and the gate attaches the run again."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"))
    session = gate.begin_sync("its close abandoned with its loop, then collected")
    run_id = session.run_id
    assert session.step_sync() is not None
    theirs = asyncio.new_event_loop()
    entered, go = hold_next_group(store, commit="before")
    try:
        closing = theirs.create_task(session.close())
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.run_until_complete(asyncio.sleep(0))  # the close waits for its commit
        letting_go = [t for t in asyncio.all_tasks(theirs) if t is not closing]
        assert len(letting_go) == 1
        theirs.close()  # the consumer's loop, closed under the close's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # it was made
        closed = threading.Event()

        def collect() -> None:
            """As the collector closes it: on a thread that holds the gate's lock."""
            with gate._lock:
                end_abandoned(letting_go[0])
            closed.set()

        threading.Thread(target=collect, daemon=True).start()
        assert closed.wait(10), "the collected letting go waited for a lock its own thread held"
        end_abandoned(closing)
    finally:
        go.set()
    session.close_sync()
    assert store.lease(run_id).owner == ""
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "deciding")]
    again, _ = gate.attach_sync(run_id)
    again.close_sync()
    assert store.verify_events().intact


def test_a_session_dropped_in_a_reference_cycle_collected_under_its_gates_lock_is_not_a_deadlock(
    any_store: agentrt.Store,
) -> None:
    """A session dropped without a close, in a reference cycle: its finalizer (`_abandoned`)
    frees the run when the cycle collector finds it, on a thread that holds the gate's lock
    then. It does not wait for that lock; the gate attaches the run again (its lease, left to
    lapse as a crash leaves it, is this gate's owner's: taken back at once)."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"))
    session = gate.begin_sync("dropped in a cycle, collected under the gate's lock")
    run_id = session.run_id
    session.cycle = session  # type: ignore[attr-defined]
    dropped = weakref.ref(session)
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        del session
        collected_while_held(gate._lock, dropped, "session")
    finally:
        gc.enable()
    # Freed for the gate: its attach is not refused "already has a live session".
    again, _ = gate.attach_sync(run_id)
    again.close_sync()
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact
