"""Recovery at start-up: `Driver.recover()` resumes every run this program can resume.

Real stores, and a real child process killed by SIGKILL while it held a lease
(`crashing_child.py`), as a restarted program finds it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import (
    ApprovalHashError,
    ConfigError,
    Decision,
    RecoverAction,
    Recovered,
    SideEffect,
    ToolCall,
    ToolResult,
)
from agentrt import recover as recover_mod
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool, event_types
from support.rows import execute

HERE = Path(__file__).resolve().parent

CRASHED = "c" * 32


def crash_child(db: Path | str, run_id: str = CRASHED, mode: str = "charge") -> None:
    """A real process starts a run on `db` and SIGKILLs itself inside the `charge` tool."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "crashing_child.py"), str(db), mode],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RUN_ID": run_id},
    )
    assert proc.returncode == -9, proc.stderr  # killed by SIGKILL, nothing else


def restarted(
    store: agentrt.Store, db: Path | str, decisions: list[Any] | None = None
) -> agentrt.Driver:
    """The program as it starts again: the child's tools and policy, a new lease owner."""
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent(decisions if decisions is not None else child.script("charge")),
        policy=child.policy(),
        tools=child.tools(db),
        lease_owner="restarted",
    )


def push_tool() -> RecordingTool:
    return RecordingTool("push", SideEffect.REMOTE_MUTATION)


def pusher(store: agentrt.Store, tools: list[Any] | None = None) -> agentrt.Driver:
    """A driver whose runs pause on an approval (default policy: remote changes need a person)."""
    return agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete({"ok": 1})]),
        policy=agentrt.default_policy(),
        tools=tools or [push_tool()],
    )


def waiting_run(store: agentrt.Store, run_id: str, tool: RecordingTool | None = None) -> str:
    run = pusher(store, [tool or push_tool()]).start_sync("push it", run_id=run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    return run.id


def waiting_charge(store: agentrt.Store, db: Path | str, run_id: str) -> str:
    """A run of the crashing child's program that paused for a person before its charge."""
    run = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(child.script("charge")),
        policy=agentrt.default_policy(),
        tools=child.tools(db),
    ).start_sync("charge the card", run_id=run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    return run.id


def by_id(results: list[Recovered]) -> dict[str, Recovered]:
    return {r.run_id: r for r in results}


class LiveRun:
    """A run executing in this process (a live owner) under another driver, blocked in a tool."""

    def __init__(self, db: Path | str, run_id: str) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

        def block(call: ToolCall) -> ToolResult:
            self.started.set()
            assert self.release.wait(30)
            return ToolResult({"done": True})

        tool = RecordingTool("block", SideEffect.LOCAL_MUTATION, result=block)
        self.store = agentrt.open_store(db)
        driver = agentrt.Driver(
            store=self.store,
            agent=ScriptedAgent([Decision.tool_call("block", {}), Decision.complete()]),
            policy=agentrt.default_policy(),
            tools=[tool],
            lease_owner="live-owner",
        )
        self.box: dict[str, Any] = {}
        self.thread = threading.Thread(
            target=lambda: self.box.setdefault("run", driver.start_sync("busy", run_id=run_id))
        )

    def __enter__(self) -> LiveRun:
        self.thread.start()
        assert self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(30)
        self.store.close()


@pytest.mark.slow
def test_recover_resumes_what_it_can_and_skips_a_live_lease_and_an_undecided_approval(
    database: str, crash_journal: Path
) -> None:
    """One restart, four runs: a SIGKILLed owner's run is taken over, an approved run resumed,
    a live run and a run whose approval is still pending are left exactly as they were."""
    crash_child(database, CRASHED)  # oldest: RUNNING under the dead child's 30 s lease
    store = agentrt.open_store(database)
    approved = waiting_charge(store, database, "a" * 32)
    pending = waiting_charge(store, database, "b" * 32)
    (grant,) = store.pending_approvals(approved)
    agentrt.approve(store, approved, grant.id, by="ops", shown_hash=grant.hash)
    live = "d" * 32
    with LiveRun(database, live):
        before = {run_id: event_types(store, run_id) for run_id in (live, pending)}
        lease_before = store.lease(live)
        results = restarted(store, database).recover_sync()
        # Oldest first, one record per unfinished run.
        assert [(r.run_id, r.action) for r in results] == [
            (CRASHED, RecoverAction.RESUMED),
            (approved, RecoverAction.RESUMED),
            (pending, RecoverAction.SKIPPED),
            (live, RecoverAction.SKIPPED),
        ]
        found = by_id(results)
        # The dead child's lease was live by the clock; its death is proved, not waited out.
        crashed = found[CRASHED]
        assert crashed.why.startswith("RUNNING and its owner's process is gone (pid ")
        assert crashed.why.endswith(": no such process)")
        assert crashed.run is not None and crashed.run.status == "WAITING_FOR_APPROVAL"
        (interrupted,) = store.pending_approvals(CRASHED)
        assert interrupted.kind == "interrupted_side_effect"
        assert event_types(store, CRASHED).count("step.tool_started") == 1  # not charged again
        # The approved run executed its approved call once and completed.
        assert found[approved].why == f"WAITING and its approval {grant.id} was approved"
        assert found[approved].run is not None
        assert (found[approved].run.status, found[approved].run.result) == (
            "COMPLETED",
            {"done": True},
        )
        assert event_types(store, approved).count("step.tool_started") == 1
        # The journal: the crashed charge, then the approved one; nothing else ran.
        charged = [line.split()[2] for line in child.journal_lines(database)]
        assert charged == [store.list_steps(CRASHED)[0].id, store.list_steps(approved)[0].id]
        # Skipped: nothing written, the live lease untouched.
        (still,) = store.pending_approvals(pending)
        assert found[pending] == Recovered(
            pending,
            RecoverAction.SKIPPED,
            f"WAITING for approval {still.id}, which is still pending",
        )
        assert found[live].why.startswith("RUNNING under a live lease held by live-owner/")
        assert found[live].run is None and found[live].error is None
        assert {run_id: event_types(store, run_id) for run_id in (live, pending)} == before
        assert store.lease(live) == lease_before
    store.close()


@pytest.mark.slow
def test_recover_takes_over_a_run_whose_sigkilled_owner_held_the_lease(
    database: str, crash_journal: Path
) -> None:
    crash_child(database, CRASHED)
    store = agentrt.open_store(database)
    assert store.lease(CRASHED).owner.startswith("crashing-child/")
    (result,) = restarted(store, database).recover_sync()
    assert (result.run_id, result.action, result.error) == (
        CRASHED,
        RecoverAction.RESUMED,
        None,
    )
    assert result.run == store.get_run(CRASHED)
    taken = next(e for e in store.list_events(run_id=CRASHED) if e.type == "lease.taken_over")
    assert taken.payload["proof"]["by"] == "owner process gone"
    assert taken.payload["owner"].startswith("restarted/")
    # Nothing is left for a second recovery to do but wait for the operator.
    (again,) = restarted(store, database).recover_sync()
    assert again.action == RecoverAction.SKIPPED
    assert again.why.startswith("WAITING for approval ")
    store.close()


def test_recover_skips_a_run_under_a_live_lease_and_writes_nothing(database: str) -> None:
    store = agentrt.open_store(database)
    with LiveRun(database, "d" * 32):
        events = store.list_events(limit=10_000)
        (result,) = pusher(store).recover_sync()
        assert result.action == RecoverAction.SKIPPED
        assert result.why.startswith("RUNNING under a live lease held by live-owner/")
        assert store.list_events(limit=10_000) == events
    store.close()


def test_recover_resumes_a_waiting_run_whose_approval_was_decided(any_store: agentrt.Store) -> None:
    tool = push_tool()
    run_id = waiting_run(any_store, "a" * 32, tool)
    (approval,) = any_store.pending_approvals(run_id)
    agentrt.approve(any_store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    (result,) = pusher(any_store, [tool]).recover_sync()
    assert (result.action, result.why) == (
        RecoverAction.RESUMED,
        f"WAITING and its approval {approval.id} was approved",
    )
    assert result.run is not None and result.run.status == "COMPLETED"
    assert [c.args for c in tool.calls] == [{"x": 1}]


def test_recover_skips_a_waiting_run_whose_approval_is_undecided(any_store: agentrt.Store) -> None:
    tool = push_tool()
    run_id = waiting_run(any_store, "a" * 32, tool)
    events = any_store.list_events(limit=10_000)
    (result,) = pusher(any_store, [tool]).recover_sync()
    assert result.action == RecoverAction.SKIPPED
    assert result.run is None and tool.calls == []
    assert any_store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    assert any_store.list_events(limit=10_000) == events


def test_recover_settles_a_pending_approval_past_its_expiry_as_resume_would(
    any_store: agentrt.Store,
) -> None:
    tool = push_tool()
    run = pusher(any_store, [tool]).start_sync(
        "push it", limits=agentrt.Limits(approval_ttl=timedelta(seconds=1)), run_id="a" * 32
    )
    (approval,) = any_store.pending_approvals(run.id)
    assert approval.expires_at is not None
    later = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=lambda: approval.expires_at + timedelta(seconds=1),  # type: ignore[operator]
    )
    (result,) = later.recover_sync()
    assert result.action == RecoverAction.RESUMED
    assert result.why.startswith(f"WAITING and its approval {approval.id} expired undecided at ")
    assert result.run is not None
    assert (result.run.status, result.run.reason) == ("CANCELLED", "approval_expired")
    assert tool.calls == []


def test_recover_records_one_runs_failure_and_goes_on_to_the_others(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    tool = push_tool()
    tampered = waiting_run(store, "a" * 32, tool)
    fine = waiting_run(store, "b" * 32, tool)
    for run_id in (tampered, fine):
        (approval,) = store.pending_approvals(run_id)
        agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    # After the approval, someone edits the approved request in the file.
    execute(
        database,
        "UPDATE approvals SET request_json = replace(request_json, '\"x\":1', '\"x\":2') "
        "WHERE run_id = ?",
        (tampered,),
    )
    first, second = pusher(store, [tool]).recover_sync()
    assert (first.run_id, first.action, first.run) == (tampered, RecoverAction.FAILED, None)
    assert isinstance(first.error, ApprovalHashError)
    assert first.why == f"resume failed: ApprovalHashError: {first.error}"
    assert (second.run_id, second.action) == (fine, RecoverAction.RESUMED)
    assert second.run is not None and second.run.status == "COMPLETED"
    assert [c.run_id for c in tool.calls] == [fine]  # the tampered request never ran


def test_recover_pages_through_runs_oldest_first_within_its_limit(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recover_mod, "PAGE", 2)
    ids = [f"{i:x}" * 32 for i in range(1, 6)]
    for run_id in ids:
        waiting_run(any_store, run_id)
    finished = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.complete()]),
        policy=agentrt.default_policy(),
    ).start_sync("finished", run_id="f" * 32)
    assert finished.status == "COMPLETED"  # a finished run is never examined
    driver = pusher(any_store)
    assert [r.run_id for r in driver.recover_sync()] == ids
    first = driver.recover_sync(limit=3)
    assert [r.run_id for r in first] == ids[:3]
    rest = driver.recover_sync(after=first[-1].run_id)
    assert [r.run_id for r in rest] == ids[3:]
    assert all(r.action == RecoverAction.SKIPPED for r in first + rest)


@pytest.mark.parametrize("limit", [0, -1, recover_mod.MAX_LIMIT + 1, True])
def test_recover_refuses_a_limit_out_of_bounds(any_store: agentrt.Store, limit: Any) -> None:
    with pytest.raises(ConfigError, match="recover limit"):
        pusher(any_store).recover_sync(limit=limit)


def test_recover_refuses_an_after_that_names_no_run(any_store: agentrt.Store) -> None:
    with pytest.raises(ConfigError, match="names no run"):
        pusher(any_store).recover_sync(after="0" * 32)


def test_recover_is_awaitable_and_resumes_runs_concurrently_when_allowed(
    any_store: agentrt.Store,
) -> None:
    tool = push_tool()
    run_ids = [waiting_run(any_store, c * 32, tool) for c in "abc"]
    for run_id in run_ids:
        (approval,) = any_store.pending_approvals(run_id)
        agentrt.approve(any_store, run_id, approval.id, by="ops", shown_hash=approval.hash)

    async def main() -> list[Recovered]:
        return await pusher(any_store, [tool]).recover(concurrency=3)

    results = asyncio.run(main())
    assert [(r.run_id, r.action) for r in results] == [
        (run_id, RecoverAction.RESUMED) for run_id in run_ids
    ]
    assert sorted(c.run_id for c in tool.calls) == run_ids


def test_recover_leaves_a_run_started_with_tools_this_driver_does_not_register(
    any_store: agentrt.Store,
) -> None:
    """A file shared by two programs: each recovers only runs it has the tools for."""
    run_id = waiting_run(any_store, "a" * 32)
    (approval,) = any_store.pending_approvals(run_id)
    agentrt.approve(any_store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    other = RecordingTool("mail", SideEffect.REMOTE_MUTATION)
    (result,) = pusher(any_store, [other]).recover_sync()
    assert result == Recovered(
        run_id,
        RecoverAction.SKIPPED,
        "it was started with tools this driver does not register (push); "
        "it belongs to another program",
    )
    assert any_store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    (mine,) = pusher(any_store).recover_sync()
    assert mine.action == RecoverAction.RESUMED


def test_recover_reports_a_run_whose_row_holds_bytes_that_are_not_text_and_goes_on(
    store: agentrt.Store, db_path: Path
) -> None:
    """On SQLite only: PostgreSQL's text cannot hold bytes that are not UTF-8."""
    tool = push_tool()
    broken = waiting_run(store, "a" * 32, tool)
    fine = waiting_run(store, "b" * 32, tool)
    for run_id in (broken, fine):
        (approval,) = store.pending_approvals(run_id)
        agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE runs SET lease_owner = CAST(X'FF' AS TEXT) WHERE id = ?", (broken,))
    conn.commit()
    conn.close()
    first, second = pusher(store, [tool]).recover_sync()
    assert first == Recovered(
        broken,
        RecoverAction.FAILED,
        "its row holds bytes that are not UTF-8 text (lease_owner); "
        "it cannot be judged and is not resumed",
    )
    assert (second.run_id, second.action) == (fine, RecoverAction.RESUMED)
    assert [c.run_id for c in tool.calls] == [fine]


def test_recover_skips_a_run_this_very_driver_is_executing(any_store: agentrt.Store) -> None:
    started = threading.Event()
    release = threading.Event()

    def block(call: ToolCall) -> ToolResult:
        started.set()
        assert release.wait(30)
        return ToolResult({"done": True})

    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.tool_call("block", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("block", SideEffect.LOCAL_MUTATION, result=block)],
    )
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("run", driver.start_sync("busy", run_id="d" * 32))
    )
    thread.start()
    try:
        assert started.wait(10)
        (result,) = driver.recover_sync()
        assert (result.run_id, result.action, result.why) == (
            "d" * 32,
            RecoverAction.SKIPPED,
            "this driver is executing it now",
        )
    finally:
        release.set()
        thread.join(30)
    assert box["run"].status == "COMPLETED"


def test_recover_skips_a_run_whose_cancelled_loop_still_has_its_tool_thread_running(
    any_store: agentrt.Store,
) -> None:
    started = threading.Event()
    release = threading.Event()
    inside = 0
    most = 0
    count = threading.Lock()

    def block(call: ToolCall) -> ToolResult:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
            first = not started.is_set()
        started.set()
        if first:  # the call the loop is cancelled in: its thread outlives the loop
            release.wait(30)
        with count:
            inside -= 1
        return ToolResult({"done": True})

    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent(
            [Decision.tool_call("block", {}), Decision.tool_call("block", {}), Decision.complete()]
        ),
        policy=agentrt.default_policy(),
        tools=[RecordingTool("block", SideEffect.READ_ONLY, result=block)],
    )

    async def main() -> list[Recovered]:
        task = asyncio.create_task(driver.start("goal", run_id="e" * 32))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The cancelled loop's tool thread still runs; the driver keeps the lease for it.
        try:
            return await driver.recover()
        finally:
            release.set()

    (result,) = asyncio.run(main())
    assert most == 1  # the same call never ran beside the lingering one
    assert (result.run_id, result.action) == ("e" * 32, RecoverAction.SKIPPED)


def test_recover_skips_a_run_this_driver_began_executing_after_it_was_judged(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two recovers (or a recover and a resume) of one driver race: the later one
    # learns that the run was taken only when its own resume is refused.
    driver = agentrt.Driver(
        store=any_store,
        agent=ScriptedAgent([Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[],
    )
    rid = "f" * 32

    async def started_then_cancelled() -> None:
        # The loop is cancelled as the run is created: the run stays RUNNING, its loop gone.
        task = asyncio.create_task(driver.start("goal", run_id=rid))
        while not any_store.list_runs():
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(started_then_cancelled())
    assert any_store.get_run(rid).status == "RUNNING"
    taken = driver._exclusive(rid)
    resume = driver.resume

    async def judged_then_taken(run_id: str) -> agentrt.Run:
        taken.__enter__()  # the other call begins executing the run right here
        return await resume(run_id)

    monkeypatch.setattr(driver, "resume", judged_then_taken)
    try:
        (result,) = driver.recover_sync()
    finally:
        taken.__exit__(None, None, None)
    assert (result.run_id, result.action, result.why) == (
        rid,
        RecoverAction.SKIPPED,
        "this driver is executing it now",
    )
    assert result.error is None
