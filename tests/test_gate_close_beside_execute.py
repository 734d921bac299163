"""A Gate session's close against the end of an `execute` (decisions 0176, 0179, 0180).

`close()` during an `execute` leaves the close to that execute (its tool keeps the lease
until the outcome is recorded); a close that finds no execute running closes at once. A
close from another thread (a `_sync` twin's loop of its own) may come exactly as the
execute ends: it must be made once, never by both, or the second letting go gives back by
owner the lease of a session of the same gate attached in between, and frees its run.

Each interleaving is made at will: the execute's end is held while the other thread
closes (and attaches again), then let go; no clock is raced.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect
from conftest import RecordingTool, event_types
from support.gates import make_gate, open_step


def test_a_close_from_another_thread_as_an_execute_ends_is_made_once(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool)
    session, step = open_step(gate, "closed from another thread as its execute ends")
    run_id = session.run_id
    assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"

    attached: list[Any] = []
    settle = session._settle_if_done

    def closed_on_another_thread() -> None:
        session.close_sync()  # no execute running by now: it closes at once
        assert store.lease(run_id).owner == ""
        again, verdict = gate.attach_sync(run_id)  # the run is free: the same gate goes on
        assert verdict is None
        attached.append(again)

    def execute_ending() -> None:
        settle()
        if not attached and session._executing == 0:
            # The execute's outcome is recorded and it no longer counts as running: another
            # thread's close comes now, before this execute looks for a close to finish.
            other = threading.Thread(target=closed_on_another_thread)
            other.start()
            other.join(10)
            assert attached, "the other thread's close and attach did not end"

    session._settle_if_done = execute_ending  # type: ignore[method-assign]
    observation = step.execute_sync()
    assert observation.kind == "tool_result"
    [again] = attached

    # The session attached since holds the lease, and the run is still its own: a third
    # session is refused, and its next step is recorded under its lease.
    assert store.lease(run_id).owner == gate.lease_owner
    with pytest.raises(agentrt.RunStateError, match="already has a live session"):
        gate.attach_sync(run_id)
    nxt = again.step_sync()
    assert nxt is not None and nxt.index == 1
    assert nxt.propose_sync(Decision.complete("done")).outcome == "ended"
    again.close_sync()
    assert store.get_run(run_id).status == "COMPLETED"
    assert [c.args for c in tool.calls] == [{"x": 1}]
    assert event_types(store, run_id).count("step.tool_started") == 1
    assert store.verify_events().intact


class _TellingLock:
    """The session's close lock, telling when a thread finds it held by another."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.blocked = threading.Event()

    def __enter__(self) -> bool:
        if not self._lock.acquire(blocking=False):
            self.blocked.set()
            self._lock.acquire()
        return True

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_close_from_another_thread_as_an_execute_starts_leaves_the_close_to_it(
    any_store: agentrt.Store,
) -> None:
    """`execute` found the session open and is marking its step executed; a close from
    another thread comes before the execute counts as running. The close must not give the
    lease back (nor stop renewing it) under the tool about to start: it is left to that
    execute, which records the outcome under the lease, then lets go."""
    store = any_store
    tool = RecordingTool("note", SideEffect.READ_ONLY)
    gate = make_gate(store, tool)
    session, step = open_step(gate, "closed from another thread as its execute starts")
    run_id = session.run_id
    assert step.propose_sync(Decision.tool_call("note", {"x": 1})).outcome == "allowed"
    lock = _TellingLock()
    session._close_lock = lock  # type: ignore[assignment]
    closed = threading.Event()

    def close_on_another_thread() -> None:
        session.close_sync()
        closed.set()

    settle = step._settle
    other = threading.Thread(target=close_on_another_thread)

    def marked_executed() -> None:
        settle()
        if not other.is_alive() and not closed.is_set():
            other.start()
            # The other thread's close either ends (nothing kept it from closing at once)
            # or waits for this execute's start to be marked, whichever comes: no clock.
            while other.is_alive() and not lock.blocked.wait(0.01):
                pass

    step._settle = marked_executed  # type: ignore[method-assign]
    observation = step.execute_sync()
    other.join(10)
    assert closed.is_set()
    assert observation.kind == "tool_result"
    assert [c.args for c in tool.calls] == [{"x": 1}]
    # The outcome was recorded under the lease, then the execute closed the session.
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    assert event_types(store, run_id)[-2:] == ["step.tool_started", "step.tool_finished"]
    assert store.lease(run_id).owner == ""
    assert store.get_run(run_id).status == "RUNNING"
    with pytest.raises(agentrt.SessionClosedError):
        session.step_sync()
    again, verdict = gate.attach_sync(run_id)
    assert verdict is None
    nxt = again.step_sync()
    assert nxt is not None and nxt.index == 1
    again.close_sync()
    assert store.verify_events().intact
