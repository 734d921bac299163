"""The Driver's marks of the runs it executes, read while another of its loops ends.

Decision 0219 made `Driver._active` a set of marks (`_Mark`) that `_is_executing` (recover's
judgement) and `_Exclusive.__enter__` iterate under `_active_lock`; decisions 0216/0218/0219
have `_Exclusive.__exit__` discard its mark without that lock (the cycle collector may
leave it on a thread holding the lock). A loop of the same driver ending on another thread
while the set is iterated changed its size mid-iteration: `RuntimeError: Set changed size
during iteration`. A thread switch may come at any bytecode of the iteration; here it is
placed by hand where the iteration calls out (the abandoned loop's `is_closed`), so the race
is made, not waited for (no clock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _session
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.abandoned import end_abandoned, end_abandoned_on
from support.gates import collected_while_held, hold_next_group


class _PeekedLoop(asyncio.SelectorEventLoop):
    """A consumer's own event loop; `peeked`, once set, runs at the next `is_closed` look
    (where a thread switch may come), then is dropped."""

    peeked: Callable[[], None] | None = None

    def is_closed(self) -> bool:
        peek, self.peeked = self.peeked, None
        if peek is not None:
            peek()
        return super().is_closed()


def test_recover_judges_an_abandoned_run_while_another_loop_of_the_driver_ends(
    any_store: agentrt.Store,
) -> None:
    """Run X's loop is closed while its agent decides (task kept: its mark abandoned); run Y
    is driven by the same driver on another thread. `recover()` judges X (`_is_executing`,
    under the driver's lock) and, as it looks at X's mark, Y's loop ends on its thread (its
    mark discarded without the lock). Before: X FAILED with "Set changed size during
    iteration"; now X is taken over and completed, step 0 asked again."""
    store = any_store
    x_deciding, y_deciding, y_go = threading.Event(), threading.Event(), threading.Event()
    asked: list[str] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        goal = step_input.run.goal
        asked.append(goal)
        if goal == "x" and asked.count("x") == 1:
            x_deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        if goal == "y":
            y_deciding.set()
            assert await asyncio.get_running_loop().run_in_executor(None, y_go.wait, 30)
        return Decision.complete("done")

    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("change", SideEffect.LOCAL_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )
    x, y = "1" * 32, "2" * 32
    theirs = _PeekedLoop()
    driving = theirs.create_task(driver.start("x", None, x))
    assert theirs.run_until_complete(theirs.run_in_executor(None, x_deciding.wait, 30))
    theirs.close()  # the consumer's loop, closed under X's agent; its task kept
    ended: list[agentrt.Run] = []
    other = threading.Thread(target=lambda: ended.append(driver.start_sync("y", None, y)))
    other.start()
    assert y_deciding.wait(30)

    def switch() -> None:  # Y's loop ends on its thread, here, mid-iteration
        y_go.set()
        other.join(30)
        assert not other.is_alive()

    theirs.peeked = switch
    recovered = {r.run_id: r for r in driver.recover_sync()}
    assert theirs.peeked is None  # the switch came
    assert [r.status for r in ended] == ["COMPLETED"]
    assert (recovered[x].action, recovered[x].error) == ("resumed", None)
    assert recovered[x].run is not None and recovered[x].run.status == "COMPLETED"
    assert asked.count("x") == 2  # step 0 asked again, as after a crash
    assert [(s.index, s.status) for s in store.list_steps(x)] == [(0, "done")]
    assert store.lease(x).owner == ""
    assert not driver._is_executing(x) and not driver._is_executing(y)
    assert store.verify_events().intact
    end_abandoned(driving)
    end_abandoned_on(theirs)  # and its tool's task, ended here (their loop is gone)


def _closed_while_held(lock: Any, coro: Any) -> None:
    closed = threading.Event()

    def close() -> None:
        with lock:
            coro.close()
        closed.set()

    threading.Thread(target=close, daemon=True).start()
    assert closed.wait(10), "the closed coroutine waited for a lock its own thread held"


@pytest.mark.parametrize(
    "order",
    [
        ("resume", "collect", "return"),
        ("collect", "resume", "return"),
        ("resume", "return", "collect"),
        ("return", "collect", "resume"),
    ],
)
def test_every_order_of_a_takeover_a_collection_and_a_tool_thread_return_frees_the_run_once(
    any_store: agentrt.Store, order: tuple[str, str, str]
) -> None:
    """A Driver's loop is closed while a side-effecting tool's thread runs (task kept). In
    each `order` of: the driver's resume (refused while the thread runs: it takes the
    abandoned mark, decision 0219), the loop's coroutine collected on a thread holding the
    driver's lock (decision 0218), the tool's thread returning: the run is this driver's
    exactly while the thread runs, then one resume takes it over (the tool never run again
    on its own), and nothing is left marked (`_active`, `_lingering`) once it ends."""
    store = any_store
    started, release = threading.Event(), threading.Event()

    def blocking(call: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"done": True}

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=blocking)
    driver = agentrt.Driver(
        store=store,
        agent=lambda _: Decision.tool_call("change", {"x": 1}),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run_id = "3" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("closed as its tool runs", None, run_id))
    assert theirs.run_until_complete(theirs.run_in_executor(None, started.wait, 30))
    theirs.close()  # under the tool's call: its thread goes on
    [mark] = driver._active
    assert mark.session is not None
    [threads] = [entry.threads for entry in mark.session._executions]
    returned = False
    run: agentrt.Run | None = None
    try:
        for what in order:
            if what == "collect":
                # As the collector closes it, on a thread holding the driver's lock (the
                # thread's future refers to the task while it runs: a collection itself
                # comes only once it returned, at the latest).
                _closed_while_held(driver._active_lock, driving.get_coro())
            elif what == "return":
                release.set()
                concurrent.futures.wait(threads, 30)
                for _ in range(3000):  # the thread's return frees the run (bounded)
                    if not driver._is_executing(run_id):
                        break
                    threading.Event().wait(0.01)
                returned = True
            elif not returned:
                with pytest.raises(agentrt.RunStateError, match="already executing"):
                    driver.resume_sync(run_id)
            else:
                run = driver.resume_sync(run_id)
            assert driver._is_executing(run_id) is not returned, what
        if run is None:
            run = driver.resume_sync(run_id)
    finally:
        release.set()
    assert run.status == "WAITING_FOR_APPROVAL"
    [approval] = store.list_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    assert [c.args for c in tool.calls] == [{"x": 1}]  # once: never again on its own
    assert (driver._active, driver._lingering) == (set(), set())
    assert store.lease(run_id).owner == ""
    assert event_types(store, run_id).count("step.interrupted") == 1
    assert store.verify_events().intact
    end_abandoned_on(theirs)  # the task and its tool's, ended here (their loop is gone)


def test_a_driver_loop_closed_inside_its_begin_is_refused_until_collected_then_resumed(
    any_store: agentrt.Store,
) -> None:
    """The consumer's loop is closed while `start`'s begin (the run's create commit, made)
    is held in the store: no session exists yet, so the mark is not abandoned (decision
    0219's consequence): refused "already executing", recover skips it; once the task is
    collected the run is freed and the driver's resume takes it over and completes it."""
    store = any_store
    asked: list[int] = []

    def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        return Decision.complete("done")

    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[RecordingTool("change", SideEffect.LOCAL_MUTATION)],
        now=FakeClock(),
        new_id=Ids(),
    )
    run_id = "4" * 32
    gc.disable()  # the collection comes where the test makes it
    try:
        theirs = asyncio.new_event_loop()
        entered, go = hold_next_group(store, commit="before")
        driving = theirs.create_task(driver.start("closed in its begin", None, run_id))
        assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
        theirs.close()  # under the begin: no session yet
        go.set()
        _session.committer_for(store).submit(lambda tx: None).result(30)
        assert driver._is_executing(run_id)
        with pytest.raises(agentrt.RunStateError, match="already executing"):
            driver.resume_sync(run_id)
        [skipped] = driver.recover_sync()
        assert (skipped.run_id, skipped.why) == (run_id, "this driver is executing it now")
        task = weakref.ref(driving)
        del driving, theirs
        collected_while_held(driver._active_lock, task, "driver loop")
    finally:
        gc.enable()
    assert not driver._is_executing(run_id)
    run = driver.resume_sync(run_id)
    assert (run.status, asked) == ("COMPLETED", [1])  # step 0, asked once
    assert (driver._active, driver._lingering) == (set(), set())
    assert store.lease(run_id).owner == ""
    assert store.verify_events().intact
