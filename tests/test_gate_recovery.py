"""Recovery of runs a gate session left behind: what an abandoned allowed verdict (or
allowed attach) leaves, and two gates racing to execute one approved request."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

import agentrt
import crashing_child as child
from agentrt import Decision, SideEffect, VerdictOutcome
from agentrt._clock import format_time
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool
from support.gates import make_gate, open_step
from support.leases import MovableWall, expire_lease, stored_expiry, wait_for_renewal
from support.rows import snapshot
from support.tools import push_tool, read_tool


def approved_waiting_run(store: agentrt.Store, push: RecordingTool, clock: FakeClock) -> str:
    session, step = open_step(make_gate(store, push, clock=clock), "push it")
    assert step.propose_sync(Decision.tool_call("push", {"x": 1})).outcome == "pending"
    session.close_sync()
    (pending,) = store.pending_approvals(session.run.id)
    agentrt.Operator(store, now=clock).approve(session.run.id, pending.id, by="alice")
    return session.run.id


def test_a_session_abandoned_after_an_allowed_verdict_is_resumed_by_recover_as_never_run(
    any_store: agentrt.Store,
) -> None:
    read = read_tool()
    clock = FakeClock()
    session, step = open_step(make_gate(any_store, read, clock=clock), "read it")
    assert step.propose_sync(Decision.tool_call("read", {"x": 1})).outcome == "allowed"
    session.close_sync()
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.tool_call("read", {"x": 2}), Decision.complete("ok")]),
        policy=agentrt.default_policy(),
        tools=[read],
        now=clock,
        new_id=Ids("b"),
    )
    (recovered,) = driver.recover_sync()
    assert recovered.run_id == session.run.id
    run = any_store.get_run(session.run.id)
    assert run.status == "COMPLETED"
    assert [c.args for c in read.calls] == [{"x": 2}]
    assert any_store.list_approvals(run.id) == []


def test_a_session_abandoned_after_an_allowed_attach_leaves_the_run_waiting_to_be_judged_again(
    any_store: agentrt.Store,
) -> None:
    push = push_tool()
    clock = FakeClock()
    run_id = approved_waiting_run(any_store, push, clock)
    session, verdict = make_gate(any_store, push, clock=clock).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    session.close_sync()
    run = any_store.get_run(run_id)
    assert run.status == "WAITING_FOR_APPROVAL" and any_store.lease(run_id).owner == ""
    assert [e.type for e in any_store.list_events(run_id=run_id)][-1] == "approval.decided"
    again, verdict = make_gate(any_store, push, clock=clock).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    step = again.current()
    assert step is not None
    assert step.execute_sync().kind == "tool_result"
    assert len(push.calls) == 1
    again.close_sync()


def test_of_two_gates_attaching_one_approved_run_the_second_is_refused_and_one_executes(
    any_store: agentrt.Store, database: str
) -> None:
    """The first attach holds the waiting run's lease; a second gate, on a connection of
    its own, is refused with `RunLeasedError` and writes nothing (decision 0032)."""
    store = any_store
    push = push_tool()
    clock = FakeClock()
    run_id = approved_waiting_run(store, push, clock)
    first, first_verdict = make_gate(store, push, clock=clock, ids=Ids("c")).attach_sync(run_id)
    assert first_verdict is not None and first_verdict.outcome == VerdictOutcome.ALLOWED
    assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    assert store.lease(run_id).owner == first._rs.config.owner
    other_store = agentrt.open_store(database)
    try:
        before = snapshot(database)
        with pytest.raises(agentrt.RunLeasedError):
            make_gate(other_store, push, clock=clock, ids=Ids("d")).attach_sync(run_id)
        with pytest.raises(agentrt.RunLeasedError):  # and so is a Driver's resume
            agentrt.Driver(
                store=other_store,
                agent=ScriptedAgent([]),
                policy=agentrt.default_policy(),
                tools=[push],
                now=clock,
            ).resume_sync(run_id)
        assert snapshot(database) == before
    finally:
        other_store.close()
    one = first.current()
    assert one is not None
    assert one.execute_sync().kind == "tool_result"
    assert len(push.calls) == 1
    first.close_sync()


def test_closing_an_allowed_attach_gives_the_waiting_run_back_at_once(
    any_store: agentrt.Store,
) -> None:
    push = push_tool()
    clock = FakeClock()
    run_id = approved_waiting_run(any_store, push, clock)
    first, _ = make_gate(any_store, push, clock=clock, ids=Ids("c")).attach_sync(run_id)
    first.close_sync()
    assert any_store.lease(run_id).owner == ""
    second, verdict = make_gate(any_store, push, clock=clock, ids=Ids("d")).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    second.close_sync()


_HOLDING_CHILD = """
import sys
import agentrt
from agentrt import SideEffect
from conftest import RecordingTool

store = agentrt.open_store(sys.argv[1])
push = RecordingTool("push", SideEffect.REMOTE_MUTATION, result={"pushed": True})
gate = agentrt.Gate(store=store, policy=agentrt.default_policy(), tools=[push])
session, verdict = gate.attach_sync(sys.argv[2])
print(verdict.outcome, flush=True)
sys.stdin.read()  # holds the attached run until killed
"""


@pytest.mark.slow
def test_a_run_attached_in_another_process_is_refused_until_that_process_dies(
    any_store: agentrt.Store, database: str
) -> None:
    """Two real processes: while the child holds its allowed attach, the parent's attach
    is refused and changes nothing; once the child is SIGKILLed (its hold provably
    dead), the parent attaches, and the call runs once, in the parent."""
    store = any_store
    push = push_tool()
    clock = FakeClock()
    run_id = approved_waiting_run(store, push, clock)
    child_proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDING_CHILD, str(database), run_id],
        cwd=Path(__file__).resolve().parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child_proc.stdout is not None
        assert child_proc.stdout.readline().strip() == "allowed"
        before = snapshot(database)
        with pytest.raises(agentrt.RunLeasedError):
            make_gate(store, push, clock=clock, ids=Ids("c")).attach_sync(run_id)
        assert snapshot(database) == before
    finally:
        with child_proc:  # its pipes, closed as it is waited for
            child_proc.kill()
            child_proc.wait(timeout=30)
    assert child_proc.returncode == -9
    session, verdict = make_gate(store, push, clock=clock, ids=Ids("d")).attach_sync(run_id)
    assert verdict is not None and verdict.outcome == VerdictOutcome.ALLOWED
    step = session.current()
    assert step is not None
    assert step.execute_sync().kind == "tool_result"
    assert len(push.calls) == 1
    assert session.run.status == "RUNNING"
    assert [e.type for e in store.list_events(run_id=run_id)][-4:] == [
        "run.resumed",
        "step.policy",
        "step.tool_started",
        "step.tool_finished",
    ]
    session.close_sync()


def test_the_lease_taken_as_an_attached_call_starts_is_renewed_while_its_tool_runs(
    any_store: agentrt.Store,
) -> None:
    clock = FakeClock()
    renewals: list[int] = []
    holder: list[agentrt.GateSession] = []

    def slow(call: agentrt.ToolCall) -> agentrt.ToolResult:
        # The tool runs until the heartbeat has renewed the lease taken at the start
        # (waiting on the renewal, not on how long one usually takes).
        heartbeat = holder[0]._rs.heartbeat
        deadline = time.monotonic() + 60
        while heartbeat is not None and heartbeat.renewals < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        renewals.append(0 if heartbeat is None else heartbeat.renewals)
        return agentrt.ToolResult({"pushed": True}, "pushed")

    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, result=slow)
    run_id = approved_waiting_run(any_store, push, clock)
    attaching = agentrt.Gate(
        store=any_store,
        policy=agentrt.default_policy(),
        tools=[push],
        now=clock,
        new_id=Ids("e"),
        lease_ttl=timedelta(milliseconds=300),
    )
    session, verdict = attaching.attach_sync(run_id)
    holder.append(session)
    assert verdict is not None and verdict.outcome == "allowed"
    step = session.current()
    assert step is not None
    assert step.execute_sync().kind == "tool_result"
    assert renewals and renewals[0] >= 1
    session.close_sync()


@pytest.mark.parametrize(
    ("answer", "outcome", "status"),
    [
        (agentrt.Reconciliation.completed({"done": True}), "ended", "COMPLETED"),
        (agentrt.Reconciliation.conflict("the ledger disagrees"), "ended", "FAILED"),
        (agentrt.Reconciliation.continue_run("checked"), None, "RUNNING"),
    ],
)
def test_attach_to_an_orphaned_run_applies_the_gates_reconcile_as_driver_resume_does(
    any_store: agentrt.Store,
    database: str,
    answer: agentrt.Reconciliation,
    outcome: str | None,
    status: str,
) -> None:
    store = any_store
    read = read_tool()
    clock = FakeClock()
    # An owner whose lease ran out an hour ago, mid-step (by its stored expiry: the clock
    # that judges it is the server's on PostgreSQL). Its lease is an hour long, so its
    # heartbeat renews nothing meanwhile.
    dead = agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[read],
        now=clock,
        new_id=Ids(),
        lease_ttl=timedelta(hours=1),
    )
    orphan = dead.begin_sync("read it")
    assert orphan.step_sync() is not None
    expire_lease(database, orphan.run.id)
    seen: list[agentrt.RunView] = []

    def reconcile(view: agentrt.RunView) -> agentrt.Reconciliation:
        seen.append(view)
        return answer

    rescuer = agentrt.Gate(
        store=store,
        policy=agentrt.default_policy(),
        tools=[read],
        now=clock,
        new_id=Ids("f"),
        reconcile=reconcile,
    )
    session, verdict = rescuer.attach_sync(orphan.run.id)
    assert len(seen) == 1
    if outcome is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.outcome == outcome
    assert session.run.status == status == store.get_run(orphan.run.id).status
    assert read.calls == []
    session.close_sync()


def test_a_cancelled_execute_keeps_the_lease_while_its_tool_thread_runs_then_gives_it_back(
    db_path: Path,
) -> None:
    """On SQLite only: the lease is judged on the test's wall clock, which PostgreSQL's
    server clock ignores (decision 0107)."""
    store = agentrt.open_store(db_path)
    started, release = threading.Event(), threading.Event()

    def charge(call: agentrt.ToolCall) -> agentrt.ToolResult:
        started.set()
        assert release.wait(20)
        return agentrt.ToolResult({"charged": True})

    tool = RecordingTool("charge", SideEffect.REMOTE_MUTATION, result=charge)
    wall = MovableWall()  # leases judged on the test's clock: no load lapses one
    the_gate = agentrt.Gate(
        store=store,
        policy=child.policy(),
        tools=[tool],
        lease_ttl=timedelta(milliseconds=300),
        wall=wall,
    )

    async def cancel_mid_call() -> str:
        session = await the_gate.begin("charge")
        step = await session.step()
        assert step is not None
        assert (await step.propose(Decision.tool_call("charge", {}))).outcome == "allowed"
        task = asyncio.create_task(step.execute())
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await session.close()
        return session.run.id

    run_id = asyncio.run(cancel_mid_call())
    wall.advance(timedelta(seconds=1))  # more than three lease lengths: still renewed
    wait_for_renewal(lambda: stored_expiry(db_path, run_id), format_time(wall()))
    other = agentrt.Gate(store=store, policy=child.policy(), tools=[tool], wall=wall)
    with pytest.raises(agentrt.RunLeasedError):
        other.attach_sync(run_id)
    release.set()
    deadline = time.monotonic() + 10
    while store.lease(run_id).owner and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.lease(run_id).owner == ""
    assert len(tool.calls) == 1
    store.close()
