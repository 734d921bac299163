"""A heartbeat whose run's event loop was closed with its task kept renews nothing (decision
0223).

Decisions 0216 to 0222 let the same driver's `resume` take over a run whose loop was closed
under it, its task kept referenced (so never collected). Its session's heartbeat still renewed
the lease for ever: no other process could ever take the run over. A loop that can never run
again is as dead as a crashed process: its heartbeat stops renewing (once it beats), logs it
once, and the lease lapses; another driver then takes the run over through the normal
takeover, the step in flight interrupted, never run again on its own. A tool thread of that
loop still running keeps the lease renewed until it returns, as a long tool call does.

Each wait is on a beat of the heartbeat (`Heartbeat.beats`, `renewals`) or on its log
record, never on how long a beat takes; the lease is expired by moving its stored expiry
(`expire_lease`), so no clock decides it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _step
from agentrt._lease import Heartbeat
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.abandoned import end_abandoned, end_abandoned_on
from support.gates import make_gate
from support.leases import expire_lease

BEAT_TTL = timedelta(milliseconds=150)  # a beat every 50 ms: the waits below count beats


class _Said(logging.Handler):
    """Every `agentrt` warning, and an event set by the one saying a heartbeat stopped."""

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
    """Wait for `n` more beats of the heartbeat."""
    first = heartbeat.beats
    _until(lambda: heartbeat.beats >= first + n, f"the heartbeat did not beat {n} more times")


def _renews_no_more(heartbeat: Heartbeat, store: agentrt.Store, run_id: str) -> None:
    """After three more beats, no renewal was made, and the stored expiry stayed put."""
    renewals, expiry = heartbeat.renewals, store.lease(run_id).expires_at
    _beats(heartbeat, 3)
    assert heartbeat.renewals == renewals
    assert store.lease(run_id).expires_at == expiry


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


def test_a_driver_loop_closed_as_its_agent_decides_lets_its_lease_lapse_for_another_driver(
    database: str, said: _Said
) -> None:
    """The loop is closed while the agent decides step 0, the task kept. The heartbeat stops
    renewing at its next beat and says so once, naming the run (before: renewed for ever). The
    lease expired, a second driver (another process's, on the same store) takes the run over
    and completes it, step 0 asked again."""
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
        renewals = heartbeat.renewals
        _beats(heartbeat, 2)  # a live loop blocked in its agent: renewed
        assert heartbeat.renewals > renewals
        assert not said.stopped.is_set()
        theirs.close()  # the consumer's loop, closed under the agent's decision; task kept
        assert said.stopped.wait(30), "the heartbeat of a closed loop kept renewing"
        _renews_no_more(heartbeat, store, run_id)
        stopped = [m for m in said.records if "is no longer renewed" in m]
        assert stopped == [
            f"the event loop driving run {run_id} was closed with its task kept: its lease is "
            "no longer renewed and lapses, as a crashed process's does, so another process "
            "may take the run over (decision 0223)"
        ]
        assert store.lease(run_id).owner == driver.lease_owner
        expire_lease(database, run_id)
        other = _driver(store, lambda _: Decision.complete("done"), tool, lease_owner="other")
        run = other.resume_sync(run_id)
        assert run.status == "COMPLETED"
        types = event_types(store, run_id)
        assert types.count("lease.taken_over") == 1
        assert not tool.calls
        assert store.verify_events().intact
        assert not driving.done()
    finally:
        if not theirs.is_closed():
            theirs.close()
        end_abandoned(driving)  # the abandoned coroutine, ended here
        store.close()


def test_a_driver_loop_closed_as_its_tool_thread_runs_keeps_its_lease_until_it_returns(
    database: str, said: _Said
) -> None:
    """The loop is closed while a side-effecting tool's thread runs: the lease keeps being
    renewed (a real side effect in progress) until the thread returns; then it is renewed no
    more, and a second driver takes the run over once it has expired: the step waits on an
    `interrupted_side_effect` approval, the tool called once."""
    store = agentrt.open_store(database)
    started, release = threading.Event(), threading.Event()

    def blocking(call: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"done": True}

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=blocking)
    agent = lambda _: Decision.tool_call("change", {"x": 1})  # noqa: E731
    driver = _driver(store, agent, tool, lease_ttl=BEAT_TTL, lease_owner="closed")
    run_id = "f" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed as its tool runs", None, run_id))
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, started.wait, 30))
        heartbeat = _heartbeat(driver, run_id)
        theirs.close()  # closed while the tool's thread runs; task kept
        renewals = heartbeat.renewals
        _until(lambda: heartbeat.renewals >= renewals + 3, "the tool's lease was not renewed")
        assert not said.stopped.is_set()
        release.set()
        assert said.stopped.wait(30), "the heartbeat kept renewing after the tool returned"
        _renews_no_more(heartbeat, store, run_id)
        expire_lease(database, run_id)
        other = _driver(store, agent, tool, lease_owner="other")
        run = other.resume_sync(run_id)
        assert run.status == "WAITING_FOR_APPROVAL"
        [approval] = store.list_approvals(run_id)
        assert approval.kind == "interrupted_side_effect"
        assert [c.args for c in tool.calls] == [{"x": 1}]  # once: never again on its own
        assert store.verify_events().intact
    finally:
        release.set()
        if not theirs.is_closed():
            theirs.close()
        end_abandoned(driving)
        store.close()


def test_a_gate_execute_whose_loop_closed_lets_its_lease_lapse_once_its_tool_returns(
    database: str, said: _Said
) -> None:
    """A consumer's gate session executes a side-effecting tool; its loop is closed while the
    tool's thread runs, the task kept. Renewed until the thread returns, then no more: another
    gate attaches the run once the lease expired, the step judged interrupted."""
    store = agentrt.open_store(database)
    started, release = threading.Event(), threading.Event()

    def blocking(call: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"done": True}

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=blocking)
    gate = make_gate(store, tool, ids=Ids("a"), lease_ttl=BEAT_TTL, lease_owner="closed")
    session = gate.begin_sync("its loop closed as its execute runs")
    run_id = session.run_id
    step = session.step_sync()
    assert step is not None
    step.propose_sync(Decision.tool_call("change", {"x": 1}))
    theirs = asyncio.new_event_loop()
    executing = theirs.create_task(step.execute())
    try:
        assert theirs.run_until_complete(theirs.run_in_executor(None, started.wait, 30))
        heartbeat = session._rs.heartbeat
        assert isinstance(heartbeat, Heartbeat)
        theirs.close()  # the consumer's loop, closed under its execute; task kept
        renewals = heartbeat.renewals
        _until(lambda: heartbeat.renewals >= renewals + 3, "the tool's lease was not renewed")
        assert not said.stopped.is_set()
        release.set()
        assert said.stopped.wait(30), "the heartbeat kept renewing after the tool returned"
        _renews_no_more(heartbeat, store, run_id)
        expire_lease(database, run_id)
        other = make_gate(store, tool, ids=Ids("b"), lease_owner="other")
        again, _ = other.attach_sync(run_id)
        assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
        [approval] = store.list_approvals(run_id)
        assert approval.kind == "interrupted_side_effect"
        assert [c.args for c in tool.calls] == [{"x": 1}]
        again.close_sync()
        assert store.verify_events().intact
    finally:
        release.set()
        if not theirs.is_closed():
            theirs.close()
        end_abandoned(executing)
        store.close()


def test_a_gate_session_idle_between_its_calls_keeps_its_lease_renewed(
    any_store: agentrt.Store, said: _Said
) -> None:
    """A consumer's session with nothing in flight (its consumer deciding, on any loop) is not
    judged: its lease stays renewed."""
    gate = make_gate(any_store, ids=Ids("a"), lease_ttl=BEAT_TTL)
    session = gate.begin_sync("idle")  # its `_sync` loop closed once the call returned
    heartbeat = session._rs.heartbeat
    assert isinstance(heartbeat, Heartbeat)
    renewals = heartbeat.renewals
    _until(lambda: heartbeat.renewals >= renewals + 3, "an idle session's lease was not renewed")
    assert not said.stopped.is_set()
    session.close_sync()


def test_a_gate_claim_whose_loop_closed_stops_renewing_until_a_live_loop_claims(
    any_store: agentrt.Store, said: _Said, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's loop is closed under a `step()`'s status read, its task kept: the
    heartbeat renews nothing. A claim from a live loop (decision 0216 lets it through) has it
    renewed again, as long as nobody took the run over meanwhile (the renewal names this
    owner and epoch); the session then goes on and gives its lease back at its close."""
    store = any_store
    gate = make_gate(store, ids=Ids("a"), lease_ttl=BEAT_TTL)
    session = gate.begin_sync("its loop closed under a claim, its task kept")
    run_id = session.run_id
    heartbeat = session._rs.heartbeat
    assert isinstance(heartbeat, Heartbeat)
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
        _renews_no_more(heartbeat, store, run_id)
        step = session.step_sync()  # a claim from a live loop
        assert step is not None and step.index == 0
        renewals = heartbeat.renewals
        _until(lambda: heartbeat.renewals >= renewals + 2, "not renewed again once claimed")
        assert [m for m in said.records if "is no longer renewed" in m] == [
            f"the event loop driving run {run_id} was closed with its task kept: its lease is "
            "no longer renewed and lapses, as a crashed process's does, so another process "
            "may take the run over (decision 0223)"
        ]
        session.close_sync()
        assert store.lease(run_id).owner == ""
        assert store.verify_events().intact
    finally:
        end_abandoned(claiming)


def test_a_driver_loop_closed_as_its_async_tool_awaits_lets_its_lease_lapse(
    database: str, said: _Said
) -> None:
    """An async tool's task runs on the loop itself: once that loop is closed it never runs
    again, so it keeps nothing (unlike a thread). The heartbeat stops renewing; another driver
    takes the run over, the step judged interrupted, the tool never called again."""
    store = agentrt.open_store(database)
    started = threading.Event()

    async def hangs(call: Any) -> Any:
        started.set()
        await asyncio.get_running_loop().create_future()  # never returns

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=hangs)
    agent = lambda _: Decision.tool_call("change", {"x": 1})  # noqa: E731
    driver = _driver(store, agent, tool, lease_ttl=BEAT_TTL, lease_owner="closed")
    run_id = "e" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed as its tool awaits", None, run_id))
    try:
        _until_started(theirs, started)
        heartbeat = _heartbeat(driver, run_id)
        theirs.close()
        assert said.stopped.wait(30), "the heartbeat of a closed loop kept renewing"
        _renews_no_more(heartbeat, store, run_id)
        expire_lease(database, run_id)
        other = _driver(store, agent, tool, lease_owner="other")
        run = other.resume_sync(run_id)
        assert run.status == "WAITING_FOR_APPROVAL"
        [approval] = store.list_approvals(run_id)
        assert approval.kind == "interrupted_side_effect"
        assert [c.args for c in tool.calls] == [{"x": 1}]
        assert store.verify_events().intact
    finally:
        end_abandoned(driving)
        end_abandoned_on(theirs)  # and its tool's task, ended here (its loop is gone)
        store.close()


def _until_started(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    """Run `loop` until the tool has started (bounded)."""
    for _ in range(3000):
        if started.is_set():
            return
        loop.run_until_complete(asyncio.sleep(0.01))
    raise AssertionError("the tool never started")
