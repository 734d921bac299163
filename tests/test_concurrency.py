"""Concurrency: racing resumes, cancels during a step, lost and lapsed leases, the event loop.

Every test but the four racers on copies of one file takes `database` (or `any_store`)
and runs on SQLite and on PostgreSQL (issue 21 item 5); a lapsed lease is made so by its
stored expiry (`expire_lease`), which PostgreSQL's server clock judges.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import (
    Decision,
    LeaseLostError,
    RunLeasedError,
    RunStateError,
    SideEffect,
    ToolCall,
    ToolResult,
)
from agentrt.scripted import ScriptedAgent
from conftest import Ids, RecordingTool, event_types
from support import forkserver
from support.leases import expire_lease
from support.rows import execute

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import agentrt
    from agentrt import Decision, SideEffect, ToolResult, ToolSpec
    from agentrt.scripted import ScriptedAgent

    db, journal, start_at, run_id = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

    class Push:
        spec = ToolSpec("push", "the push tool", {"type": "object"}, SideEffect.REMOTE_MUTATION,
                        timedelta(seconds=5))
        def call(self, call):
            with open(journal, "a") as f:
                f.write(f"{os.getpid()} {call.step_id}\\n")
            return ToolResult({"pushed": True})

    store = agentrt.open_store(db)
    agent = ScriptedAgent([Decision.tool_call("push", {}), Decision.complete("done")])
    driver = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(),
                            tools=[Push()], lease_owner=f"child-{os.getpid()}")
    while time.time() < start_at:
        time.sleep(0.0005)
    try:
        run = driver.resume_sync(run_id)
    except agentrt.RunStateError as exc:
        print("refused", type(exc).__name__, exc)
        sys.exit(3)
    print("resumed", run.status)
    """
)


def test_two_concurrent_resumes_from_two_processes_exactly_one_executes(
    any_store: agentrt.Store, database: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.txt"
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION, schema={"type": "object"})
    agent = ScriptedAgent([Decision.tool_call("push", {}), Decision.complete("done")])
    driver = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(), tools=[push])
    run = driver.start_sync("race")
    (approval,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, approval.id, by="alice")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    start_at = time.time() + 1.0
    # Real processes forked from one that has imported the runtime and the stores
    # (tests/support/forkserver.py): they race from `start_at`, not from their start.
    children = [
        forkserver.server(*forkserver.CLI).spawn(
            [sys.executable, str(script), database, str(journal), str(start_at), run.id],
            capture=True,
        )
        for _ in range(2)
    ]
    results = [c.communicate(timeout=60) for c in children]
    codes = sorted(c.returncode for c in children)
    assert codes == [0, 3], results
    assert sorted(out.split()[0] for out, _ in results) == ["refused", "resumed"]
    assert any(out.strip() == "resumed COMPLETED" for out, _ in results)
    lines = journal.read_text().splitlines()
    assert len(lines) == 1  # exactly one process executed the approved call
    final = store.get_run(run.id)
    assert final.status == "COMPLETED"
    tool_starts = [e for e in store.list_events(run_id=run.id) if e.type == "step.tool_started"]
    assert len(tool_starts) == 1 and tool_starts[0].payload["approval_id"] == approval.id
    assert store.verify_events().intact


RACER = textwrap.dedent(
    """
    import os, sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import agentrt
    import crashing_child as child
    from agentrt.scripted import ScriptedAgent

    go = int(sys.argv[1])
    for line in sys.stdin:
        db, run_id, hold = line.split()
        pause = {"for": 0.0}

        def clock():
            # A takeover reads the clock once, between its check of the lease and its
            # transaction: sleeping there is a process descheduled at the worst moment.
            if pause["for"]:
                time.sleep(pause["for"])
                pause["for"] = 0.0
            return datetime.now(UTC)

        store = agentrt.open_store(db)
        driver = agentrt.Driver(store=store, agent=ScriptedAgent(child.script("charge")),
                                policy=child.policy(), tools=child.tools(Path(db)),
                                lease_owner=f"racer-{os.getpid()}", now=clock)
        print("ready", flush=True)
        os.read(go, 1)  # the barrier: every racer has its store open and waits here
        pause["for"] = float(hold)
        try:
            out = f"resumed {driver.resume_sync(run_id).status}"
        except (agentrt.RunStateError, agentrt.LeaseLostError) as exc:
            out = f"refused {type(exc).__name__}"
        store.close()
        print(out, flush=True)
    """
)

RACERS = 4
TRIALS = 40
# How long each racer is held between its check of the lease and its transaction, by
# trial: not at all (a bare race) and long enough for every racer to have checked.
HOLDS = (0.0, 0.05)


# SQLite only: its 40 trials are copies of one crashed file; on PostgreSQL,
# test_postgres_race.py races processes on one schema.
@pytest.mark.slow
def test_processes_released_together_to_take_over_one_crashed_run_exactly_one_takes_it_over(
    tmp_path: Path,
) -> None:
    """Racers that have opened the store wait on one pipe; one write releases them all.

    Each trial is a copy of one crashed run (its owner SIGKILLed while deciding, so
    provably dead: a takeover needs no wait). A takeover that did not re-check the
    lease inside its transaction, or took it without compare-and-set, lets a second
    racer take the run from the first while it carries on: two takeovers. Every
    other trial holds each racer for a moment between its check of the lease and its
    transaction (its clock, read once there, sleeps), as a descheduled process would
    be: a bare race rarely puts a check before another racer's commit on two cores.
    Breaking the takeover that way fails 17 to 20 of the 40 trials.
    """
    here = Path(__file__).resolve().parent
    template = tmp_path / "crashed.db"
    child = subprocess.run(
        [sys.executable, str(here / "crashing_child.py"), str(template), "deciding"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    with contextlib.closing(sqlite3.connect(template)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (run_id,) = conn.execute("SELECT id FROM runs").fetchone()
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    go_read, go_write = os.pipe()
    racers = [
        subprocess.Popen(
            [sys.executable, str(script), str(go_read), str(here)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(go_read,),
        )
        for _ in range(RACERS)
    ]
    os.close(go_read)
    # A racer that hangs must not hang the suite: kill them all after two minutes.
    watchdog = threading.Timer(120, lambda: [r.kill() for r in racers])
    watchdog.start()
    failures: list[str] = []
    try:
        for trial in range(TRIALS):
            db = tmp_path / f"trial-{trial}.db"
            shutil.copy(template, db)
            for racer in racers:
                assert racer.stdin is not None
                racer.stdin.write(f"{db} {run_id} {HOLDS[trial % len(HOLDS)]}\n")
                racer.stdin.flush()
            for racer in racers:
                assert racer.stdout is not None
                assert racer.stdout.readline() == "ready\n", racer.stderr and racer.stderr.read()
            os.write(go_write, b"x" * RACERS)
            outcomes = sorted(r.stdout.readline().strip() for r in racers if r.stdout)
            with contextlib.closing(agentrt.open_existing(db, read_only=True)) as store:
                types = event_types(store, run_id)
                run = store.get_run(run_id)
                intact = store.verify_events().intact
            journal = Path(f"{db}.journal")
            charges = journal.read_text().splitlines() if journal.exists() else []
            seen = (
                outcomes[-1],
                sum(o.startswith("refused") for o in outcomes),
                types.count("lease.taken_over"),
                len(charges),
                run.status,
                intact,
            )
            if seen != ("resumed COMPLETED", RACERS - 1, 1, 1, "COMPLETED", True):
                hold = HOLDS[trial % len(HOLDS)]
                failures.append(f"trial {trial} (held {hold} s): {outcomes}, {seen}")
    finally:
        os.close(go_write)
        for racer in racers:
            if racer.stdin is not None:
                racer.stdin.close()
        for racer in racers:
            racer.wait(30)
        watchdog.cancel()
    try:
        assert failures == [], f"{len(failures)} of {TRIALS} trials broke:\n" + "\n".join(failures)
        assert all(r.returncode == 0 for r in racers), [r.stderr.read() for r in racers if r.stderr]
    finally:
        for racer in racers:
            with racer:  # its pipes, closed (it has ended)
                pass


class Gate:
    """A tool that blocks until released, telling the test when it has started."""

    def __init__(self, side_effect: SideEffect = SideEffect.LOCAL_MUTATION) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.spec = RecordingTool("slow", side_effect).spec
        self.calls: list[ToolCall] = []

    def call(self, call: ToolCall) -> ToolResult:
        self.calls.append(call)
        self.started.set()
        assert self.release.wait(30)
        return ToolResult({"done": True}, "finished late")


@contextlib.contextmanager
def driving(driver: agentrt.Driver, goal: str = "g") -> Iterator[dict[str, Any]]:
    """Run `driver.start_sync` on a thread; the dict receives its run or its error."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["run"] = driver.start_sync(goal)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield box
    finally:
        thread.join(30)


def test_cancel_during_a_tool_call_records_the_late_result_after_run_finished(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    slow = Gate()
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("slow", {})]),
        policy=agentrt.default_policy(),
        tools=[slow],
        new_id=Ids(),
    )
    with driving(driver) as box:
        assert slow.started.wait(10)
        run_id = store.list_runs()[0].id
        cancelled = agentrt.cancel(store, run_id, by="ops", note="stop it")
        assert (cancelled.status, cancelled.reason) == ("CANCELLED", "operator_cancelled")
        slow.release.set()
    assert "error" not in box
    assert box["run"].status == "CANCELLED"  # the loop returns the cancelled run, no error
    types = event_types(store, run_id)
    assert types[-4:] == ["step.tool_started", "step.failed", "run.finished", "step.tool_finished"]
    late = store.list_events(run_id=run_id)[-1]
    assert late.payload["late"] is True and late.payload["summary"] == "finished late"
    step = store.list_steps(run_id)[0]
    assert step.status == "failed"  # the step keeps what the cancel wrote
    assert step.observation is not None
    assert step.observation.content == {"by": "ops", "note": "stop it"}
    assert store.lease(run_id).owner == ""


def test_cancel_while_deciding_is_found_at_the_next_write(any_store: agentrt.Store) -> None:
    store = any_store

    def decide_and_get_cancelled(input: agentrt.StepInput) -> Decision:
        agentrt.cancel(store, input.run.id, by="ops")
        return Decision.complete("too late")

    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([decide_and_get_cancelled]),
        policy=agentrt.default_policy(),
    )
    run = driver.start_sync("g")
    assert (run.status, run.reason, run.result) == ("CANCELLED", "operator_cancelled", None)
    # The step being decided was kept in memory (decision 0088): the cancel found no
    # open step, and the step's commit, refused, wrote nothing of it.
    assert event_types(store, run.id) == ["run.created", "run.started", "run.finished"]
    assert store.list_steps(run.id) == []
    assert store.get_run(run.id).step_count == 0


def test_a_cancel_just_after_a_tool_finished_is_found_by_the_next_steps_first_commit(
    any_store: agentrt.Store,
) -> None:
    store = any_store
    """The Driver claims its next step without reading the run (decision 0101): a cancel
    made between a step's outcome commit and the next claim is found by that step's first
    commit. The agent is asked once more; nothing of that step is written, its tool never
    runs. (`GateSession.step` reads first and returns None instead: test_gate.py.)"""
    read = RecordingTool("read", SideEffect.READ_ONLY)
    asked: list[int] = []

    def cancel_after_the_first_outcome(event: agentrt.Event) -> None:
        if event.type == "step.tool_finished" and not asked[1:]:
            agentrt.cancel(store, event.run_id, by="ops")

    def decide(input: agentrt.StepInput) -> Decision:
        asked.append(len(input.steps))
        return Decision.tool_call("read", {"x": len(input.steps)})

    driver = agentrt.Driver(
        store=store,
        agent=decide,
        policy=agentrt.default_policy(),
        tools=[read],
        observer=cancel_after_the_first_outcome,
    )
    run = driver.start_sync("g")
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")
    assert asked == [1, 2]  # the step being decided is in its input
    assert [call.args for call in read.calls] == [{"x": 1}]
    assert [s.status for s in store.list_steps(run.id)] == ["done"]
    assert store.get_run(run.id).step_count == 1
    assert event_types(store, run.id)[-1] == "run.finished"


def test_cancel_a_waiting_run_and_a_terminal_run_is_refused(any_store: agentrt.Store) -> None:
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {})]),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("g")
    run = agentrt.cancel(store, run.id, by="ops")
    assert run.status == "CANCELLED"
    assert store.list_steps(run.id)[0].status == "failed"
    with pytest.raises(RunStateError, match="only a live run is cancelled"):
        agentrt.cancel(store, run.id, by="ops")


def test_loop_that_loses_its_lease_stops_before_the_next_tool_call(
    any_store: agentrt.Store, database: str
) -> None:
    """Another owner takes the run while a tool runs: its result is not recorded, and the
    loop raises LeaseLostError instead of starting anything else."""
    store = any_store

    def steal(call: ToolCall) -> ToolResult:
        execute(database, "UPDATE runs SET lease_owner = 'thief', lease_epoch = lease_epoch + 1")
        return ToolResult({"stolen": True})

    first = RecordingTool("first", SideEffect.LOCAL_MUTATION, result=steal)
    second = RecordingTool("second", SideEffect.LOCAL_MUTATION)
    agent = ScriptedAgent([Decision.tool_call("first", {}), Decision.tool_call("second", {})])
    driver = agentrt.Driver(
        store=store, agent=agent, policy=agentrt.default_policy(), tools=[first, second]
    )
    with pytest.raises(LeaseLostError):
        driver.start_sync("g")
    assert second.calls == []
    run = store.list_runs()[0]
    assert [s.status for s in store.list_steps(run.id)] == ["executing"]
    assert "step.tool_finished" not in event_types(store, run.id)


def test_lapsed_lease_starts_no_side_effect(any_store: agentrt.Store, database: str) -> None:
    store = any_store

    def stall(input: agentrt.StepInput) -> Decision:
        # The loop stalled past its lease (an hour long: no heartbeat renews it meanwhile),
        # and nobody took it.
        expire_lease(database, input.run.id, holder_elsewhere=False)
        return Decision.tool_call("push", {})

    push = RecordingTool("push", SideEffect.LOCAL_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([stall]),
        policy=agentrt.default_policy(),
        tools=[push],
        lease_ttl=timedelta(hours=1),
    )
    with pytest.raises(LeaseLostError, match="lapsed"):
        driver.start_sync("g")
    assert push.calls == []
    run = store.list_runs()[0]
    assert run.status == "RUNNING"
    assert "step.tool_started" not in event_types(store, run.id)


def test_resume_of_a_live_run_is_refused_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    slow = Gate()
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("slow", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[slow],
        lease_owner="worker",
    )
    other = agentrt.Driver(
        store=agentrt.open_store(database),
        agent=driver.agent,
        policy=agentrt.default_policy(),
        tools=[slow],
        lease_owner="worker",
    )
    with driving(driver) as box:
        assert slow.started.wait(10)
        run_id = store.list_runs()[0].id
        before = [(e.seq, e.hash) for e in store.list_events()]
        with pytest.raises(RunLeasedError) as refused:
            other.resume_sync(run_id)
        assert refused.value.owner == driver.lease_owner
        assert refused.value.owner.startswith("worker/")
        assert other.lease_owner != driver.lease_owner  # same name, two owners
        with pytest.raises(RunStateError, match="already executing"):
            driver.resume_sync(run_id)
        assert [(e.seq, e.hash) for e in store.list_events()] == before
        slow.release.set()
    assert box["run"].status == "COMPLETED"


def test_async_driver_does_not_starve_other_tasks_while_steps_commit(
    any_store: agentrt.Store,
) -> None:
    """Each commit is made slow (a stand-in for a slow fsync); a ticker on the same event
    loop must keep running during every one of them."""
    store = any_store
    ticks = [0]
    during: list[int] = []
    original = store.transactions

    def slow_transactions(works: Any) -> Any:
        # The async Driver's commits go through the group committer (one group here).
        def slow(work: Any) -> Any:
            def inside(tx: Any) -> Any:
                out = work(tx)
                time.sleep(0.03)
                return out

            return inside

        before = ticks[0]
        try:
            return original([slow(w) for w in works])
        finally:
            during.append(ticks[0] - before)

    store.transactions = slow_transactions  # type: ignore[method-assign]
    tool = RecordingTool("t", SideEffect.READ_ONLY, result=lambda c: ToolResult(c.step_id))
    agent = ScriptedAgent(
        [Decision.tool_call("t", {"x": i}) for i in range(5)] + [Decision.complete()]
    )
    driver = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(), tools=[tool])
    worst = [0.0]

    async def ticker(stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            expected = loop.time() + 0.001
            await asyncio.sleep(0.001)
            worst[0] = max(worst[0], loop.time() - expected)
            ticks[0] += 1

    async def main() -> agentrt.Run:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        try:
            return await driver.start("g")
        finally:
            stop.set()
            await task

    run = asyncio.run(main())
    assert run.status == "COMPLETED"
    # The run's creation, two commits for each of the five allowed steps, the completion.
    assert len(during) >= 12
    assert all(n > 0 for n in during), during  # the ticker ran inside every commit
    print(f"worst event-loop lag while steps committed: {worst[0] * 1000:.1f} ms")


def test_cancel_while_the_agent_decides_returns_the_cancelled_run_even_if_the_agent_fails(
    any_store: agentrt.Store,
) -> None:
    store = any_store

    def cancel_then_raise(input: agentrt.StepInput) -> Decision:
        agentrt.cancel(store, input.run.id, by="ops")
        raise RuntimeError("the agent noticed nothing and broke")

    driver = agentrt.Driver(
        store=store, agent=ScriptedAgent([cancel_then_raise]), policy=agentrt.default_policy()
    )
    run = driver.start_sync("g")
    assert (run.status, run.reason) == ("CANCELLED", "operator_cancelled")


def test_cancelling_a_waiting_run_expires_its_pending_approval(any_store: agentrt.Store) -> None:
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {})]),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("g")
    agentrt.cancel(store, run.id, by="ops", note="not needed")
    assert store.pending_approvals(run.id) == []
    (approval,) = store.list_approvals(run.id)
    assert (approval.status, approval.decided_by) == ("expired", "ops")
