"""A Gate session's close abandoned with its event loop (the consumer's own loop closed while
the close waited there).

The close waits on its loop for the session's other writes to settle (decision 0176), then
commits the open step (`plan.LEFT_OPEN`) and gives the lease back. A loop closed under either
wait never resumes it. Before, a second close returned at once (the letting go was taken):
the lease stayed the gate's for the life of the process (renewed by the heartbeat while the
close waited for a write, or left to lapse with the run still this gate's), and the gate's
own `attach` was refused "already has a live session" for good.

Now a close finds the letting go taken on a loop since closed and not ended: it makes it
again, on its own loop, as a close does for an execute abandoned with its loop (decision
0198). The commit is held in the committer's thread until the loop is closed: no clock raced.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

import agentrt
from agentrt import RunStateError, StepStatus, _session
from conftest import Ids, event_types
from support.abandoned import end_abandoned, end_abandoned_on
from support.gates import hold_next_group, make_gate


@pytest.mark.parametrize("waiting", ["for another write", "in its own commit"])
def test_a_close_abandoned_with_its_loop_is_made_by_the_next_close(
    any_store: agentrt.Store, waiting: str
) -> None:
    """The loop is closed while the close waits: for a step's failure held in the committer
    (refused there, nothing written), or for its own commit of the open step (made). A second
    close, on another loop, gives the lease back and frees the run: another owner attaches it
    at once (no lease to wait out), and the same gate is no longer refused."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"))
    session = gate.begin_sync("its loop closed under a close")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    theirs = asyncio.new_event_loop()
    pending: list[asyncio.Task[object]] = []
    try:
        if waiting == "for another write":
            entered, go = hold_next_group(store, commit="never")
            pending.append(theirs.create_task(step.fail(ValueError("no decision"))))
        else:
            entered, go = hold_next_group(store, commit="before")
        pending.append(theirs.create_task(session.close()))
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.run_until_complete(asyncio.sleep(0))  # the close is waiting now
        theirs.close()  # the consumer's loop, closed under the close
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # made or refused
        assert not any(task.done() for task in pending)
        session.close_sync()
        assert store.lease(run_id).owner == "", (
            "the lease is kept by a close abandoned with its loop"
        )
        assert store.get_run(run_id).status == "RUNNING"
        if waiting == "for another write":
            assert event_types(store, run_id) == ["run.created", "run.started"]
            left = []
        else:  # the open step, committed by the abandoned close
            assert event_types(store, run_id)[-1] == "step.started"
            left = [(0, StepStatus.DECIDING)]
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == left
        # Another owner takes the run at once: the lease was given back, not left to lapse.
        other = make_gate(store, ids=Ids("b"), lease_owner="another")
        again, verdict = other.attach_sync(run_id)
        assert verdict is None
        assert store.lease(run_id).owner == other.lease_owner
        again.close_sync()
        # And the run is this gate's to attach again too.
        mine, _ = gate.attach_sync(run_id)
        mine.close_sync()
        assert store.verify_events().intact
    finally:
        go.set()
        for task in pending:
            end_abandoned(task)  # the abandoned coroutines, ended here (their loop is gone)
        end_abandoned_on(theirs)  # and the tasks the runtime started on it


def test_a_close_whose_loop_is_closed_after_it_ended_is_not_made_again(
    any_store: agentrt.Store,
) -> None:
    """A close that ended on a loop closed since is done: a second close changes nothing (it
    does not free the run of a session of the same gate attached after it)."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"))
    session = gate.begin_sync("closed, then its loop closed")
    run_id = session.run_id
    theirs = asyncio.new_event_loop()
    theirs.run_until_complete(session.close())
    theirs.close()
    again, _ = gate.attach_sync(run_id)
    session.close_sync()
    with pytest.raises(RunStateError, match="already has a live session"):
        gate.attach_sync(run_id)
    assert store.lease(run_id).owner == gate.lease_owner
    again.close_sync()
    assert store.lease(run_id).owner == ""


@pytest.mark.parametrize("commit", ["made", "refused"])
def test_a_close_abandoned_in_its_own_commit_and_collected_does_not_commit_its_step_again(
    any_store: agentrt.Store, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop is closed under the close's own commit of the open step, and the abandoned
    coroutines are closed (as the collector closes them, the usual case) before the next
    close. That commit was made or not, as its group went: the next close does not make it
    again (once made, a second claim of step 0 was refused, and the close warned that the
    step "was left unrecorded" though it is in the record). Refused, the step is left
    unrecorded, as a crash before the step's first commit leaves it. The lease is given back
    either way."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"))
    session = gate.begin_sync("its close's commit abandoned, then collected")
    run_id = session.run_id
    assert session.step_sync() is not None
    theirs = asyncio.new_event_loop()
    entered, go = hold_next_group(store, commit="before" if commit == "made" else "never")
    try:
        closing = theirs.create_task(session.close())
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.run_until_complete(asyncio.sleep(0))  # the close is waiting for its commit
        abandoned = [closing, *(t for t in asyncio.all_tasks(theirs) if t is not closing)]
        theirs.close()  # the consumer's loop, closed under the close's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # made or refused
        for task in abandoned:  # outer first, as the collector may: then the letting go
            end_abandoned(task)
        with caplog.at_level(logging.WARNING, logger="agentrt"):
            session.close_sync()
        assert [r.getMessage() for r in caplog.records if r.name == "agentrt"] == []
        assert store.lease(run_id).owner == ""
        if commit == "made":
            assert event_types(store, run_id) == ["run.created", "run.started", "step.started"]
            left = [(0, StepStatus.DECIDING)]
        else:
            assert event_types(store, run_id) == ["run.created", "run.started"]
            left = []
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == left
        mine, _ = gate.attach_sync(run_id)
        mine.close_sync()
        assert store.verify_events().intact
    finally:
        go.set()
