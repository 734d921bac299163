"""A Driver's loop abandoned with its event loop mid-step, not cancelled first (decision 0218).

Decision 0216 frees the run when a Driver loop, cancelled, has its event loop closed while it
lets go of its lease. A loop whose event loop is closed while it awaits anything else (its
agent's answer, say), and whose coroutine is then closed from outside (as the cycle
collector closes it, on any thread), went by `_drive`'s other exit: it took the driver's
`_active_lock` (waiting for itself for ever when the collecting thread held it) and awaited
its letting go on no loop (refused: the run then stayed this driver's for the process's
life). Every race is made by hand (a loop closed, a collection on a thread), no clock.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _session
from conftest import FakeClock, Ids, RecordingTool
from support.abandoned import end_abandoned
from support.gates import collected_while_held, hold_next_group


def _driver(store: agentrt.Store, agent: Any, *tools: Any) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=list(tools) or [RecordingTool("change", SideEffect.LOCAL_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )


@pytest.mark.parametrize("held", ["the driver's lock", "another lock"])
def test_a_driver_loop_closed_while_its_agent_decides_frees_the_run_once_collected(
    any_store: agentrt.Store, held: str
) -> None:
    """The agent of step 0 never answers; the consumer's event loop is closed under it (no
    cancel) and the loop's task collected on a thread holding `held`. The collection ends
    (before: with the driver's lock held, it waited for that lock for ever), the run is not
    this driver's any more (before: "already executing" for the process's life), and the
    driver's resume takes it over, as after a crash, and completes it."""
    store = any_store
    deciding = threading.Event()
    asked: list[int] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        if len(asked) == 1:
            deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        return Decision.complete("done")

    driver = _driver(store, agent)
    run_id = "e" * 32
    lock = driver._active_lock if held == "the driver's lock" else threading.Lock()
    gc.disable()  # the collection comes where the test makes it, not before
    try:
        loop = asyncio.new_event_loop()
        driving = loop.create_task(driver.start("abandoned mid-decide", None, run_id))
        assert loop.run_until_complete(loop.run_in_executor(None, deciding.wait, 30))
        loop.close()  # the consumer's loop, closed under the agent's await: no cancel
        # The task still referenced, its loop closed: abandoned, not executing (decision 0219).
        assert not driver._is_executing(run_id)
        task = weakref.ref(driving)
        del driving, loop
        collected_while_held(lock, task, "driver loop")
    finally:
        gc.enable()
    assert not driver._is_executing(run_id)
    run = driver.resume_sync(run_id)
    assert (run.status, asked) == ("COMPLETED", [1, 1])  # step 0 asked again
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact


class _HeldRead(RecordingTool):
    """A read-only tool (a plain function: its own thread) that returns once `go` is set."""

    def __init__(self) -> None:
        super().__init__("read", SideEffect.READ_ONLY, result={"files": []})
        self.running = threading.Event()
        self.go = threading.Event()

    def call(self, call: Any) -> Any:
        self.running.set()
        assert self.go.wait(30)
        return super().call(call)


def test_a_driver_loop_closed_while_a_tool_thread_runs_keeps_the_run_until_it_returns(
    any_store: agentrt.Store,
) -> None:
    """As above, but the loop is closed while a tool's thread runs step 0's call, and its
    coroutine closed from outside meanwhile (as the collector closes it): the run stays this
    driver's (nobody may start the call beside that thread) until the thread returns; then
    it is freed, and the driver's resume completes it."""
    store = any_store
    tool = _HeldRead()
    asked: list[int] = []

    def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        if len(asked) == 1:
            return Decision.tool_call("read", {"x": 1})
        return Decision.complete("done")

    driver = _driver(store, agent, tool)
    run_id = "f" * 32
    loop = asyncio.new_event_loop()
    driving = loop.create_task(driver.start("abandoned mid-call", None, run_id))
    assert loop.run_until_complete(loop.run_in_executor(None, tool.running.wait, 30))
    loop.close()  # under the tool's call: its thread goes on
    end_abandoned(driving)  # closed from outside, as the collector closes it
    assert driver._is_executing(run_id)  # the tool's thread still runs
    with pytest.raises(agentrt.RunStateError, match="already executing"):
        driver.resume_sync(run_id)
    tool.go.set()
    for _ in range(3000):  # its thread's return frees it (bounded; no clock decides)
        if not driver._is_executing(run_id):
            break
        threading.Event().wait(0.01)
    assert not driver._is_executing(run_id)
    assert driver.resume_sync(run_id).status == "COMPLETED"
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact


def test_a_driver_cancelled_twice_whose_loop_closes_before_its_letting_go_ends_frees_the_run(
    any_store: agentrt.Store,
) -> None:
    """A Driver's loop is cancelled while its agent decides step 0; its letting go (the
    step's kept claim committed `LEFT_OPEN`, then the lease given back) is held in the
    store, and a second cancel cuts the wait short: the loop's task ends, the letting go
    goes on, `then` to be told once it ends. The consumer then closes its event loop before
    the letting go ended (it never will): once that task is collected, the run is not this
    driver's any more (before: "already executing" for the process's life), and the
    driver's resume takes it over, as after a crash, and completes it."""
    store = any_store
    deciding = threading.Event()
    asked: list[int] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        if len(asked) == 1:
            deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        return Decision.complete("done")

    driver = _driver(store, agent)
    run_id = "a" * 32
    loop = asyncio.new_event_loop()
    driving = loop.create_task(driver.start("cancelled twice", None, run_id))
    assert loop.run_until_complete(loop.run_in_executor(None, deciding.wait, 30))
    entered, go = hold_next_group(store, commit="never")
    driving.cancel()
    assert loop.run_until_complete(loop.run_in_executor(None, entered.wait, 30))
    driving.cancel()  # a second cancel, while the letting go's commit is held
    loop.run_until_complete(asyncio.wait([driving]))
    assert driving.cancelled()
    assert driver._is_executing(run_id)  # its letting go has not ended
    loop.close()  # before it ends: it never will
    go.set()
    _session.committer_for(store).submit(lambda tx: None).result(30)
    del driving, loop
    gc.collect()  # the letting go's task, on the closed loop, collected
    assert not driver._is_executing(run_id)
    run = driver.resume_sync(run_id)
    assert (run.status, asked) == ("COMPLETED", [1, 1])
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact
