"""A paused heartbeat (its run's event loop closed with its task kept, decision 0223) ends,
its thread and its renewer's connection let go, once its lease names another owner or epoch
(decision 0225).

Decision 0223 stopped the renewals of such a heartbeat, but its thread went on beating and
its renewer's connection stayed open for the life of the process, even after another
process took the run over or the run ended: a thread and a connection (file descriptors, a
PostgreSQL backend) leaked each time. While paused, each beat now reads whether the lease
still names this owner and epoch (no write); once it does not, the heartbeat stops as one
that found its lease lost. A lease that merely lapsed, nobody else taking it, keeps it
beating (decision 0223's renewal again from a live loop, tested there).

Each wait is on a beat of the heartbeat (`Heartbeat.beats`) or on its log record, never on
how long a beat takes; the lease is expired by moving its stored expiry (`expire_lease`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import agentrt
from agentrt import Decision, SideEffect, _step
from agentrt._lease import Heartbeat
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.abandoned import end_abandoned
from support.database import on_postgres
from support.gates import make_gate
from support.leases import expire_lease

BEAT_TTL = timedelta(milliseconds=150)  # a beat every 50 ms: the waits below count beats
ENDS_WITHIN = 5
"""Beats after the takeover by which the paused heartbeat's thread has ended (it ends at the
second beat that reads the lease after the takeover's commit; one more may be under way)."""


class _Said(logging.Handler):
    """Every `agentrt` warning, and an event set by the one saying a heartbeat paused."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []
        self.stopped = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.records.append(message)
        if "is no longer renewed" in message:
            self.stopped.set()


@pytest.fixture
def said() -> Iterator[_Said]:
    handler = _Said()
    logger = logging.getLogger("agentrt")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _beats(heartbeat: Heartbeat, n: int) -> None:
    first = heartbeat.beats
    _until(lambda: heartbeat.beats >= first + n, f"the heartbeat did not beat {n} more times")


def _driver(store: agentrt.Store, agent: Any, tool: Any, **kw: Any) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
        **kw,
    )


def _heartbeat(driver: agentrt.Driver, run_id: str) -> Heartbeat:
    [mark] = [m for m in driver._marks() if m.run_id == run_id]
    assert mark.session is not None
    heartbeat = mark.session._rs.heartbeat
    assert isinstance(heartbeat, Heartbeat)
    return heartbeat


def _backends(database: str) -> set[int]:
    """The server's backend pids (PostgreSQL)."""
    with psycopg.connect(database.partition("?")[0], autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity").fetchall()}


class _Connection:
    """The paused heartbeat's renewer's connection, as opened by its renewals."""

    def __init__(self, heartbeat: Heartbeat, database: str) -> None:
        self.renewer = heartbeat._renewer
        self.conn: Any = self.renewer._conn  # type: ignore[attr-defined]
        assert self.conn is not None, "the renewals opened no connection of their own"
        self.database = database
        self.pid = self.conn.info.backend_pid if on_postgres(database) else 0

    def is_open(self) -> bool:
        if on_postgres(self.database):
            return not self.conn.closed and self.pid in _backends(self.database)
        try:
            self.conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
            return False
        return True

    def assert_let_go(self) -> None:
        assert self.renewer._conn is None  # type: ignore[attr-defined]
        if on_postgres(self.database):
            assert self.conn.closed
            _until(
                lambda: self.pid not in _backends(self.database),
                f"the server still lists the renewer's backend {self.pid}",
            )
        else:
            assert not self.is_open()


def _ends(heartbeat: Heartbeat) -> None:
    """The thread ends within `ENDS_WITHIN` beats (counted from now)."""
    thread = heartbeat._thread
    beats = heartbeat.beats
    _until(
        lambda: not thread.is_alive() or heartbeat.beats >= beats + ENDS_WITHIN,
        "the paused heartbeat neither ended nor beat",
    )
    assert not thread.is_alive(), "the paused heartbeat beats on after its run was taken over"
    assert thread not in threading.enumerate()
    assert heartbeat.lost.is_set()


def test_a_paused_heartbeat_ends_with_its_connection_once_another_driver_completed_the_run(
    database: str, said: _Said
) -> None:
    """The loop is closed while the agent decides, the task kept: the heartbeat pauses. While
    the lease merely lapsed it beats on, its connection open (the lease still names it). A
    second driver takes the run over and completes it: within a few beats the paused
    heartbeat's thread has ended and its connection is closed, and nothing more is recorded."""
    store = agentrt.open_store(database)
    deciding = threading.Event()

    async def hangs(step_input: agentrt.StepInput) -> Any:
        deciding.set()
        await asyncio.get_running_loop().create_future()  # never answers

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION)
    driver = _driver(store, hangs, tool, lease_ttl=BEAT_TTL, lease_owner="closed")
    run_id = "d" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed as it decides", None, run_id))
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, deciding.wait, 30))
        heartbeat = _heartbeat(driver, run_id)
        _until(lambda: heartbeat.renewals >= 1, "the lease was never renewed")
        theirs.close()  # the consumer's loop, closed under the agent's decision; task kept
        assert said.stopped.wait(30), "the heartbeat of a closed loop kept renewing"
        connection = _Connection(heartbeat, database)
        expire_lease(database, run_id)  # lapsed; nobody took it
        lease = store.lease(run_id)
        _beats(heartbeat, 3)
        assert heartbeat._thread.is_alive() and not heartbeat.lost.is_set()
        assert connection.is_open()
        assert store.lease(run_id) == lease  # read, never written
        other = _driver(store, lambda _: Decision.complete("done"), tool, lease_owner="other")
        assert other.resume_sync(run_id).status == "COMPLETED"
        recorded = store.list_events(limit=100_000)
        _ends(heartbeat)
        connection.assert_let_go()
        assert store.list_events(limit=100_000) == recorded
        assert event_types(store, run_id).count("lease.taken_over") == 1
        assert [m for m in said.records if run_id in m and "decision 0223" in m] == [
            f"the event loop driving run {run_id} was closed with its task kept: its lease is "
            "no longer renewed and lapses, as a crashed process's does, so another process "
            "may take the run over (decision 0223)"
        ]
        assert store.verify_events().intact
    finally:
        if not theirs.is_closed():
            theirs.close()
        end_abandoned(driving)
        store.close()


def test_a_paused_gate_heartbeat_ends_once_another_gate_took_the_run_over(
    database: str, said: _Said, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Gate claim's loop is closed under its status read, the task kept: the heartbeat
    pauses. Another gate attaches the run once its lease lapsed (taken over, the run left
    RUNNING): the paused heartbeat ends with its connection; the session's next claim is told
    its lease was lost, and nothing it does is recorded."""
    store = agentrt.open_store(database)
    gate = make_gate(store, ids=Ids("a"), lease_ttl=BEAT_TTL, lease_owner="closed")
    session = gate.begin_sync("its loop closed under a claim, its task kept")
    run_id = session.run_id
    heartbeat = session._rs.heartbeat
    assert isinstance(heartbeat, Heartbeat)
    _until(lambda: heartbeat.renewals >= 1, "the lease was never renewed")
    reached: list[Any] = []
    real = _step.run_io

    async def read_held(fn: Any) -> Any:
        reached.append(asyncio.get_running_loop())
        await asyncio.get_running_loop().create_future()  # never answered
        return await real(fn)

    monkeypatch.setattr(_step, "run_io", read_held)
    theirs = asyncio.new_event_loop()
    claiming = theirs.create_task(session.step())
    for _ in range(1000):
        if reached:
            break
        theirs.run_until_complete(asyncio.sleep(0))
    assert reached
    theirs.close()  # the consumer's loop, closed under the claim's status read
    monkeypatch.undo()
    try:
        assert said.stopped.wait(30), "the heartbeat of a closed claim kept renewing"
        connection = _Connection(heartbeat, database)
        expire_lease(database, run_id)
        other = make_gate(store, ids=Ids("b"), lease_owner="other")
        again, _ = other.attach_sync(run_id)
        recorded = store.list_events(limit=100_000)
        _ends(heartbeat)
        connection.assert_let_go()
        assert store.list_events(limit=100_000) == recorded
        assert store.lease(run_id).owner == other.lease_owner
        with pytest.raises(agentrt.LeaseLostError):
            session.step_sync()
        assert store.list_events(limit=100_000) == recorded
        again.close_sync()
        assert store.verify_events().intact
    finally:
        end_abandoned(claiming)
        store.close()
