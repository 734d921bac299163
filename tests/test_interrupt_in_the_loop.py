"""A `KeyboardInterrupt` landing in the loop's own coroutine while a tool's thread runs
(review of decision 0163's `except BaseException` in `run_tool`, which no test reached: a
real SIGINT under a `_sync` twin arrives as a cancel of the loop instead).

The interrupt is raised in `run_tool`'s frame, at its await of the call, the thread still
running: as a signal landing while the loop thread runs the driver's coroutine. The lease
must stay this process's, renewed past its length, while the thread runs; then be given
back; and the next resume must find the step executing and ask a person.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _step
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


class _AllowAll:
    policy_id = "allow-all/1"

    def evaluate(self, request: Any, view: Any) -> Any:
        return agentrt.PolicyDecision.allow()


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_an_interrupt_in_the_loop_while_a_tool_thread_runs_keeps_the_lease_until_it_returns(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch, twin: str
) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(call: Any) -> Any:
        started.set()
        release.wait(20)
        return agentrt.ToolResult(content={"ok": True})

    tool = RecordingTool("pay", SideEffect.REMOTE_MUTATION, result=slow)
    real_invoke = _step.invoke

    async def interrupted_invoke(*args: Any) -> Any:
        inner = asyncio.ensure_future(real_invoke(*args))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, started.wait, 10)
        assert not inner.done()
        raise KeyboardInterrupt  # lands here, in the loop's coroutine, the thread running

    monkeypatch.setattr(_step, "invoke", interrupted_invoke)
    # Long enough that a heartbeat late by seconds on a loaded machine still renews in
    # time (on PostgreSQL the server's clock judges the lease); the test waits for one
    # renewal, not for the length.
    ttl = timedelta(seconds=3)
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.tool_call("pay", {"x": 1}), Decision.complete({})]),
        policy=_AllowAll(),
        tools=[tool],
        new_id=Ids(),
        now=FakeClock(),
        lease_ttl=ttl,
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            if twin == "sync":
                driver.start_sync("pay")
            else:
                asyncio.run(driver.start("pay"))
        (run,) = any_store.list_runs()
        first = any_store.lease_state(run.id)
        assert first is not None and first.expires_at is not None
        owner = first.owner
        assert owner != ""  # the thread runs: nobody may take the run over
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the heartbeat renews it while the thread runs
            renewed = any_store.lease_state(run.id)
            assert renewed is not None and renewed.expires_at is not None
            if renewed.expires_at > first.expires_at:
                break
            time.sleep(0.01)
        assert renewed.owner == owner and renewed.expires_at > first.expires_at
        other = agentrt.Driver(
            store=any_store,
            agent=ScriptedAgent([Decision.complete({})]),
            policy=_AllowAll(),
            tools=[tool],
            new_id=Ids("b"),
            now=FakeClock(),
        )
        with pytest.raises(agentrt.RunLeasedError):
            other.resume_sync(run.id)
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while any_store.lease_state(run.id).owner and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any_store.lease_state(run.id).owner == ""
    monkeypatch.setattr(_step, "invoke", real_invoke)
    assert [s.status for s in any_store.list_steps(run.id)] == ["executing"]
    again = other.resume_sync(run.id)
    assert again.status == "WAITING_FOR_APPROVAL"
    (approval,) = any_store.list_approvals(run.id)
    assert approval.kind == "interrupted_side_effect"
    assert len(tool.calls) == 1


def test_a_gate_session_closed_after_an_interrupt_while_an_async_tool_may_run_keeps_the_lease(
    any_store: agentrt.Store, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Gate's close gives the Driver's guarantee (decision 0163): an interrupt that broke
    into an async tool's call leaves its task perhaps running, with no thread to wait for, so
    the lease is kept, to lapse as after a crash, never given back under it. Once gave it
    back at the close: any attach could then have the same call approved and run beside it."""
    from support.leases import expire_lease

    calls: list[Any] = []
    finished: list[Any] = []
    running: list[asyncio.Future[Any]] = []
    events: dict[str, asyncio.Event] = {}

    class Pay:
        spec = RecordingTool("pay", SideEffect.REMOTE_MUTATION).spec

        async def call(self, call: Any) -> Any:
            calls.append(call)
            events["started"].set()
            await events["release"].wait()
            finished.append(call)
            return agentrt.ToolResult(content={"ok": True})

    real_invoke = _step.invoke

    async def interrupted_invoke(*args: Any) -> Any:
        inner = asyncio.ensure_future(real_invoke(*args))
        await events["started"].wait()
        assert not inner.done()
        running.append(inner)
        raise KeyboardInterrupt  # lands in the session's coroutine, the tool's task running

    def gate(prefix: str) -> agentrt.Gate:
        return agentrt.Gate(
            store=any_store, policy=_AllowAll(), tools=[Pay()], new_id=Ids(prefix), now=FakeClock()
        )

    async def main() -> tuple[str, str, list[Any]]:
        events.update(started=asyncio.Event(), release=asyncio.Event())
        session = await gate("a").begin("pay")
        step = await session.step()
        assert step is not None
        verdict = await step.propose(Decision.tool_call("pay", {"x": 1}))
        assert verdict.outcome == "allowed"
        with pytest.raises(KeyboardInterrupt):
            await step.execute()
        await session.close()
        owner = any_store.lease_state(session.run_id).owner
        with pytest.raises(agentrt.RunLeasedError):  # nobody may take it beside the task
            await gate("b").attach(session.run_id)
        unfinished = list(finished)
        events["release"].set()
        await running[0]
        return session.run_id, owner, unfinished

    monkeypatch.setattr(_step, "invoke", interrupted_invoke)
    run_id, owner, unfinished = asyncio.run(main())
    monkeypatch.setattr(_step, "invoke", real_invoke)
    assert owner != "" and unfinished == []
    assert [s.status for s in any_store.list_steps(run_id)] == ["executing"]
    expire_lease(database, run_id)  # as it lapses, with nobody renewing it
    other = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.complete({})]),
        policy=_AllowAll(),
        tools=[Pay()],
        new_id=Ids("c"),
        now=FakeClock(),
    )
    again = other.resume_sync(run_id)
    assert again.status == "WAITING_FOR_APPROVAL"
    (approval,) = any_store.list_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    assert len(calls) == 1


def test_a_gate_session_closed_after_an_interrupt_outside_any_tool_gives_the_lease_back(
    any_store: agentrt.Store,
) -> None:
    """And otherwise it gives the lease back: an interrupt from the policy, no tool started."""

    class Interrupting:
        policy_id = "interrupting/1"

        def evaluate(self, request: Any, view: Any) -> Any:
            raise KeyboardInterrupt

    tool = RecordingTool("pay", SideEffect.REMOTE_MUTATION)
    gate = agentrt.Gate(
        store=any_store, policy=Interrupting(), tools=[tool], new_id=Ids(), now=FakeClock()
    )
    session = gate.begin_sync("pay")
    step = session.step_sync()
    assert step is not None
    with pytest.raises(KeyboardInterrupt):
        step.propose_sync(Decision.tool_call("pay", {"x": 1}))
    session.close_sync()
    assert any_store.lease_state(session.run_id).owner == ""
    assert tool.calls == []
