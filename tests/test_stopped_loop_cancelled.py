"""A Driver loop cancelled while it gives its lease back still lets go of the run (review).

A loop that stopped on an error (decision 0163) or was cancelled (decision 0017) marks
its run as this driver's until the lease is given back. A caller's cancel landing while
that release runs (a slow or busy store, a caller's own timeout) cut it short, and the
mark was never taken off: this driver then refused every resume of the run ("already
executing") and `recover()` skipped it, for as long as the driver lived, though nothing
ran and the lease had been given back.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _gate, _session
from agentrt._errors import StoreError
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, RecordingTool


class _AllowAll:
    policy_id = "allow-all/1"

    def evaluate(self, request: Any, view: Any) -> Any:
        return agentrt.PolicyDecision.allow()


async def _released(driver: agentrt.Driver, store: agentrt.Store, run_id: str) -> None:
    """Wait (on this loop, by events seen, however slow the machine) until the lease is
    given back and the release's task, which ends on this loop, has told the driver."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lease = store.lease_state(run_id)
        if lease is not None and lease.owner == "" and run_id not in driver._lingering:
            break
        await asyncio.sleep(0.01)
    assert store.lease_state(run_id).owner == ""


def _ids_repeating_the_third() -> Iterator[str]:
    """Ids a1, a2, a2 (the second step's repeats the first's), then a3, a4, ..."""
    yield from (f"a{1:031x}", f"a{2:031x}", f"a{2:031x}")
    n = 3
    while True:
        yield f"a{n:031x}"
        n += 1


def test_a_cancel_while_a_stopped_loop_gives_its_lease_back_leaves_the_run_resumable(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = RecordingTool("note", SideEffect.LOCAL_MUTATION)
    script = [Decision.tool_call("note", {"x": 1})] * 2 + [Decision.complete({})]
    ids = _ids_repeating_the_third()
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent(script),
        policy=_AllowAll(),
        tools=[tool],
        new_id=lambda: next(ids),
        now=FakeClock(),
    )
    entered, go = threading.Event(), threading.Event()
    real = _gate.release_lease

    def slow_release(config: Any, run_id: str, epoch: int) -> None:
        entered.set()
        go.wait(10)
        real(config, run_id, epoch)

    # Wherever the lease is given back from (the gate's session, the session's helper).
    monkeypatch.setattr(_gate, "release_lease", slow_release)
    monkeypatch.setattr(_session, "release_lease", slow_release)

    async def scenario() -> agentrt.Run:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(driver.start("note twice"))
        assert await loop.run_in_executor(None, entered.wait, 10)
        task.cancel()  # the caller gives up while the stopped loop gives its lease back
        with pytest.raises((asyncio.CancelledError, StoreError)):
            await task
        go.set()
        run_id = any_store.list_runs()[0].id
        await _released(driver, any_store, run_id)  # the release, off the loop, on its own
        monkeypatch.setattr(_gate, "release_lease", real)
        monkeypatch.setattr(_session, "release_lease", real)
        # Nothing runs under this driver: it must resume the run, not refuse it.
        return await driver.resume(run_id)

    try:
        resumed = asyncio.run(scenario())
    finally:
        go.set()
    assert resumed.status == "COMPLETED"
    # Step 1's start was never recorded (its id was taken): it never ran; the resumed
    # run's step 1 is a new step, the agent's call again, run once.
    assert [c.step_id for c in tool.calls] == [s.id for s in any_store.list_steps(resumed.id)][:2]


def test_a_second_cancel_while_a_cancelled_loop_gives_its_lease_back_leaves_the_run_resumable(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = threading.Event()
    decisions = [Decision.complete({"done": True})]

    async def agent(input: Any) -> Decision:
        if not asked.is_set():
            asked.set()
            await asyncio.sleep(60)  # the caller cancels meanwhile
        return decisions[0]

    driver = agentrt.Driver(
        store=any_store, agent=agent, policy=_AllowAll(), tools=[], now=FakeClock()
    )
    entered, go = threading.Event(), threading.Event()
    real = _gate.release_lease

    def slow_release(config: Any, run_id: str, epoch: int) -> None:
        entered.set()
        go.wait(10)
        real(config, run_id, epoch)

    # Wherever the lease is given back from (the gate's session, the session's helper).
    monkeypatch.setattr(_gate, "release_lease", slow_release)
    monkeypatch.setattr(_session, "release_lease", slow_release)

    async def scenario() -> agentrt.Run:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(driver.start("wait"))
        assert await loop.run_in_executor(None, asked.wait, 10)
        task.cancel()  # the caller cancels the loop
        assert await loop.run_in_executor(None, entered.wait, 10)
        task.cancel()  # and again, while the lease is being given back
        with pytest.raises(asyncio.CancelledError):
            await task
        go.set()
        run_id = any_store.list_runs()[0].id
        await _released(driver, any_store, run_id)  # the release, off the loop, on its own
        monkeypatch.setattr(_gate, "release_lease", real)
        monkeypatch.setattr(_session, "release_lease", real)
        return await driver.resume(run_id)

    try:
        resumed = asyncio.run(scenario())
    finally:
        go.set()
    assert resumed.status == "COMPLETED"
