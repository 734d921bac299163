"""A Gate step's `execute` abandoned with its event loop (the consumer's own loop closed
under it, decision 0198).

The consumer's loop is closed while `execute` waits there: for the commit that starts its
tool (made, or refused, in the store's committer), or for a plain-function tool running on
its thread. Nothing will ever resume that coroutine, so it never finishes a close. Before,
a close (made after the loop was closed, or a second one after a first that found the
execute running) returned at once and left the lease renewed for the life of the process:
the same gate's `attach` of the run was refused ("already has a live session").

Now a close finds the execute's loop closed: the session is broken as a cancelled
execute's is (decision 0183), and its lease is given back (by its epoch, decision 0187),
at once, or, while the tool's thread still runs, once it returns (decision 0165); the
run is then this gate's to attach again, judged as a crash left it.

The commit is held in the committer's thread (made, or refused, then held) and the tool
on an event until the test has closed the loop: no clock raced.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    RunStateError,
    SessionClosedError,
    SideEffect,
    StepStatus,
    ToolCall,
    ToolResult,
    _session,
)
from conftest import Ids, RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import collected_while_held, hold_next_group, make_gate


def allowed_step(gate: agentrt.Gate) -> tuple[agentrt.GateSession, agentrt.GateStep]:
    session = gate.begin_sync("its loop closed under an execute")
    step = session.step_sync()
    assert step is not None
    verdict = step.propose_sync(Decision.tool_call("note", {"x": 1}))
    assert verdict.outcome == "allowed"
    return session, step


@pytest.mark.parametrize("gone", ["before the close", "after a first close"])
@pytest.mark.parametrize("made", [True, False], ids=["start-made", "start-refused"])
def test_an_execute_abandoned_with_its_loop_in_its_start_commit_does_not_keep_the_run(
    any_store: agentrt.Store, made: bool, gone: str
) -> None:
    """The loop is closed while the commit that starts the tool is in the committer: the
    close gives the lease back and frees the run; the same gate attaches it and finds the
    step as a crash left it (a read-only call's start interrupted, or nothing of the step),
    and the run goes on. The tool never ran."""
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool)
    session, step = allowed_step(gate)
    run_id = session.run_id
    entered, go = hold_next_group(store, commit="before" if made else "never")
    theirs = asyncio.new_event_loop()
    executing = theirs.create_task(step.execute())
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        if gone == "after a first close":
            session.close_sync()  # the execute runs: it is to finish the close
            assert store.lease(run_id).owner == gate.lease_owner
        theirs.close()  # the consumer's loop, closed under the tool start's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # made or refused
        assert not executing.done()
        session.close_sync()
        assert store.lease(run_id).owner == "", "the lease is kept for an abandoned execute"
        assert store.get_run(run_id).status == "RUNNING"
        with pytest.raises(SessionClosedError):
            session.step_sync()
        if made:
            assert event_types(store, run_id)[-2:] == ["step.policy", "step.tool_started"]
            left = [(0, StepStatus.EXECUTING)]
        else:
            assert event_types(store, run_id) == ["run.created", "run.started"]
            left = []
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == left
        # The run is free again: the same gate attaches it, as a crash left it.
        again, verdict = gate.attach_sync(run_id)
        assert verdict is None
        nxt = again.step_sync()
        assert nxt is not None and nxt.index == len(left)
        assert nxt.propose_sync(Decision.complete("done")).outcome == "ended"
        statuses = [(s.index, s.status) for s in store.list_steps(run_id)]
        assert statuses == [(0, StepStatus.INTERRUPTED)] * made + [(len(left), StepStatus.DONE)]
        again.close_sync()
        assert tool.calls == []
        assert store.verify_events().intact
    finally:
        go.set()
        end_abandoned(executing)  # the abandoned execute, ended here (its loop is gone)


def test_an_execute_abandoned_with_its_loop_keeps_the_lease_while_its_tool_thread_runs(
    any_store: agentrt.Store,
) -> None:
    """The loop is closed while a plain-function tool runs on its thread: nobody may start
    the call beside it, so the close keeps the lease (renewed) and the run this gate's
    until the thread returns; then the lease is given back, and the same gate's attach
    finds step 0 `executing` (its outcome never recorded) and interrupts it."""
    store = any_store
    started, release = threading.Event(), threading.Event()

    def blocking(call: ToolCall) -> ToolResult:
        started.set()
        assert release.wait(30)
        return ToolResult(content={"ok": True}, summary="note ok")

    tool = RecordingTool("note", SideEffect.READ_ONLY, result=blocking)
    gate = make_gate(store, tool)
    session, step = allowed_step(gate)
    run_id = session.run_id
    theirs = asyncio.new_event_loop()
    executing = theirs.create_task(step.execute())
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, started.wait, 30))
        theirs.close()  # the consumer's loop, closed while its tool runs on a thread
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner  # kept while the tool runs
        with pytest.raises(RunStateError, match="already has a live session"):
            gate.attach_sync(run_id)
        thread = session._rs.lingering_tool
        assert thread is not None and not thread.done()
        given_back = threading.Event()
        thread.add_done_callback(lambda _: given_back.set())  # after the session's own
        release.set()
        assert given_back.wait(30)
        assert store.lease(run_id).owner == "", "the lease is kept after the tool returned"
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.EXECUTING)
        ]
        again, verdict = gate.attach_sync(run_id)
        assert verdict is None
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED)
        ]
        again.close_sync()
        assert [c.args for c in tool.calls] == [{"x": 1}]
        assert store.verify_events().intact
    finally:
        release.set()
        end_abandoned(executing)  # the abandoned execute, ended here (its loop is gone)


def test_a_session_whose_execute_was_abandoned_with_its_loop_says_so_and_is_not_used(
    any_store: agentrt.Store,
) -> None:
    """Before the close, the session is not used again once its execute's loop is gone:
    a claim on another loop is refused, saying what the session knows, and writes nothing."""
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool, ids=Ids("a"))
    session, step = allowed_step(gate)
    run_id = session.run_id
    entered, go = hold_next_group(store, commit="before")
    theirs = asyncio.new_event_loop()
    executing = theirs.create_task(step.execute())
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)
        written = event_types(store, run_id)
        with pytest.raises(RunStateError) as refused:
            session.step_sync()
        assert str(refused.value) == (
            f"the execute of step 0 of run {run_id} was abandoned with its event loop (the "
            "loop was closed under it) before its outcome was recorded: whether its tool's "
            "start is in the record is unknown to this session; this session can no longer "
            "be used: close it (its lease is given back) and attach again, where the step "
            "left in flight is judged (decision 0136)"
        )
        assert event_types(store, run_id) == written
        session.close_sync()
        assert store.lease(run_id).owner == ""
    finally:
        go.set()
        end_abandoned(executing)


def test_an_execute_abandoned_with_its_loop_collected_while_its_session_is_locked_is_not_a_deadlock(
    any_store: agentrt.Store,
) -> None:
    """The coroutine of an execute abandoned with its loop is closed when the cycle collector
    finds it, on whatever thread allocates then: one that holds the session's close lock
    (a claim, a close) must not wait for that lock a second time, for ever. The execute is
    marked gone, and the close judges it abandoned: the lease is given back."""
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool)
    session, step = allowed_step(gate)
    run_id = session.run_id
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        entered, go = hold_next_group(store, commit="never")
        theirs = asyncio.new_event_loop()
        executing = theirs.create_task(step.execute())
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # the consumer's loop, closed under the tool start's commit
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)  # refused
        task = weakref.ref(executing)
        del executing, step
        collected_while_held(session._close_lock, task, "execute")
    finally:
        gc.enable()
    session.close_sync()
    assert store.lease(run_id).owner == ""
    # The refused start's kept claim and decision went with its coroutine, closed (its
    # commit's outcome never learnt, as a cancel's): nothing of the step is recorded, as a
    # crash before the step's first commit leaves it.
    assert store.list_steps(run_id) == []
    again, verdict = gate.attach_sync(run_id)  # the run is free again
    assert verdict is None
    again.close_sync()
    assert tool.calls == []
    assert store.verify_events().intact


def test_an_abandoned_execute_keeps_the_lease_while_its_thread_runs_after_a_cancelled_call(
    any_store: agentrt.Store,
) -> None:
    """An earlier step's call cancelled mid-call left its thread running (the session's
    `lingering_tool`, its outcome recorded: the session goes on). The next step's execute is
    then abandoned with its loop while its own thread runs: the lease is kept until both
    threads have returned, not given back once the earlier one has (the later call's step is
    `executing`, and nobody may start it beside it)."""
    store = any_store
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def blocking(call: ToolCall) -> ToolResult:
        n = int(call.args["x"])
        started[n].set()
        assert release[n].wait(30)
        return ToolResult(content={"ok": True}, summary="note ok")

    tool = RecordingTool("note", SideEffect.READ_ONLY, result=blocking)
    gate = make_gate(store, tool)
    session = gate.begin_sync("an earlier call cancelled, the next one abandoned")
    first = session.step_sync()
    assert first is not None
    assert first.propose_sync(Decision.tool_call("note", {"x": 0})).outcome == "allowed"
    run_id = session.run_id
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    executing: list[asyncio.Task[Any]] = []
    try:
        executing.append(loops[0].create_task(first.execute()))
        assert loops[0].run_until_complete(loops[0].run_in_executor(None, started[0].wait, 30))
        executing[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            loops[0].run_until_complete(executing[0])
        earlier = session._rs.lingering_tool
        assert earlier is not None and not earlier.done()
        second = session.step_sync()  # the earlier outcome is recorded: the session goes on
        assert second is not None
        assert second.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
        executing.append(loops[1].create_task(second.execute()))
        assert loops[1].run_until_complete(loops[1].run_in_executor(None, started[1].wait, 30))
        loops[1].close()  # the consumer's loop, closed while the second call runs
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner  # both threads run
        returned = threading.Event()
        earlier.add_done_callback(lambda _: returned.set())  # after the session's own
        release[0].set()
        assert returned.wait(30)
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the lease was given back while the abandoned execute's tool thread runs"
        )
        with pytest.raises(RunStateError, match="already has a live session"):
            gate.attach_sync(run_id)
        lingering = session._rs.lingering_tool
        assert lingering is not None
        given_back = threading.Event()
        lingering.add_done_callback(lambda _: given_back.set())
        release[1].set()
        assert given_back.wait(30)
        assert store.lease(run_id).owner == "", "the lease is kept after both threads returned"
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED),  # cancelled mid-call, recorded
            (1, StepStatus.EXECUTING),
        ]
        again, verdict = gate.attach_sync(run_id)
        assert verdict is None
        assert [(s.index, s.status) for s in store.list_steps(run_id)][1] == (
            1,
            StepStatus.INTERRUPTED,
        )
        again.close_sync()
        assert [c.args for c in tool.calls] == [{"x": 0}, {"x": 1}]
        assert store.verify_events().intact
    finally:
        for r in release:
            r.set()
        loops[0].close()
        if len(executing) > 1:
            end_abandoned(executing[1])
