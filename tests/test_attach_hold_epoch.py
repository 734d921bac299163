"""Each hold of a waiting run is a lease of its own epoch (decision 0204).

A Gate's `attach` of an approved waiting run holds the run's lease (`hold_waiting`,
decision 0032), and a session gives a lease back by its owner and epoch (decision 0187).
One owner stands for every session of a Gate, so two holds of one waiting run by that
gate must not share an epoch: a late release of the first must leave the second alone.

The late release is made as the public API makes it: a session's close cut short by its
event loop ending (every task cancelled) while its release waits in the store. The close
frees the run for the gate's next session then (decision 0176), and the release, made
after, is the first hold's. The store's next transaction on another thread is held for
the test, so nothing races a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import agentrt
from agentrt import Decision, VerdictOutcome, _session
from conftest import FakeClock, event_types
from support.abandoned import end_abandoned
from support.gates import hold_next_group, make_gate, open_step
from support.tools import push_tool


def approved_waiting_run(gate: agentrt.Gate, store: agentrt.Store, clock: FakeClock) -> str:
    session, step = open_step(gate, "push it")
    assert step.propose_sync(Decision.tool_call("push", {"x": 1})).outcome == "pending"
    session.close_sync()
    (pending,) = store.pending_approvals(session.run.id)
    agentrt.Operator(store, now=clock).approve(session.run.id, pending.id, by="alice")
    return session.run.id


def hold_next_transaction_off_this_thread(store: Any) -> tuple[threading.Event, threading.Event]:
    """Hold the store's next `transaction()` opened on another thread until `go` is set
    (`entered` once it is held), then let it run; `done` once it has ended."""
    entered, go, done = threading.Event(), threading.Event(), threading.Event()
    real = store.transaction
    here = threading.get_ident()
    armed = [True]

    @contextlib.contextmanager
    def transaction(*args: Any, **kw: Any) -> Iterator[Any]:
        if not armed[0] or threading.get_ident() == here:
            with real(*args, **kw) as tx:
                yield tx
            return
        armed[0] = False
        entered.set()
        assert go.wait(30)
        try:
            with real(*args, **kw) as tx:
                yield tx
        finally:
            done.set()

    store.transaction = transaction
    return entered, go, done


def test_a_late_release_of_a_gates_first_hold_leaves_its_second_hold_of_the_run_alone(
    any_store: agentrt.Store,
) -> None:
    """Session 1 attaches an approved waiting run (a hold) and is closed on its own loop;
    the loop ends while the close's release waits in the store, so the close frees the run
    and the release comes later. The same gate attaches the run again (session 2, a hold
    of its own) before that release is made: the release gives up session 1's hold only,
    never session 2's, which goes on to execute the approved call."""
    store = any_store
    push, clock = push_tool(), FakeClock()
    gate = make_gate(store, push, clock=clock)
    run_id = approved_waiting_run(gate, store, clock)
    theirs = asyncio.new_event_loop()
    first, verdict = theirs.run_until_complete(gate.attach(run_id))
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    first_hold = store.lease(run_id)
    assert (first_hold.owner, first_hold.epoch) == (gate.lease_owner, 2)  # paused at 1
    entered, go, done = hold_next_transaction_off_this_thread(store)
    closing = theirs.create_task(first.close())
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        # The loop ends (as `asyncio.run` ends one): every task of it is cancelled.
        for task in asyncio.all_tasks(theirs):
            task.cancel()
        theirs.run_until_complete(
            asyncio.gather(*asyncio.all_tasks(theirs), return_exceptions=True)
        )
        assert closing.done()
        second, verdict = gate.attach_sync(run_id)  # the same gate: a hold of its own
        assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
        second_hold = store.lease(run_id)
        assert (second_hold.owner, second_hold.epoch) == (gate.lease_owner, 3)
        go.set()  # session 1's release is made now
        assert done.wait(30)
        assert store.lease(run_id) == second_hold, "a late release gave up the second hold"
        step = second.current()
        assert step is not None
        assert step.execute_sync().kind == "tool_result"
        (call,) = push.calls
        assert (call.args, call.lease_epoch) == ({"x": 1}, 3)  # the second hold's epoch
        second.close_sync()
        # No hold appended an event; the resume that ran is recorded once.
        assert event_types(store, run_id)[-5:] == [
            "approval.decided",
            "run.resumed",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert store.lease(run_id).owner == ""
        assert store.verify_events().intact
    finally:
        go.set()
        theirs.close()


def test_a_first_holds_start_commit_abandoned_with_its_loop_is_refused_under_the_second_hold(
    any_store: agentrt.Store,
) -> None:
    """Session 1 attaches an approved waiting run (a hold, epoch 2) and `execute`s it; its
    start commit (leave waiting, `run.resumed`, the tool started) is held in the committer
    and its loop closed, so its close gives the hold back at once (decision 0198). The same
    gate attaches the run again (session 2, a hold at epoch 3). Session 1's start commit,
    made then, names its own hold's epoch and is refused, nothing written: the run still
    waits under session 2's hold, which runs the approved call once, at its epoch. (Before
    decision 0204 both holds were at epoch 1 and `leave_waiting` judged the owner alone:
    session 1's commit left waiting and started the call under session 2's hold.)"""
    store = any_store
    push, clock = push_tool(), FakeClock()
    gate = make_gate(store, push, clock=clock)
    run_id = approved_waiting_run(gate, store, clock)
    theirs = asyncio.new_event_loop()
    first, verdict = theirs.run_until_complete(gate.attach(run_id))
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    step = first.current()
    assert step is not None
    entered, go = hold_next_group(store, commit="after")  # the next group: the start commit
    executing = theirs.create_task(step.execute())
    committer = _session.committer_for(store)
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # the consumer's loop, closed under the start commit
        first.close_sync()  # not waiting for the abandoned execute: the hold given back
        assert store.lease(run_id).owner == ""
        events_before = event_types(store, run_id)
        second, verdict = gate.attach_sync(run_id)  # the same gate: a hold of its own
        assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
        second_hold = store.lease(run_id)
        assert (second_hold.owner, second_hold.epoch) == (gate.lease_owner, 3)
        go.set()  # session 1's start commit reaches the store now
        committer.submit(lambda tx: None).result(30)  # made (or refused) by now
        assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
        assert store.lease(run_id) == second_hold, "session 1 left waiting under session 2's hold"
        assert event_types(store, run_id) == events_before
        assert push.calls == []
        open_again = second.current()
        assert open_again is not None
        assert open_again.execute_sync().kind == "tool_result"
        (call,) = push.calls
        assert (call.args, call.lease_epoch) == ({"x": 1}, 3)
        second.close_sync()
        assert event_types(store, run_id)[-5:] == [
            "approval.decided",
            "run.resumed",
            "step.policy",
            "step.tool_started",
            "step.tool_finished",
        ]
        assert store.lease(run_id).owner == ""
        assert store.verify_events().intact
    finally:
        go.set()
        end_abandoned(executing)  # the abandoned execute, ended here (its loop is gone)
