"""Consumer code that raises its own `CancelledError` is a failure of that code, not a cancel.

An agent, a policy or a run-level `reconcile` often awaits something of its own (an
HTTP request, a task of its library) that was cancelled: the `CancelledError` it then
raises is not a cancellation of the loop, whose caller asked for nothing. As a tool's
own `CancelledError` is its `tool_error` (decision 0017), the agent's fails the run as
`agent_error`, the policy's as `internal_error` with nothing executed, and a
reconciliation's as `internal_error`; the call returns the run and nothing is left
RUNNING. A real cancel of the caller still propagates.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, Reconciliation, RecoverAction, RunView, SideEffect, ToolRequest
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.leases import expire_lease


async def _a_cancelled_task() -> None:
    """What a library's request that was cancelled under it raises: awaiting a cancelled task."""
    task = asyncio.ensure_future(asyncio.sleep(3600))
    await asyncio.sleep(0)
    task.cancel()
    await task


class _SyncRaiser:
    def decide(self, input: Any) -> Decision:
        raise asyncio.CancelledError()


class _AwaitsCancelled:
    async def decide(self, input: Any) -> Decision:
        await _a_cancelled_task()
        return Decision.complete({})


def _driver(store: agentrt.Store, agent: Any, policy: Any = None, **kw: Any) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=policy or agentrt.default_policy(),
        tools=[kw.pop("tool", None) or RecordingTool("lookup", SideEffect.READ_ONLY)],
        now=FakeClock(),
        new_id=kw.pop("new_id", Ids()),
        **kw,
    )


@pytest.mark.parametrize("agent", [_SyncRaiser(), _AwaitsCancelled()], ids=["sync", "awaited"])
def test_an_agent_raising_its_own_cancelled_error_fails_the_run_as_agent_error(
    any_store: agentrt.Store, agent: Any
) -> None:
    run = _driver(any_store, agent).start_sync("look it up")

    assert (run.status, run.reason) == ("FAILED", "agent_error")
    assert "CancelledError" in run.reason_detail
    stored = any_store.get_run(run.id)
    assert (stored.status, stored.reason) == ("FAILED", "agent_error")
    assert [s.status for s in any_store.list_steps(run.id)] == ["failed"]
    assert any_store.lease_state(run.id).owner == ""


class _CancelledPolicy:
    policy_id = "cancelled/1"

    def __init__(self, awaited: bool) -> None:
        self.awaited = awaited

    def evaluate(self, request: ToolRequest, view: RunView) -> Any:
        if self.awaited:
            return _a_cancelled_task()
        raise asyncio.CancelledError()


@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "awaited"])
def test_a_policy_raising_its_own_cancelled_error_ends_the_run_internal_error_with_nothing_run(
    any_store: agentrt.Store, awaited: bool
) -> None:
    tool = RecordingTool("lookup", SideEffect.READ_ONLY)
    agent = ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete({})])
    run = _driver(any_store, agent, _CancelledPolicy(awaited), tool=tool).start_sync("look")

    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert "CancelledError" in run.reason_detail
    assert tool.calls == []
    assert [s.status for s in any_store.list_steps(run.id)] == ["failed"]
    assert any_store.get_run(run.id).status == "FAILED"


def test_a_real_cancel_of_the_caller_while_the_agent_decides_still_propagates(
    any_store: agentrt.Store,
) -> None:
    class Waits:
        def __init__(self) -> None:
            self.deciding = asyncio.Event()

        async def decide(self, input: Any) -> Decision:
            self.deciding.set()
            await asyncio.sleep(3600)
            return Decision.complete({})

    agent = Waits()
    driver = _driver(any_store, agent)

    async def main() -> None:
        task = asyncio.ensure_future(driver.start("wait"))
        await agent.deciding.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (run,) = any_store.list_runs()
    assert run.status == "RUNNING"  # the caller stopped it: left for a resume, as a death is


class _Died(BaseException):
    """Ends a first driver's loop while its agent decides, leaving its run RUNNING."""


def _left_running(store: agentrt.Store, database: str, run_id: str) -> None:
    class Dies:
        def decide(self, input: Any) -> Decision:
            raise _Died()

    with pytest.raises(_Died):
        _driver(store, Dies(), new_id=Ids("b")).start_sync("charge", run_id=run_id)
    expire_lease(database, run_id)


def test_a_reconcile_raising_its_own_cancelled_error_ends_its_run_and_recover_goes_on(
    any_store: agentrt.Store, database: str
) -> None:
    first, second = "1" * 32, "2" * 32
    _left_running(any_store, database, first)
    _left_running(any_store, database, second)

    async def reconcile(view: RunView) -> Reconciliation:
        if view.run.id == first:
            await _a_cancelled_task()
        return Reconciliation.continue_run("looked")

    driver = _driver(
        any_store,
        ScriptedAgent([Decision.complete({"done": True})] * 2),
        reconcile=reconcile,
        new_id=Ids("c"),
        lease_ttl=timedelta(seconds=30),
    )
    results = {r.run_id: r for r in driver.recover_sync()}

    assert results[first].action == RecoverAction.RESUMED
    assert results[first].run is not None
    assert (results[first].run.status, results[first].run.reason) == ("FAILED", "internal_error")
    assert "CancelledError" in results[first].run.reason_detail
    assert results[second].action == RecoverAction.RESUMED
    assert results[second].run is not None and results[second].run.status == "COMPLETED"
    assert {r.status for r in any_store.list_runs()} == {"FAILED", "COMPLETED"}


def test_a_models_own_cancelled_error_is_an_error_not_retried_and_the_run_ends_model_unavailable(
    any_store: agentrt.Store,
) -> None:
    from agentrt._model import ModelConfig
    from support.models import PRICE, FakeModel, calls, drive, reply

    model = FakeModel(_a_cancelled_task, reply())
    run = drive(any_store, model, config=ModelConfig(model=model, prices=PRICE, max_retries=3))

    assert (run.status, run.reason) == ("FAILED", "model_unavailable")
    assert "CancelledError" in run.reason_detail
    assert len(model.requests) == 1
    assert calls(any_store, run.id) == [(1, "error", 0, 0, 0)]
    (call,) = any_store.list_model_calls(run.id)
    assert "cancelled by the caller" not in call.error


def test_an_observer_raising_its_own_cancelled_error_does_not_stop_the_run(
    any_store: agentrt.Store, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def observer(event: agentrt.Event) -> None:
        seen.append(event.type)
        raise asyncio.CancelledError()

    tool = RecordingTool("lookup", SideEffect.READ_ONLY)
    agent = ScriptedAgent([Decision.tool_call("lookup", {"x": 1}), Decision.complete({})])
    run = _driver(any_store, agent, tool=tool, observer=observer).start_sync("look")

    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    assert len(tool.calls) == 1
    assert seen[-1] == "run.finished"
    assert any_store.lease_state(run.id).owner == ""
    assert "observer raised" in caplog.text
