"""A Driver whose event loop was closed while its task stays referenced (decision 0219).

The task running `start`/`resume` is kept (never collected), so its coroutine is never
closed: before, the run stayed marked as executed by this driver, and its `resume` (and
`recover`) refused it "already executing" for the life of the process. A mark whose loop
is closed no longer refuses: the driver's next resume lets the abandoned session go as a
crash leaves it (nothing of it written, its heartbeat stopped) and takes the run over
from its own lease through the ordinary judgement; the step in flight is interrupted,
never run again on its own. A tool thread still running under that loop keeps the run
refused until it returns.

Every race is ordered by events or made by hand (a loop closed, a commit held), no clock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, _session
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.abandoned import end_abandoned
from support.gates import hold_next_group


def change_tool() -> RecordingTool:
    return RecordingTool("change", SideEffect.LOCAL_MUTATION)


def _driver(store: agentrt.Store, agent: Any, tool: Any) -> agentrt.Driver:
    return agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )


@pytest.mark.parametrize("again", ["resume", "recover"])
def test_a_driver_loop_closed_while_its_agent_decides_does_not_keep_the_run(
    any_store: agentrt.Store, again: str
) -> None:
    """The Driver's loop is closed while its agent decides step 0 (the step's claim kept in
    memory, nothing written of it), the task kept referenced. The driver's resume (or
    recover) from a live loop takes the run over from its own lease (before: refused
    "already executing", recover skipped it) and completes it; step 0 is asked again. The
    abandoned coroutine, closed while the new loop drives, takes back nothing of it: the run
    stays this driver's until the new loop ends."""
    store = any_store
    deciding = threading.Event()
    asked: list[int] = []
    marked: list[bool] = []
    closed: list[Any] = []

    async def agent(step_input: agentrt.StepInput) -> Any:
        asked.append(len(step_input.steps))
        if len(asked) == 1:
            deciding.set()
            await asyncio.get_running_loop().create_future()  # never answers
        end_abandoned(closed[0])  # the abandoned loop's coroutine, closed meanwhile
        marked.append(driver._is_executing(run_id))
        return Decision.complete("done")

    tool = change_tool()
    driver = _driver(store, agent, tool)
    run_id = "d" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed as it decides", None, run_id))
    closed.append(driving)
    assert theirs.run_until_complete(theirs.run_in_executor(None, deciding.wait, 30))
    theirs.close()  # the consumer's loop, closed under the agent's decision; task kept
    assert not driving.done()
    assert store.lease(run_id).owner == driver.lease_owner  # still held in the record
    assert not driver._is_executing(run_id)  # its loop can never go on
    if again == "resume":
        run = driver.resume_sync(run_id)
    else:
        [recovered] = driver.recover_sync()
        assert (recovered.run_id, recovered.error) == (run_id, None)
        run = store.get_run(run_id)
    assert (run.status, asked, marked) == ("COMPLETED", [1, 1], [True])  # step 0 asked twice
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "done")]
    types = event_types(store, run_id)
    assert types.count("lease.taken_over") == 1
    assert tool.calls == []
    assert store.lease(run_id).owner == ""
    assert not driver._is_executing(run_id)
    assert store.verify_events().intact


@pytest.mark.parametrize("made", ["before", "after"])
def test_a_driver_loop_closed_under_its_tool_start_never_runs_the_tool_on_its_own(
    any_store: agentrt.Store, made: str
) -> None:
    """The Driver's loop is closed while the commit that starts a side-effecting tool
    (`step.tool_started`) is held in the store; the tool is never called by that loop (it
    is gone). `before`: the commit was made; the driver's resume takes the run over as
    after a crash: the step was executing, so the run waits on an
    `interrupted_side_effect` approval and the tool is not called again on its own.
    `after`: the commit is held before its transaction ran; the resume takes the run over
    meanwhile (nothing of the step in the record) and drives it to its end, the tool called
    once by the live loop; the closed loop's commit, made at last, writes nothing (its
    lease's epoch is older): the two loops never both act on the run."""
    store = any_store
    tool = change_tool()
    held: list[Any] = []
    armed = threading.Event()

    made_late = threading.Event()
    real = store.transactions

    def transactions(works: Any) -> Any:  # tells when the held group's transaction ended
        try:
            return real(works)
        finally:
            if held and held[1].is_set():
                made_late.set()

    def agent(step_input: agentrt.StepInput) -> Any:
        if len(step_input.steps) > 1:
            return Decision.complete("done")
        if not held:  # the next group is the tool's start (an allowed verdict writes nothing)
            store.transactions = transactions  # type: ignore[method-assign]
            held.extend(hold_next_group(store, commit="before" if made == "before" else "after"))
            armed.set()
        return Decision.tool_call("change", {"x": 1})

    driver = _driver(store, agent, tool)
    run_id = "e" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed under its tool start", None, run_id))
    assert theirs.run_until_complete(theirs.run_in_executor(None, armed.wait, 30))
    entered, go = held
    assert theirs.run_until_complete(theirs.run_in_executor(None, entered.wait, 30))
    theirs.close()  # the tool's start is made, its answer to a closed loop
    committer = _session.committer_for(store)
    if made == "before":
        go.set()
        committer.submit(lambda tx: None).result(30)
        assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "executing")]
        run = driver.resume_sync(run_id)  # before: "already executing"
    else:
        assert store.list_steps(run_id) == []  # held before its transaction: not made
        run = driver.resume_sync(run_id)  # taken over, and driven to its end, meanwhile
        go.set()  # the closed loop's tool start, made at last: refused (an older epoch)
        assert made_late.wait(30)
        assert (run.status, store.get_run(run_id).status) == ("COMPLETED", "COMPLETED")
        steps = [(s.index, s.status) for s in store.list_steps(run_id)]
        assert steps == [(0, "done"), (1, "done")]
        assert event_types(store, run_id).count("step.tool_started") == 1
        assert [c.args for c in tool.calls] == [{"x": 1}]  # by the live loop alone
        assert store.verify_events().intact
        end_abandoned(driving)  # the abandoned coroutine, ended here (its loop is gone)
        return
    assert not driving.done()
    assert run.status == "WAITING_FOR_APPROVAL"
    [approval] = store.list_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "awaiting_approval")]
    assert tool.calls == []  # never called: neither by the closed loop nor on its own
    types = event_types(store, run_id)
    assert [t for t in types if t in ("lease.taken_over", "step.interrupted")] == [
        "lease.taken_over",
        "step.interrupted",
    ]
    end_abandoned(driving)  # the abandoned coroutine, closed at last: nothing changes
    assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    assert not driver._is_executing(run_id)
    assert store.verify_events().intact


def test_a_driver_loop_closed_while_its_tool_thread_runs_keeps_the_run_until_it_returns(
    any_store: agentrt.Store,
) -> None:
    """The Driver's loop is closed while a side-effecting tool's thread runs. The tool may
    still act: the driver's resume and recover refuse the run meanwhile (nobody starts a
    call beside it), the lease still this driver's. Once the thread returns the lease is
    given back, its outcome unrecorded (its loop is gone), and the driver's resume takes the
    run over: the run waits on an `interrupted_side_effect` approval, the tool called once."""
    store = any_store
    started, release = threading.Event(), threading.Event()

    def blocking(call: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"done": True}

    tool = RecordingTool("change", SideEffect.LOCAL_MUTATION, result=blocking)
    driver = _driver(store, lambda _: Decision.tool_call("change", {"x": 1}), tool)
    run_id = "f" * 32
    theirs = asyncio.new_event_loop()
    driving = theirs.create_task(driver.start("its loop closed as its tool runs", None, run_id))
    assert theirs.run_until_complete(theirs.run_in_executor(None, started.wait, 30))
    theirs.close()  # the consumer's loop, closed while the tool's thread runs; task kept
    try:
        with pytest.raises(agentrt.RunStateError, match="already executing"):
            driver.resume_sync(run_id)
        [skipped] = driver.recover_sync()
        assert (skipped.run_id, skipped.why) == (run_id, "this driver is executing it now")
        assert driver._is_executing(run_id)
        assert store.lease(run_id).owner == driver.lease_owner
    finally:
        release.set()
    for _ in range(3000):  # the thread's return gives the lease back (bounded)
        if not driver._is_executing(run_id):
            break
        time.sleep(0.01)
    assert not driver._is_executing(run_id)
    assert store.lease(run_id).owner == ""
    assert [(s.index, s.status) for s in store.list_steps(run_id)] == [(0, "executing")]
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    [approval] = store.list_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    assert [c.args for c in tool.calls] == [{"x": 1}]  # once: never again on its own
    assert not driving.done()
    assert store.verify_events().intact
    end_abandoned(driving)  # the abandoned coroutine, ended here (its loop is gone)
