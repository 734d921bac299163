"""A heartbeat that found its lease lost ends with its session (decision 0207's review).

Since decision 0207 a heartbeat that finds its lease lost renews nothing more and closes its
renewer's connection, but goes on looking at the session's kept tool tasks until the session
stops it. So its thread no longer ends at the loss: it must end when the session lets go, a
Gate session closed, one dropped without a close (collected, in a reference cycle too), a
Driver's loop that raised `LeaseLostError`; or a process that lost many leases keeps a
thread (asleep, a beat a third of a lease apart) for each of them.

The lease is lost for real: it lapses (its stored expiry moved back) and another owner
takes the run over. Each renewal is held until the test lets it through, so nothing renews
the lease under that takeover: no clock raced.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, LeaseLostError, SideEffect, StepInput
from conftest import Ids, RecordingTool
from support.gates import make_gate
from support.leases import expire_lease


class _Renewers:
    """The store's renewers, each wrapped: its renewals held until the test lets one through
    (`go`), the heartbeat's thread that renews, and how many times it was closed."""

    def __init__(self, store: agentrt.Store) -> None:
        self.made: list[_Held] = []
        real = store.renewer

        def renewer(wall: Any) -> Any:
            held = _Held(real(wall))
            self.made.append(held)
            return held

        store.renewer = renewer  # type: ignore[method-assign]


class _Held:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.go = threading.Semaphore(0)
        self.results: list[bool] = []
        self.thread: threading.Thread | None = None
        self.closes = 0
        self.closed = threading.Event()

    def renew(self, run_id: str, owner: str, ttl: Any) -> bool:
        self.thread = threading.current_thread()
        assert self.go.acquire(timeout=60), "a renewal was held for a minute"
        held: bool = self._real.renew(run_id, owner, ttl)
        self.results.append(held)
        return held

    def close(self) -> None:
        self.closes += 1
        self._real.close()
        self.closed.set()


def _lose(held: _Held, database: str, run_id: str, other: agentrt.Gate) -> _Held:
    """The run's lease lapses, `other` takes the run over (and lets it go), and the heartbeat's
    next renewal finds it lost: its renewer is closed then (decision 0207)."""
    expire_lease(database, run_id)
    taken, _ = other.attach_sync(run_id)
    taken.close_sync()
    held.go.release()
    assert held.closed.wait(30), "the heartbeat did not find its lease lost"
    assert held.results == [False]
    return held


def _heartbeats() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("agentrt-heartbeat")}


def _no_heartbeat_left(before: set[threading.Thread]) -> None:
    """Every heartbeat's thread started since `before` ends: the takeovers' too."""
    for thread in _heartbeats() - before:
        thread.join(30)
    assert not _heartbeats() - before, "a heartbeat's thread was left running"


def _ended(held: _Held) -> None:
    assert held.thread is not None
    held.thread.join(30)
    assert not held.thread.is_alive(), "a heartbeat that lost its lease never ended"
    assert held.results == [False], "the heartbeat renewed a lease it had lost"
    assert held.closes == 1, "its renewer was closed more than once"


@pytest.mark.parametrize("how", ["closed", "dropped", "dropped in a reference cycle"])
def test_the_heartbeats_of_many_gate_sessions_that_lost_their_lease_end_with_them(
    any_store: agentrt.Store, database: str, how: str
) -> None:
    store = any_store
    before = _heartbeats()
    renewers = _Renewers(store)
    gate = make_gate(store, ids=Ids("a"), lease_ttl=timedelta(milliseconds=150))
    other = make_gate(store, ids=Ids("b"), lease_owner="another", lease_ttl=timedelta(hours=1))
    lost: list[_Held] = []
    for i in range(8):
        session = gate.begin_sync(f"a lease lost {i}")
        run_id = session.run_id
        lost.append(_lose(renewers.made[-1], database, run_id, other))
        with pytest.raises(LeaseLostError):
            session.step_sync()
        if how == "closed":
            session.close_sync()
        elif how == "dropped in a reference cycle":
            session.cycle = session  # type: ignore[attr-defined]
        del session
    gc.collect()
    for held in lost:
        _ended(held)
    _no_heartbeat_left(before)
    again, _ = gate.attach_sync(run_id)  # the run is this gate's no longer
    again.close_sync()
    assert store.verify_events().intact


def test_the_heartbeat_of_a_driver_loop_that_lost_its_lease_ends_with_the_loop(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    before = _heartbeats()
    renewers = _Renewers(store)
    other = make_gate(store, ids=Ids("b"), lease_owner="another", lease_ttl=timedelta(hours=1))

    lost: list[_Held] = []

    class Agent:
        async def decide(self, step_input: StepInput) -> Decision:
            # In the loop's thread pool: the sync gate calls make their own loop.
            held = renewers.made[-1]
            await _in_a_thread(lambda: lost.append(_lose(held, database, step_input.run.id, other)))
            return Decision.tool_call("note", {})

    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=Agent(),
        policy=agentrt.default_policy(),
        tools=[tool],
        lease_ttl=timedelta(milliseconds=150),
    )
    for i in range(4):
        with pytest.raises(LeaseLostError):
            driver.start_sync(f"a lease lost {i}")
    assert tool.calls == []
    assert len(lost) == 4
    for held in lost:
        _ended(held)
    _no_heartbeat_left(before)


async def _in_a_thread(fn: Any) -> None:
    await asyncio.get_running_loop().run_in_executor(None, fn)


def test_the_heartbeat_of_a_session_kept_unclosed_after_its_lease_was_lost_ends_with_nothing_kept(
    any_store: agentrt.Store, database: str
) -> None:
    """A session the consumer keeps referenced and never closes after `LeaseLostError`:
    nothing of it may still run (no execute in flight, no tool kept), and no tool can start
    under the lost lease, so its heartbeat has nothing left to look at: its thread ends, not
    a thread asleep per such session for the life of the process (decision 0209). The
    session still refuses its calls, and its close still lets the run go."""
    store = any_store
    before = _heartbeats()
    renewers = _Renewers(store)
    gate = make_gate(store, ids=Ids("a"), lease_ttl=timedelta(milliseconds=150))
    other = make_gate(store, ids=Ids("b"), lease_owner="another", lease_ttl=timedelta(hours=1))
    kept: list[agentrt.GateSession] = []
    lost: list[_Held] = []
    for i in range(4):
        session = gate.begin_sync(f"a lease lost, its session kept {i}")
        lost.append(_lose(renewers.made[-1], database, session.run_id, other))
        with pytest.raises(LeaseLostError):
            session.step_sync()
        kept.append(session)
    for held in lost:
        _ended(held)
    _no_heartbeat_left(before)
    for session in kept:
        with pytest.raises(LeaseLostError):
            session.step_sync()
        session.close_sync()
        again, _ = gate.attach_sync(session.run_id)  # the run is this gate's no longer
        again.close_sync()
    assert store.verify_events().intact
