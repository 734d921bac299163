"""A Gate session keeps its lease while any tool of its calls may still run (decisions 0017,
0163, 0165, 0198, 0199).

A call cancelled mid-call records its unknown outcome and the session goes on, its tool's
thread still running: the lease is kept (renewed) until that thread returns, or another
owner could take the run over and start the call beside it. Two such calls, one after the
other, each keep it: before, the second cancel set the session's one kept thread to its own
(or to none, with no thread of its own: an async tool, whose outcome's commit then gave the
lease back), and the lease went while the first call's thread still ran.

An execute whose coroutine is closed by hand on a live loop while an async tool's task runs
keeps the lease (renewed) until that task ends, as for a thread: before, the close gave it
back at once, the task still running.

Tools are held on events the test sets: no clock raced.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    RunLeasedError,
    RunStateError,
    SideEffect,
    StepStatus,
    ToolCall,
    ToolResult,
)
from conftest import Ids, RecordingTool
from support.abandoned import end_abandoned_on
from support.gates import make_gate
from support.leases import expire_lease


class _Waiting:
    """An async tool that runs until the test lets it end (on the loop it was called on)."""

    def __init__(self) -> None:
        self.spec = RecordingTool("wait", SideEffect.READ_ONLY).spec
        self.started = threading.Event()
        self.release: asyncio.Event | None = None
        self.ended: list[int] = []

    async def call(self, call: ToolCall) -> ToolResult:
        self.release = asyncio.Event()
        self.started.set()
        await self.release.wait()
        self.ended.append(int(call.args["x"]))
        return ToolResult(content={"ok": True}, summary="wait ok")


def _blocking() -> tuple[
    RecordingTool, list[threading.Event], list[threading.Event], list[threading.Event]
]:
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    returned = [threading.Event(), threading.Event()]

    def blocking(call: ToolCall) -> ToolResult:
        n = int(call.args["x"])
        started[n].set()
        assert release[n].wait(30)
        returned[n].set()
        return ToolResult(content={"ok": True}, summary="note ok")

    tool = RecordingTool("note", SideEffect.READ_ONLY, result=blocking)
    return tool, started, release, returned


def _allowed(session: agentrt.GateSession, tool: str, x: int) -> agentrt.GateStep:
    step = session.step_sync()
    assert step is not None
    assert step.propose_sync(Decision.tool_call(tool, {"x": x})).outcome == "allowed"
    return step


def _attached_as_a_crash_left_it(store: agentrt.Store, gate: agentrt.Gate, run_id: str) -> None:
    """Step 0 is `executing`, as its tool's start left it, with no lease held: the gate's
    attach judges it as a crash leaves it (interrupted, never run again), and the record's
    chain is intact."""
    assert store.lease(run_id).owner == ""
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, StepStatus.EXECUTING)]
    again, verdict = gate.attach_sync(run_id)
    assert verdict is None
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, StepStatus.INTERRUPTED)]
    again.close_sync()
    assert store.verify_events().intact


def _cancelled_mid_call(
    loop: asyncio.AbstractEventLoop, step: agentrt.GateStep, started: Any
) -> None:
    task = loop.create_task(step.execute())
    assert loop.run_until_complete(loop.run_in_executor(None, started.wait, 30))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)


@pytest.mark.parametrize("second", ["async tool", "thread returning first"])
def test_two_calls_cancelled_mid_call_keep_the_lease_until_both_tools_have_returned(
    any_store: agentrt.Store, second: str
) -> None:
    """Step 0's call is cancelled mid-call, its thread left running; so is step 1's, with no
    thread left (an async tool, cancelled) or one that returns first. The lease is kept, and
    the run refused to another owner, until step 0's thread has returned too."""
    store = any_store
    note, started, release, _ = _blocking()
    waiting = _Waiting()
    gate = make_gate(store, note, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    other = make_gate(store, note, waiting, ids=Ids("b"), lease_owner="another")  # type: ignore[arg-type]
    session = gate.begin_sync("two calls cancelled mid-call")
    run_id = session.run_id
    loop = asyncio.new_event_loop()
    try:
        _cancelled_mid_call(loop, _allowed(session, "note", 0), started[0])
        first = session._rs.lingering_tool
        assert first is not None and not first.done()
        if second == "async tool":
            _cancelled_mid_call(loop, _allowed(session, "wait", 1), waiting.started)
        else:
            executing = loop.create_task(_allowed(session, "note", 1).execute())
            assert loop.run_until_complete(loop.run_in_executor(None, started[1].wait, 30))
            (flight,) = session._executions
            (thread,) = flight.threads  # step 1's call's thread
            executing.cancel()
            with pytest.raises(asyncio.CancelledError):
                loop.run_until_complete(executing)
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the second cancel's outcome gave the lease back while the first call's thread runs"
        )
        session.close_sync()
        if second == "thread returning first":
            # Its future's callbacks run in the order they were added, on the tool's thread:
            # one added now runs after the session's (a give back, if it waited for this
            # thread alone), so the lease is looked at once they have all run.
            callbacks_run = threading.Event()
            thread.add_done_callback(lambda _: callbacks_run.set())
            release[1].set()
            assert callbacks_run.wait(30)
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the lease was given back while the first call's thread runs"
        )
        with pytest.raises(RunLeasedError):
            other.attach_sync(run_id)
        given_back = threading.Event()
        lingering = session._rs.lingering_tool
        assert lingering is not None
        lingering.add_done_callback(lambda _: given_back.set())  # after the session's own
        release[0].set()
        release[1].set()
        assert given_back.wait(30)
        assert store.lease(run_id).owner == ""
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED),
            (1, StepStatus.INTERRUPTED),
        ]
        again, verdict = other.attach_sync(run_id)
        assert verdict is None
        again.close_sync()
        assert store.verify_events().intact
    finally:
        for r in release:
            r.set()
        loop.close()


def test_an_execute_closed_by_hand_keeps_the_lease_while_its_async_tools_task_runs(
    any_store: agentrt.Store,
) -> None:
    """The execute's coroutine is closed by hand on a live loop while its async tool's task
    runs: nothing records the outcome (the step stays `executing`), and the close keeps the
    lease, renewed, and the run this gate's, until the task ends; then it is given back and
    the attach interrupts the step."""
    store = any_store
    waiting = _Waiting()
    gate = make_gate(store, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("an execute closed by hand")
    run_id = session.run_id
    step = _allowed(session, "wait", 0)
    loop = asyncio.new_event_loop()
    try:
        coro = step.execute()
        executing = loop.create_task(coro)
        assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
        coro.close()  # by hand, the loop live and the tool's task running on it
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the lease was given back while the async tool's task runs"
        )
        with pytest.raises(RunStateError, match="already has a live session"):
            gate.attach_sync(run_id)
        given_back = threading.Event()
        session._on_given_back.append(given_back.set)
        assert waiting.release is not None
        waiting.release.set()
        while waiting.ended != [0]:
            loop.run_until_complete(asyncio.sleep(0.01))
        loop.run_until_complete(asyncio.sleep(0))  # the task's done callbacks, run
        assert given_back.wait(30), "the lease is kept after the task ended"
        _attached_as_a_crash_left_it(store, gate, run_id)
        del executing
    finally:
        if waiting.release is not None:
            waiting.release.set()
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


def test_an_execute_closed_after_its_loop_was_closed_under_its_async_tool_gives_the_lease_back(
    any_store: agentrt.Store,
) -> None:
    """The loop is closed while the async tool's task runs, then the execute's coroutine is
    closed (by hand, as the collector would): that task never runs again, so nothing may still
    run under the lease: the close gives it back, and the gate's attach interrupts the step."""
    store = any_store
    waiting = _Waiting()
    gate = make_gate(store, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("an execute closed with its loop")
    run_id = session.run_id
    step = _allowed(session, "wait", 0)
    loop = asyncio.new_event_loop()
    coro = step.execute()
    executing = loop.create_task(coro)
    assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
    loop.close()
    coro.close()
    session.close_sync()
    assert store.lease(run_id).owner == "", "the lease is kept for a task that never runs again"
    again, verdict = gate.attach_sync(run_id)
    assert verdict is None
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, StepStatus.INTERRUPTED)]
    again.close_sync()
    assert waiting.ended == []
    assert store.verify_events().intact
    del executing
    end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


def test_a_kept_async_tools_task_that_ends_gives_the_lease_back_off_its_event_loop(
    any_store: agentrt.Store,
) -> None:
    """The task kept for the lease ends on the consumer's loop; the lease is given back by a
    store transaction (a slow server, a lock held by another writer: it waits), not on that
    loop, where it would stall every other run's coroutine meanwhile: on another thread, as a
    tool thread's end gives it back on that thread."""
    store = any_store
    waiting = _Waiting()
    gate = make_gate(store, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("a kept task ends")
    run_id = session.run_id
    step = _allowed(session, "wait", 0)
    loop = asyncio.new_event_loop()
    try:
        coro = step.execute()
        executing = loop.create_task(coro)
        assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
        coro.close()  # by hand: the task kept for the lease
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner
        on_a_loop: list[bool] = []
        real = store.transaction

        def transaction(*args: Any, **kw: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_a_loop.append(True)
            except RuntimeError:
                on_a_loop.append(False)
            return real(*args, **kw)

        store.transaction = transaction  # type: ignore[method-assign]
        given_back = threading.Event()
        session._on_given_back.append(given_back.set)
        assert waiting.release is not None
        waiting.release.set()
        while waiting.ended != [0]:
            loop.run_until_complete(asyncio.sleep(0.01))
        loop.run_until_complete(asyncio.sleep(0))  # the task's done callbacks, run
        assert given_back.wait(30)
        assert store.lease(run_id).owner == ""
        assert on_a_loop == [False], "the lease was given back by a store call on the event loop"
        del executing
    finally:
        if waiting.release is not None:
            waiting.release.set()
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


class _Swallowing(_Waiting):
    """An async tool that swallows its cancellation (a bare `except:` in a retry loop) and
    runs until the test lets it end."""

    def __init__(self) -> None:
        super().__init__()
        self.swallowed = 0

    async def call(self, call: ToolCall) -> ToolResult:
        self.release = asyncio.Event()
        self.started.set()
        while True:
            try:
                await self.release.wait()
                break
            except asyncio.CancelledError:
                self.swallowed += 1
        self.ended.append(int(call.args["x"]))
        return ToolResult(content={"ok": True}, summary="wait ok")


def test_an_execute_closed_by_hand_in_its_tools_cancel_grace_keeps_the_lease_while_the_task_runs(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The execute is cancelled mid-call; its async tool swallows the cancel, and while the
    execute waits out the grace given to the tool's task to unwind (made long here: never
    raced), its coroutine is closed by hand. The task still runs: the close keeps the lease,
    renewed, until it ends (before, nothing was kept and the close gave the lease back)."""
    from agentrt import _execute

    monkeypatch.setattr(_execute, "CANCEL_GRACE_S", 3600.0)
    store = any_store
    waiting = _Swallowing()
    gate = make_gate(store, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("an execute closed by hand in its cancel grace")
    run_id = session.run_id
    step = _allowed(session, "wait", 0)
    loop = asyncio.new_event_loop()
    try:
        coro = step.execute()
        executing = loop.create_task(coro)
        assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
        executing.cancel()
        while not waiting.swallowed:  # the execute now waits out the grace
            loop.run_until_complete(asyncio.sleep(0))
        coro.close()  # by hand, the tool's task running on the live loop
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the lease was given back while the async tool's task runs"
        )
        given_back = threading.Event()
        session._on_given_back.append(given_back.set)
        assert waiting.release is not None
        waiting.release.set()
        while waiting.ended != [0]:
            loop.run_until_complete(asyncio.sleep(0.01))
        loop.run_until_complete(asyncio.sleep(0))  # the task's done callbacks, run
        assert given_back.wait(30)
        assert store.lease(run_id).owner == ""
        again, _ = gate.attach_sync(run_id)
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED)
        ]
        again.close_sync()
        assert store.verify_events().intact
        del executing
    finally:
        if waiting.release is not None:
            waiting.release.set()
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


def test_a_session_collected_while_its_cancelled_calls_thread_runs_keeps_the_run_until_it_returns(
    any_store: agentrt.Store,
) -> None:
    """Step 0's call is cancelled mid-call, its thread left running (the lease kept and
    renewed for it), and the session is dropped without `close()` and collected. While the
    thread runs the run is not its gate's to attach again (a takeover of its own lease, at
    once, beside the running call: epoch 2, the collected session's heartbeat renewing that
    newer lease by the owner they share) nor another owner's; once the thread returns the
    collected session stops renewing, and the run is its gate's to take again, as a crash
    leaves it."""
    import gc
    import weakref

    store = any_store
    note, started, release, returned = _blocking()
    gate = make_gate(store, note, ids=Ids("a"))
    other = make_gate(store, note, ids=Ids("b"), lease_owner="another")
    session = gate.begin_sync("collected while its call's thread runs")
    run_id = session.run_id
    loop = asyncio.new_event_loop()
    try:
        _cancelled_mid_call(loop, _allowed(session, "note", 0), started[0])
        lingering = session._rs.lingering_tool
        assert lingering is not None and not lingering.done()
        collected = weakref.ref(session)
        del session  # the loop's bug: no close()
        gc.collect()
        assert collected() is None
        assert store.lease(run_id).owner == gate.lease_owner
        with pytest.raises(RunLeasedError):
            other.attach_sync(run_id)
        with pytest.raises(RunStateError):  # its thread runs: not this gate's to take yet
            gate.attach_sync(run_id)
        assert (store.lease(run_id).owner, store.lease(run_id).epoch) == (gate.lease_owner, 1)
        release[0].set()
        assert returned[0].wait(30)
        # The collected session's heartbeat ends once the thread returned (looked at until it
        # does, on the event of its thread's end, not for a time load can outlast).
        beat = f"agentrt-heartbeat-{run_id[:8]}"
        deadline = time.monotonic() + 60
        while any(t.name == beat for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the collected session's heartbeat still runs"
            time.sleep(0.01)
        again, verdict = gate.attach_sync(run_id)  # as a crash leaves it: its own lease
        assert again.run.status == "RUNNING" and verdict is None
        assert store.lease(run_id).epoch == 2
        again.close_sync()
        assert store.lease(run_id).owner == ""
        assert len(note.calls) == 1
    finally:
        release[0].set()
        release[1].set()
        loop.close()


def test_a_call_executed_then_closed_keeps_the_lease_while_an_earlier_calls_thread_runs(
    any_store: agentrt.Store,
) -> None:
    """`_execute_then_close` (the LangGraph adapter's, one call per session there) gives the
    lease back with the call's outcome. Driven here through the internal call after step 0's
    call was cancelled mid-call (its thread left running): the outcome's commit keeps the
    lease, and the close gives it back once that thread has returned, not before."""
    store = any_store
    note, started, release, _ = _blocking()
    quick = RecordingTool("quick", SideEffect.READ_ONLY)
    gate = make_gate(store, note, quick, ids=Ids("a"))
    other = make_gate(store, note, quick, ids=Ids("b"), lease_owner="another")
    session = gate.begin_sync("a call executed then closed beside a running thread")
    run_id = session.run_id
    loop = asyncio.new_event_loop()
    try:
        _cancelled_mid_call(loop, _allowed(session, "note", 0), started[0])
        step = _allowed(session, "quick", 1)
        observation = loop.run_until_complete(step._execute_then_close())
        assert observation.kind == "tool_result"
        assert store.lease(run_id).owner == gate.lease_owner, (
            "the outcome's commit gave the lease back while an earlier call's thread runs"
        )
        session.close_sync()
        assert store.lease(run_id).owner == gate.lease_owner
        with pytest.raises(RunLeasedError):
            other.attach_sync(run_id)
        given_back = threading.Event()
        session._on_given_back.append(given_back.set)
        release[0].set()
        assert given_back.wait(30)
        assert store.lease(run_id).owner == ""
        assert store.get_run(run_id).status == "RUNNING"
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [
            (0, StepStatus.INTERRUPTED),
            (1, StepStatus.DONE),
        ]
        again, verdict = other.attach_sync(run_id)
        assert verdict is None
        again.close_sync()
        assert store.verify_events().intact
    finally:
        for r in release:
            r.set()
        loop.close()


@pytest.mark.parametrize("closed", ["after the close", "before the close"])
def test_a_kept_async_tools_task_whose_loop_is_closed_gives_the_lease_back(
    any_store: agentrt.Store, closed: str
) -> None:
    """The execute's coroutine is closed by hand while its async tool's task runs (the task
    kept for the lease), then the task's loop is closed, after the session's close or before
    it: the task never runs again, so nothing runs under the lease. The heartbeat finds the
    loop closed at its next beat: the lease is given back, the heartbeat stops, and the run
    is free; the step stays `executing`, interrupted by the gate's attach as after a crash.
    The beat is the heartbeat's own look (`on_beat`), made here: a short lease, beating on
    its own, raced a loaded machine (a stall of its length before the tool's start refused
    it); `test_lease_contract.py` shows the heartbeat making that look at each beat."""
    store = any_store
    waiting = _Waiting()
    gate = make_gate(store, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("a kept task's loop closed")
    run_id = session.run_id
    step = _allowed(session, "wait", 0)
    given_back = threading.Event()
    session._on_given_back.append(given_back.set)
    loop = asyncio.new_event_loop()
    try:
        coro = step.execute()
        executing = loop.create_task(coro)
        assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
        coro.close()  # by hand: the task kept for the lease
        if closed == "after the close":
            session.close_sync()
            assert store.lease(run_id).owner == gate.lease_owner
            loop.close()  # the task's loop, closed with the task pending
        else:
            loop.close()
            session.close_sync()
        heartbeat = session._rs.heartbeat
        heartbeat._on_beat()  # the heartbeat's next beat, before its renewal
        assert given_back.wait(30), "the lease is renewed for a task whose loop was closed"
        assert heartbeat._stop.is_set(), "the heartbeat renews a lease given back"
        _attached_as_a_crash_left_it(store, gate, run_id)
        assert waiting.ended == []
        del executing
    finally:
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


@pytest.mark.parametrize(
    "ended", ["a cancelled call's thread returned", "a kept task's loop closed"]
)
def test_a_close_after_every_kept_tool_ended_gives_the_lease_back_before_it_returns(
    any_store: agentrt.Store, ended: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tool the session kept its lease for ended before the close: a cancelled call's
    thread that returned, or a kept async tool's task whose loop was closed (ended by the
    heartbeat's beat, made here by calling it). The close then has nothing to wait for: it
    gives the lease back and frees the run before it returns, so the gate's attach right
    after is not refused. Before, it handed that to the kept future's callback, run on an
    I/O thread after the close had returned ("already has a live session"). Whatever is
    handed off the loop is held here until the assertions are made, so no thread is raced."""
    store = any_store
    note, started, release, returned = _blocking()
    waiting = _Waiting()
    gate = make_gate(store, note, waiting, ids=Ids("a"))  # type: ignore[arg-type]
    session = gate.begin_sync("every kept tool ended before the close")
    run_id = session.run_id
    loop = asyncio.new_event_loop()
    held: list[Any] = []  # what was handed off the loop, run once the test has looked
    try:
        if ended == "a cancelled call's thread returned":
            _cancelled_mid_call(loop, _allowed(session, "note", 0), started[0])
            release[0].set()
            assert returned[0].wait(30)
            kept = session._rs.lingering_tool
            assert kept is not None
            kept.result(30)  # its thread has returned
        else:
            coro = _allowed(session, "wait", 0).execute()
            executing = loop.create_task(coro)
            assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
            coro.close()  # by hand: the task kept for the lease
            loop.close()  # the task's loop: it never runs again
            session._rs.heartbeat._on_beat()  # the heartbeat's next beat
            kept = session._rs.lingering_tool
            assert kept is not None and kept.done()
            del executing
        from agentrt import _gate

        monkeypatch.setattr(_gate, "off_the_loop", held.append)
        given_back = threading.Event()
        session._on_given_back.append(given_back.set)
        session.close_sync()
        assert store.lease(run_id).owner == "", (
            "the close returned before it gave the lease back, every kept tool having ended"
        )
        assert given_back.is_set()  # whoever waits for the give back is told
        again, verdict = gate.attach_sync(run_id)
        assert verdict is None
        again.close_sync()
        assert store.verify_events().intact
    finally:
        for r in release:
            r.set()
        for fn in held:
            fn()
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)


class _HeldRenewals:
    """The store's renewals, each made only once the test lets one through (`go`): the
    heartbeat beats on its own thread, a third of a short lease apart, but renews nothing
    until told, so a lease expired by the test is never renewed under a takeover."""

    def __init__(self, store: agentrt.Store) -> None:
        self.go = threading.Semaphore(0)
        self.results: list[bool] = []
        self.made = threading.Event()
        real = store.renewer

        def renewer(wall: Any) -> Any:
            return _HeldRenewer(real(wall), self)

        store.renewer = renewer  # type: ignore[method-assign]


class _HeldRenewer:
    def __init__(self, real: Any, held: _HeldRenewals) -> None:
        self._real = real
        self._held = held

    def renew(self, run_id: str, owner: str, ttl: Any) -> bool:
        assert self._held.go.acquire(timeout=60), "a renewal was held for a minute"
        held: bool = self._real.renew(run_id, owner, ttl)
        self._held.results.append(held)
        self._held.made.set()
        return held

    def close(self) -> None:
        self._real.close()


@pytest.mark.parametrize("closed", ["before the loss", "after the loss"])
def test_a_kept_tasks_loop_closed_after_the_lease_was_lost_frees_the_run_for_its_gate(
    any_store: agentrt.Store, database: str, closed: str
) -> None:
    """A session closed (before its heartbeat finds the lease lost, or after) keeps the run
    its gate's for a kept async tool's task. The lease lapses and another owner takes the
    run over; the heartbeat's next renewal finds it lost. Then the task's loop is closed: the
    task never runs again, so nothing of the session runs in this process. Before, the
    heartbeat had stopped at the loss, nobody looked at the loop, and the gate refused its
    own attach of the run ("already has a live session") for the life of the process. Now
    the heartbeat goes on looking (renewing nothing) until the session lets go: the run is
    freed, and the gate's attach judges the record as any owner's would."""
    store = any_store
    renewals = _HeldRenewals(store)
    waiting = _Waiting()
    gate = make_gate(store, waiting, ids=Ids("a"), lease_ttl=timedelta(milliseconds=300))  # type: ignore[arg-type]
    other = make_gate(
        store,
        waiting,  # type: ignore[arg-type]
        ids=Ids("b"),
        lease_owner="another",
        lease_ttl=timedelta(hours=1),
    )
    session = gate.begin_sync("a kept task's loop closed after the lease was lost")
    run_id = session.run_id
    given_back = threading.Event()
    session._on_given_back.append(given_back.set)
    loop = asyncio.new_event_loop()
    try:
        coro = _allowed(session, "wait", 0).execute()
        executing = loop.create_task(coro)
        assert loop.run_until_complete(loop.run_in_executor(None, waiting.started.wait, 30))
        coro.close()  # by hand: the task kept for the lease
        if closed == "before the loss":
            session.close_sync()
        expire_lease(database, run_id)  # it lapsed (nothing renewed it)
        taken, _ = other.attach_sync(run_id)  # another owner takes the run over
        heartbeat = session._rs.heartbeat
        renewals.go.release()  # the heartbeat's next renewal
        assert renewals.made.wait(30)
        assert heartbeat.lost.wait(30) and renewals.results == [False]
        if closed == "after the loss":
            session.close_sync()
        with pytest.raises(RunStateError, match="already has a live session"):
            gate.attach_sync(run_id)  # its task may still run: not this gate's to take yet
        loop.close()  # the task's loop, the task pending: it never runs again
        assert given_back.wait(30), "the run stays this gate's for a task whose loop is closed"
        assert renewals.results == [False], "the heartbeat renewed a lease it had lost"
        assert store.lease(run_id).owner == other.lease_owner  # the give back: this epoch only
        taken.close_sync()
        again, _ = gate.attach_sync(run_id)
        again.close_sync()
        assert waiting.ended == []
        assert store.verify_events().intact
        del executing
    finally:
        for _ in range(10):
            renewals.go.release()
        loop.close()
        end_abandoned_on(loop)  # its pending tasks, ended here (their loop is gone)
