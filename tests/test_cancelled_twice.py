"""A caller cancelled a second time while its cancelled tool call's outcome is being
committed: the outcome is still committed before the cancellation goes on, and the
lease stays held while the tool's thread runs (nobody may start the call beside it);
so it does when that commit fails (decision 0132).

The outcome's commit is held open at its crash point (`probe_in_tx`) so that the
second cancel lands inside it, on either backend.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import Decision, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool, event_types


class _TwoCancels:
    """A tool whose thread blocks until released, and an outcome commit held open."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.in_finish = threading.Event()
        self.finish_may_go = threading.Event()
        self.release = threading.Event()
        self.tool = RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=self._charge)

    def _charge(self, call: agentrt.ToolCall) -> agentrt.ToolResult:
        self.started.set()
        assert self.release.wait(30)
        return agentrt.ToolResult({"charged": True})

    def probe_in_tx(self, point: str, session: Any) -> None:
        if point == "step.tool_finished":
            self.in_finish.set()
            assert self.finish_may_go.wait(30)

    async def cancel_twice(self, task: asyncio.Task[Any]) -> None:
        """Cancel `task` mid-call, then again while its outcome's commit is open."""
        assert await asyncio.to_thread(self.started.wait, 10)
        task.cancel()
        assert await asyncio.to_thread(self.in_finish.wait, 10)
        task.cancel()
        for _ in range(20):  # let the second cancel reach the task
            await asyncio.sleep(0)
        self.finish_may_go.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    def check_then_release(
        self,
        store: agentrt.Store,
        run_id: str,
        status: str = "interrupted",
        last: str = "step.tool_finished",
    ) -> None:
        # The tool's thread still runs: the step as recorded, the lease still held.
        (step,) = store.list_steps(run_id)
        assert step.status == status
        assert event_types(store, run_id)[-1] == last
        assert store.lease(run_id).owner != ""
        self.release.set()
        deadline = time.monotonic() + 10
        while store.lease(run_id).owner and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.lease(run_id).owner == ""
        assert len(self.tool.calls) == 1


def test_a_gate_execute_cancelled_twice_commits_its_outcome_and_keeps_the_lease(
    any_store: agentrt.Store,
) -> None:
    two = _TwoCancels()
    gate = agentrt.Gate(
        store=any_store,
        policy=child.policy(),
        tools=[two.tool],
        probe_in_tx=two.probe_in_tx,
    )

    async def main() -> str:
        session = await gate.begin("charge")
        step = await session.step()
        assert step is not None
        assert (await step.propose(Decision.tool_call("charge", {}))).outcome == "allowed"
        await two.cancel_twice(asyncio.create_task(step.execute()))
        await session.close()
        return session.run.id

    two.check_then_release(any_store, asyncio.run(main()))


def test_a_driver_loop_cancelled_twice_commits_its_outcome_and_keeps_the_lease(
    any_store: agentrt.Store,
) -> None:
    two = _TwoCancels()
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.tool_call("charge", {}), Decision.complete()]),
        policy=child.policy(),
        tools=[two.tool],
        probe_in_tx=two.probe_in_tx,
    )

    async def main() -> None:
        await two.cancel_twice(asyncio.create_task(driver.start("charge", run_id="c" * 32)))

    asyncio.run(main())
    two.check_then_release(any_store, "c" * 32)


def test_a_cancelled_calls_failed_outcome_commit_keeps_the_lease_while_its_thread_runs(
    any_store: agentrt.Store,
) -> None:
    """The outcome's commit fails (the disk, a dropped connection): its error goes on to the
    caller, the step is left `executing` for the next owner, and the lease stays held
    while the thread runs (found by a review of decision 0132)."""
    two = _TwoCancels()

    def failing(point: str, session: Any) -> None:
        if point == "step.tool_finished":
            raise agentrt.StoreError("disk I/O error")

    gate = agentrt.Gate(
        store=any_store, policy=child.policy(), tools=[two.tool], probe_in_tx=failing
    )

    async def main() -> str:
        session = await gate.begin("charge")
        step = await session.step()
        assert step is not None
        assert (await step.propose(Decision.tool_call("charge", {}))).outcome == "allowed"
        task = asyncio.create_task(step.execute())
        assert await asyncio.to_thread(two.started.wait, 10)
        task.cancel()
        with pytest.raises(agentrt.StoreError, match="disk I/O error"):
            await task
        await session.close()
        return session.run.id

    two.check_then_release(
        any_store, asyncio.run(main()), status="executing", last="step.tool_started"
    )
