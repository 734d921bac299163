"""Races across processes: a person deciding, a cancel, a resume and `recover()` at once.

Each test runs on SQLite and on PostgreSQL (`database`). The other party is a real
process (`python -m agentrt approve|cancel`, or a small script), started at the one
moment that makes the interleaving under test happen: from inside the resumer's own
clock or its store's lease clock, which the code under test reads between its look
at the run and its write. No test sleeps for a race to happen; the barrier test
asserts what must hold for every interleaving.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import Decision, Limits, RecoverAction, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types
from support import forkserver
from support.policies import FixedPolicy

HERE = Path(__file__).resolve().parent


def another_process(*argv: str) -> forkserver.Done:
    """`python ARGV...` in a process of its own (the environment is this one's), forked
    from one that has imported the CLI and the stores (tests/support/forkserver.py): the
    race is judged here, not the interpreter's start."""
    return forkserver.run([sys.executable, *argv], preload=forkserver.CLI, timeout=60)


def agentrt_cli(*argv: str) -> forkserver.Done:
    """`python -m agentrt ARGV...` in a process of its own (see `another_process`)."""
    return another_process("-m", "agentrt", *argv)


def once(action: Callable[[], None], then: Callable[[], datetime]) -> Callable[[], datetime]:
    """A clock whose first reading first does `action` (another process acts right then)."""
    done: list[bool] = []

    def clock() -> datetime:
        if not done:
            done.append(True)
            action()
        return then()

    return clock


def two_pushes() -> list[Decision]:
    return [
        Decision.tool_call("push", {"x": 1}),
        Decision.tool_call("push", {"x": 2}),
        Decision.complete("ok"),
    ]


# ---------------------------------------------------------------------------------------------
# A person approves as a resume finds the approval expired


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_resume_that_finds_the_approval_expired_as_a_person_decides_it_goes_on_from_the_decision(
    any_store: agentrt.Store, database: str, verb: str
) -> None:
    """The resume reads the approval pending and, by its own clock, past its expiry; right
    then a person decides it from another process (`agentrt approve|reject`, on the wall
    clock, well before the expiry). The person's decision is on record first, and it
    stands: an approved call is resumed and runs once (the resume used to raise about an
    approval no longer pending, leaving the approved run to a later resume); a rejected
    run has nothing to resume, and the resume is refused, writing nothing."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    start = datetime.now(UTC)
    agent = ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete("ok")])
    driver = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[push],
        now=FakeClock(start),
        new_id=Ids(),
    )
    run = driver.start_sync("push it", limits=Limits(approval_ttl=timedelta(minutes=10)))
    (approval,) = store.pending_approvals(run.id)
    assert approval.expires_at is not None
    late = approval.expires_at + timedelta(seconds=1)
    said: list[forkserver.Done] = []

    def a_person_decides() -> None:
        said.append(
            agentrt_cli(
                verb, run.id, "--approval", approval.id, "--yes", "--by", "ann", "--db", database
            )
        )

    resumer = agentrt.Driver(
        store=store,
        agent=agent,
        policy=agentrt.default_policy(),
        tools=[push],
        now=once(a_person_decides, lambda: late),
        new_id=Ids("b"),
    )
    if verb == "approve":
        resumed = resumer.resume_sync(run.id)
    else:
        with pytest.raises(agentrt.RunStateError, match="another resume or decision moved"):
            resumer.resume_sync(run.id)
        resumed = store.get_run(run.id)
    assert said[0].returncode == 0, said[0].stderr
    (decided,) = store.list_approvals(run.id)
    events = store.list_events(run_id=run.id)
    started = [e for e in events if e.type == "step.tool_started"]
    if verb == "approve":
        assert (resumed.status, resumed.reason) == ("COMPLETED", "goal_completed")
        assert [c.args for c in push.calls] == [{"x": 1}]
        assert len(started) == 1 and started[0].payload["approval_id"] == approval.id
    else:  # the rejection ended the run: nothing to resume, and nothing written by it
        assert (resumed.status, resumed.reason) == ("CANCELLED", "approval_rejected")
        assert push.calls == [] and started == []
        assert [e.type for e in events][-3:] == ["approval.decided", "step.failed", "run.finished"]
    assert (decided.status, decided.decided_by) == (
        {"approve": "approved", "reject": "rejected"}[verb],
        "ann",
    )
    assert [e.payload["status"] for e in events if e.type == "approval.decided"] == [decided.status]
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


# ---------------------------------------------------------------------------------------------
# recover() finds a run another process resumed meanwhile


def test_recover_skips_a_waiting_run_another_process_resumed_meanwhile_and_writes_nothing(
    any_store: agentrt.Store, database: str, tmp_path: Path
) -> None:
    """`recover()` judges a waiting run whose approval was approved; before its resume
    reads the run, another process resumes it, runs the approved call and pauses on a
    second approval. The run changed meanwhile: it is skipped, saying so, as a run whose
    status moved is, not reported FAILED with an error; nothing is written by it, and the
    call ran once, in the other process."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(two_pushes()),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("push twice")
    (first,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, first.id, by="ann")
    other = tmp_path / "other.py"
    other.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(HERE)!r})
            import agentrt
            from agentrt import Decision, SideEffect
            from agentrt.scripted import ScriptedAgent
            from conftest import RecordingTool
            store = agentrt.open_store(sys.argv[1])
            push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
            agent = ScriptedAgent([
                Decision.tool_call("push", {{"x": 1}}),
                Decision.tool_call("push", {{"x": 2}}),
                Decision.complete("ok"),
            ])
            driver = agentrt.Driver(store=store, agent=agent,
                                    policy=agentrt.default_policy(), tools=[push])
            print(driver.resume_sync(sys.argv[2]).status, len(push.calls))
            """
        )
    )
    said: list[forkserver.Done] = []
    real = store.lease_now

    def another_process_resumes_it() -> None:
        said.append(another_process(str(other), database, run.id))

    fired: list[bool] = []

    def lease_now(wall: Any) -> datetime:
        # recover() reads the lease clock once it has judged the approval approved, and
        # before its resume reads the run: the other process resumes it right then.
        if not fired:
            fired.append(True)
            another_process_resumes_it()
        return real(wall)

    store.lease_now = lease_now  # type: ignore[method-assign]
    try:
        (found,) = driver.recover_sync()
    finally:
        del store.lease_now
    assert said[0].returncode == 0, said[0].stderr
    assert said[0].stdout.split() == ["WAITING_FOR_APPROVAL", "1"]
    assert (found.action, found.error) == (RecoverAction.SKIPPED, None), found
    assert found.why.startswith("it changed meanwhile"), found.why
    assert push.calls == []  # this process ran nothing
    (second,) = store.pending_approvals(run.id)
    assert second.id != first.id and store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    assert event_types(store, run.id).count("step.tool_started") == 1
    assert store.verify_events().intact


# ---------------------------------------------------------------------------------------------
# A resume loses to a cancel


def test_a_takeover_that_loses_to_a_cancel_says_the_run_ended_not_that_it_was_resumed_elsewhere(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program is SIGKILLed while its agent decides (its death provable on this host: the
    next resume takes the run over at once). A resume judges the lease gone and, before
    its take commits, an operator cancels the run from another process (`agentrt
    cancel`). The resume is refused, writing nothing: its error says the run ended
    (CANCELLED), not that another process resumed it, which nobody did."""
    monkeypatch.setenv("CRASH_JOURNAL", str(tmp_path / "journal"))
    killed = subprocess.run(
        [sys.executable, str(HERE / "crashing_child.py"), database, "deciding"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr
    store = agentrt.open_store(database)
    try:
        (run,) = store.list_runs()
        assert run.status == "RUNNING"
        said: list[forkserver.Done] = []

        def an_operator_cancels() -> None:
            said.append(agentrt_cli("cancel", run.id, "--by", "ops", "--db", database))

        resumer = agentrt.Driver(
            store=store,
            agent=ScriptedAgent(child.script("charge")),
            policy=child.policy(),
            tools=child.tools(database),
            now=once(an_operator_cancels, FakeClock()),
        )
        before = event_types(store, run.id)
        with pytest.raises(agentrt.RunStateError) as refused:
            resumer.resume_sync(run.id)
        assert said[0].returncode == 0, said[0].stderr
        message = str(refused.value)
        assert "resumed elsewhere" not in message, message
        assert f"run {run.id} is CANCELLED" in message and "ended" in message, message
        assert event_types(store, run.id) == [*before, "run.finished"]  # the cancel's only
        assert child.journal_lines(database) == []
        final = store.get_run(run.id)
        assert (final.status, final.reason) == ("CANCELLED", "operator_cancelled")
        assert store.verify_events().intact
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# A person decides as an operator cancels


def test_a_decision_refused_because_the_run_was_cancelled_says_so_and_who_cancelled_it(
    any_store: agentrt.Store, database: str
) -> None:
    """An operator cancels the run from another process just before a person's decision:
    every door refuses it `ApprovalExpiredError` (410 on the webhook), and the message says
    the run was cancelled and by whom, not merely that the approval "has expired" (which
    reads as its time having run out). `agentrt approve` exits 1 with the same words."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("push it")
    (approval,) = store.pending_approvals(run.id)
    cancelled = agentrt_cli("cancel", run.id, "--by", "ops", "--note", "stop", "--db", database)
    assert cancelled.returncode == 0, cancelled.stderr
    before = [(e.seq, e.hash) for e in store.list_events()]
    for decide in (agentrt.approve, agentrt.reject):
        with pytest.raises(agentrt.ApprovalExpiredError) as refused:
            decide(store, run.id, approval.id, "ann", shown_hash=approval.hash)
        message = str(refused.value)
        assert "cancelled" in message and "ops" in message, message
    cli = agentrt_cli(
        "approve", run.id, "--approval", approval.id, "--yes", "--by", "ann", "--db", database
    )
    assert cli.returncode == 1
    assert "cancelled" in cli.stderr and "ops" in cli.stderr, cli.stderr
    assert [(e.seq, e.hash) for e in store.list_events()] == before  # nothing written
    (still,) = store.list_approvals(run.id)
    assert (still.status, still.decided_by) == ("expired", "ops")


DOORS = ("approve", "reject", "cli", "local", "cancel")
"""`agentrt.approve`, `agentrt.reject`, `agentrt approve` (the CLI's own code), the
approver channel the webhook serves (`approver.Local`), and `agentrt.cancel`."""


def _one_door(
    database: str, run_id: str, approval: agentrt.Approval, door: str, go: Any, q: Any
) -> None:
    """In a process of its own: open the store, wait for the barrier, decide or cancel."""
    import io

    by = f"{door}-person"
    if door == "cli":
        from agentrt.cli import main

        err = io.StringIO()
        go.wait(30)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(
                ["approve", run_id, "--approval", approval.id, "--yes", "--by", by,
                 "--db", database]
            )  # fmt: skip
        q.put((door, "ok" if code == 0 else f"exit {code}", err.getvalue()))
        return
    store = agentrt.open_store(database)
    try:
        go.wait(30)
        if door == "cancel":
            done: Any = agentrt.cancel(store, run_id, "ops")
        elif door == "local":
            from agentrt.approver import Decision as Decided
            from agentrt.approver import Local

            done = Local(store).approve(Decided(run_id, approval.id, approval.hash, by, ""))
        else:
            decide = agentrt.approve if door == "approve" else agentrt.reject
            done = decide(store, run_id, approval.id, by, shown_hash=approval.hash)
        q.put((door, "ok", str(done.status)))
    except agentrt.AgentrtError as exc:
        q.put((door, type(exc).__name__, str(exc)))
    finally:
        store.close()


def test_five_doors_released_together_from_five_processes_one_decision_stands(
    any_store: agentrt.Store, database: str
) -> None:
    """Five processes, released together by one event after each opened the store (or
    loaded the CLI), approve through `agentrt.approve`, the CLI and the webhook's approver
    channel, reject, and cancel one waiting run. Whatever the interleaving: at most one
    decision is recorded (one `approval.decided`, by its winner), every other decider is
    refused naming who decided (`NotPendingError`; the CLI exits 1 saying so) or, after
    the cancel, that the run was cancelled and by whom (`ApprovalExpiredError`), the
    cancel is refused only after a reject ended the run (`RunFinishedError`), the run
    ends CANCELLED with nothing executed and no lease, and the chain verifies."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("push", {"x": 1})]),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("push it")
    (approval,) = store.pending_approvals(run.id)
    fork = multiprocessing.get_context("fork")
    go, q = fork.Event(), fork.Queue()
    children = [
        fork.Process(target=_one_door, args=(database, run.id, approval, door, go, q))
        for door in DOORS
    ]
    for process in children:
        process.start()
    go.set()
    said = {door: (kind, text) for door, kind, text in (q.get(timeout=60) for _ in children)}
    for process in children:
        process.join(30)
        assert process.exitcode == 0
    final = store.get_run(run.id)
    assert final.status == "CANCELLED"
    (decided,) = store.list_approvals(run.id)
    decisions = [e for e in store.list_events(run_id=run.id) if e.type == "approval.decided"]
    deciders = [door for door in DOORS if door != "cancel"]
    if decided.status == "expired":  # the cancel came first: no decision counts
        assert said["cancel"] == ("ok", "CANCELLED") and decisions == [], said
        for door in deciders:
            kind, text = said[door]
            assert kind in ("ApprovalExpiredError", "exit 1"), said
            assert "its run was cancelled by ops" in text, said
    else:
        winner = decided.decided_by.removesuffix("-person")
        assert len(decisions) == 1 and decisions[0].payload["by"] == decided.decided_by
        assert said[winner][0] == "ok", said
        for door in deciders:
            if door != winner:
                kind, text = said[door]
                assert kind in ("NotPendingError", "exit 1"), said
                assert f"already {decided.status} by {decided.decided_by}" in text, said
        if decided.status == "approved":  # the cancel ended the approved run unresumed
            assert said["cancel"] == ("ok", "CANCELLED") and final.reason == "operator_cancelled"
        else:
            assert final.reason == "approval_rejected"
            assert said["cancel"][0] == "RunFinishedError", said
    assert push.calls == [] and "step.tool_started" not in event_types(store, run.id)
    assert store.lease(run.id).owner == ""
    assert store.verify_events().intact


# ---------------------------------------------------------------------------------------------
# A resume that read the run before another process resumed it


OTHER_RESUME = """
import sys
sys.path.insert(0, {here!r})
import agentrt
from agentrt import Decision, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool
store = agentrt.open_store(sys.argv[1])
push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
agent = ScriptedAgent([
    Decision.tool_call("push", {{"x": 1}}),
    Decision.tool_call("push", {{"x": 2}}),
    Decision.complete("ok"),
])
driver = agentrt.Driver(store=store, agent=agent, policy=agentrt.default_policy(), tools=[push])
print(driver.resume_sync(sys.argv[2]).status, len(push.calls))
"""


def test_a_resume_that_read_the_run_before_another_process_resumed_it_holds_nothing(
    any_store: agentrt.Store, database: str, tmp_path: Path
) -> None:
    """A resume reads a waiting run whose approval was approved; right after its read,
    another process resumes the run, runs the approved call and pauses on the next
    step's approval. The stale resume is refused before it holds the run, saying the run
    moved on: it leaves no lease on the run (a hold left behind would refuse the next
    resume, once a person approves the second call, with `RunLeasedError` for a lease
    length), runs nothing, and the second call, approved, is resumed at once and runs
    once."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(two_pushes()),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    run = driver.start_sync("push twice")
    (first,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, first.id, by="ann")
    other = tmp_path / "other.py"
    other.write_text(OTHER_RESUME.format(here=str(HERE)))
    said: list[forkserver.Done] = []
    real = store.snapshot

    @contextlib.contextmanager
    def snapshot() -> Iterator[Any]:
        # The resume's one read of the run (`load`) is a snapshot: once it is read, the
        # other process resumes the run, before this resume holds it.
        with real() as view:
            yield view
        if not said:
            said.append(another_process(str(other), database, run.id))

    stale = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(two_pushes()),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    store.snapshot = snapshot  # type: ignore[method-assign]
    try:
        with pytest.raises(agentrt.RunStateError) as refused:
            stale.resume_sync(run.id)
    finally:
        del store.snapshot
    assert said[0].returncode == 0, said[0].stderr
    assert said[0].stdout.split() == ["WAITING_FOR_APPROVAL", "1"]
    assert not isinstance(refused.value, agentrt.RunLeasedError)
    assert "moved on" in str(refused.value), refused.value
    assert push.calls == []
    assert store.lease(run.id).owner == ""  # nothing held
    (second,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, second.id, by="ann")
    later = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(two_pushes()),
        policy=agentrt.default_policy(),
        tools=[push],
    )
    assert later.resume_sync(run.id).status == "COMPLETED"
    assert [c.args for c in push.calls] == [{"x": 2}]
    assert event_types(store, run.id).count("step.tool_started") == 2
    assert store.verify_events().intact


OTHER_ASKS_AGAIN = """
import sys
sys.path.insert(0, {here!r})
import agentrt
from agentrt import Decision, PolicyDecision, SideEffect
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool
from support.policies import FixedPolicy
store = agentrt.open_store(sys.argv[1])
push = RecordingTool("push", SideEffect.REMOTE_MUTATION)
policy = FixedPolicy(PolicyDecision.require_approval("second_look", "asked again"))
agent = ScriptedAgent([Decision.complete("ok")])
driver = agentrt.Driver(store=store, agent=agent, policy=policy, tools=[push])
print(driver.resume_sync(sys.argv[2]).status, len(push.calls))
"""


def test_a_resume_that_read_the_run_before_another_process_asked_again_on_its_step_holds_nothing(
    any_store: agentrt.Store, database: str, tmp_path: Path
) -> None:
    """A resume reads a waiting run whose approval was approved; right after its read,
    another process resumes the run and its policy sends the same call to a person again:
    the step awaits approval still, but on a new approval. The stale resume is refused
    before it holds the run, saying the run moved on, and leaves no lease behind: the new
    approval, once approved, is resumed at once and the call runs once."""
    store = any_store
    push = RecordingTool("push", SideEffect.REMOTE_MUTATION)

    def driver(policy: Any = None) -> agentrt.Driver:
        return agentrt.Driver(
            store=store,
            agent=ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete("ok")]),
            policy=policy or agentrt.default_policy(),
            tools=[push],
        )

    run = driver().start_sync("push once")
    (first,) = store.pending_approvals(run.id)
    agentrt.approve(store, run.id, first.id, by="ann")
    other = tmp_path / "other.py"
    other.write_text(OTHER_ASKS_AGAIN.format(here=str(HERE)))
    said: list[forkserver.Done] = []
    real = store.snapshot

    @contextlib.contextmanager
    def snapshot() -> Iterator[Any]:
        with real() as view:
            yield view
        if not said:
            said.append(another_process(str(other), database, run.id))

    stale = driver()
    store.snapshot = snapshot  # type: ignore[method-assign]
    try:
        with pytest.raises(agentrt.RunStateError) as refused:
            stale.resume_sync(run.id)
    finally:
        del store.snapshot
    assert said[0].returncode == 0, said[0].stderr
    assert said[0].stdout.split() == ["WAITING_FOR_APPROVAL", "0"]
    assert "moved on" in str(refused.value), refused.value
    assert push.calls == []
    assert store.lease(run.id).owner == ""  # nothing held
    (second,) = store.pending_approvals(run.id)
    assert second.id != first.id and second.step_id == first.step_id
    agentrt.approve(store, run.id, second.id, by="ann")
    again = FixedPolicy(agentrt.PolicyDecision.require_approval("second_look", "asked again"))
    assert driver(again).resume_sync(run.id).status == "COMPLETED"
    assert [c.args for c in push.calls] == [{"x": 1}]
    assert store.verify_events().intact
