"""Taking over a run whose owner died, and the interruption contract: the seed's claims.

Crashes here are real: a child process kills itself with SIGKILL in the middle of
a step (see `crashing_child.py`), leaving exactly what a dead process leaves.

Every test but one takes `database` and runs on SQLite and on PostgreSQL (issue 21
item 5; decisions 0103, 0105); a lease runs out there by its stored expiry moved into
the past (`expire_lease`), since PostgreSQL judges it by the server's clock, which no
test can move. The four racing processes stay on a file: `test_postgres_race.py`
races them on PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
import crashing_child as child
from agentrt import (
    Decision,
    PolicyDecision,
    Reconciliation,
    RunLeasedError,
    RunStateError,
    RunView,
    SideEffect,
    ToolCall,
    ToolResult,
)
from agentrt.scripted import ScriptedAgent
from conftest import RecordingTool, event_types
from support.crashes import HERE, crash, pretend_holder_is_on_another_host, resumer
from support.leases import expire_lease
from support.rows import execute

# -- takeover ------------------------------------------------------------------


def test_lease_expired_lease_is_taken_over_and_reconciled_once(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    pretend_holder_is_on_another_host(db_path)  # nothing to prove: only the expiry frees it
    store = agentrt.open_store(db_path)
    calls: list[RunView] = []

    def reconcile(view: RunView) -> Reconciliation:
        calls.append(view)
        return Reconciliation.completed({"charged": True}, detail="found the charge upstream")

    driver = resumer(store, db_path, reconcile=reconcile)
    with pytest.raises(RunLeasedError) as refused:
        driver.resume_sync(run_id)
    assert refused.value.owner.startswith("crashing-child/")
    expire_lease(db_path, run_id)  # as the lease's own clock would see it after an hour
    run = driver.resume_sync(run_id)
    assert (run.status, run.result, run.reason_detail) == (
        "COMPLETED",
        {"charged": True},
        "found the charge upstream",
    )
    assert len(calls) == 1
    (view,) = calls
    assert [s.status for s in view.steps] == ["interrupted"]  # marked before reconcile ran
    with pytest.raises(RunStateError):
        driver.resume_sync(run_id)
    assert len(calls) == 1
    types = event_types(store, run_id)
    assert types.count("lease.taken_over") == 1
    assert types[-3:] == ["lease.taken_over", "step.interrupted", "run.finished"]
    taken = next(e for e in store.list_events(run_id=run_id) if e.type == "lease.taken_over")
    assert taken.payload["previous_owner"].startswith("crashing-child/")
    assert taken.payload["owner"] == driver.lease_owner
    assert taken.payload["epoch"] == 2
    assert taken.payload["proof"] == {"by": "lease expired"}
    assert len(child.journal_lines(db_path)) == 1  # the charge never ran again


def test_lease_local_owner_proved_dead_is_taken_over_at_once(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")  # a 30 s lease, its process gone
    store = agentrt.open_store(db_path)
    run = resumer(store, db_path).resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    taken = next(e for e in store.list_events(run_id=run_id) if e.type == "lease.taken_over")
    proof = taken.payload["proof"]
    assert proof["by"] == "owner process gone"
    assert proof["proof"] == "no such process"
    assert proof["host"] == agentrt._lease.host_id()


def test_lease_live_local_owner_is_not_taken_over(any_store: agentrt.Store, database: str) -> None:
    """A lease held by a live process on this host proves nothing: resume waits."""
    store, db_path = any_store, database
    started = threading.Event()
    release = threading.Event()

    def block(call: ToolCall) -> ToolResult:
        started.set()
        assert release.wait(20)
        return ToolResult({})

    tool = RecordingTool("block", SideEffect.LOCAL_MUTATION, result=block)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("block", {}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
    )
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", driver.start_sync("g")))
    thread.start()
    try:
        assert started.wait(10)
        run_id = store.list_runs()[0].id
        with agentrt.open_store(db_path) as other_store:
            other = agentrt.Driver(
                store=other_store,
                agent=ScriptedAgent([]),
                policy=agentrt.default_policy(),
                tools=[tool],
            )
            with pytest.raises(RunLeasedError):
                other.resume_sync(run_id)
    finally:
        release.set()
        thread.join(20)
    assert box["run"].status == "COMPLETED"


# -- the interruption contract ---------------------------------------------------


def test_resume_interrupted_side_effect_waits_for_an_operator(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    driver = resumer(store, db_path)
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    assert approval.capability == {"tool": "charge", "args": {"amount": 5}}
    assert approval.presentation["side_effect"] == "remote_mutation"
    assert "whether it took effect is unknown" in approval.presentation["notice"]
    (step,) = store.list_steps(run_id)
    assert step.status == "awaiting_approval"
    assert approval.step_id == step.id
    assert len(child.journal_lines(db_path)) == 1  # not run again on the runtime's own say

    agentrt.approve(store, run_id, approval.id, by="ops", shown_hash=approval.hash)
    run = driver.resume_sync(run_id)
    assert run.status == "COMPLETED"
    lines = child.journal_lines(db_path)
    assert len(lines) == 2 and lines[1].split()[2] == step.id  # once more, on the same step
    steps = store.list_steps(run_id)
    assert [(s.index, s.status) for s in steps] == [(0, "done"), (1, "done")]
    types = event_types(store, run_id)
    assert types[:8] == [
        "run.created",
        "run.started",
        "step.started",
        "step.decided",
        "step.policy",
        "step.tool_started",
        "lease.taken_over",
        "step.interrupted",
    ]
    assert types[8:14] == [
        "step.policy",
        "approval.requested",
        "approval.decided",
        "run.resumed",
        "step.policy",
        "step.tool_started",
    ]


def test_resume_interrupted_side_effect_rejected_ends_the_run_without_calling_again(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    driver = resumer(store, db_path)
    driver.resume_sync(run_id)
    (approval,) = store.pending_approvals(run_id)
    agentrt.reject(store, run_id, approval.id, by="ops", note="it went through upstream")
    run = store.get_run(run_id)
    assert (run.status, run.reason) == ("CANCELLED", "approval_rejected")
    with pytest.raises(RunStateError):
        driver.resume_sync(run_id)
    assert len(child.journal_lines(db_path)) == 1


def test_resume_interrupted_read_only_step_continues(database: str, crash_journal: Path) -> None:
    db_path = database
    run_id = crash(db_path, "lookup")
    store = agentrt.open_store(db_path)
    run = resumer(store, db_path, mode="lookup").resume_sync(run_id)
    assert run.status == "COMPLETED"
    steps = store.list_steps(run_id)
    assert [(s.status, s.observation.kind if s.observation else None) for s in steps] == [
        ("interrupted", "interrupted"),
        ("done", "tool_result"),
        ("done", None),
    ]
    resumed = [e for e in store.list_events(run_id=run_id) if e.type == "run.resumed"]
    assert [e.payload for e in resumed] == [{"after": "interruption"}]
    assert store.pending_approvals(run_id) == []
    # The runtime did not run the read again; the agent asked for it in a new step.
    assert steps[1].decision == steps[0].decision
    assert [line.split()[1:3] for line in child.journal_lines(db_path)] == [
        ["lookup", steps[0].id],
        ["lookup", steps[1].id],
    ]


def test_resume_after_a_death_while_deciding_asks_for_the_step_again(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "deciding")
    store = agentrt.open_store(db_path)
    run = resumer(store, db_path, mode="deciding").resume_sync(run_id)
    assert run.status == "COMPLETED"
    # A step dies with nothing of it durable before its first commit (decision 0088):
    # the takeover finds no step in flight, and the agent is asked for step 0 again.
    steps = store.list_steps(run_id)
    assert [(s.index, s.status) for s in steps] == [(0, "done"), (1, "done")]
    types = [e.type for e in store.list_events(run_id=run_id)]
    assert types[:4] == ["run.created", "run.started", "lease.taken_over", "run.resumed"]
    assert "step.interrupted" not in types
    assert len(child.journal_lines(db_path)) == 1  # the charge ran once, after the resume


@pytest.mark.parametrize("change", ["tool_gone", "args_invalid"])
def test_resume_interrupted_call_that_cannot_wait_fails_as_reconcile_conflict(
    database: str, crash_journal: Path, change: str
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    if change == "tool_gone":
        tools = [t for t in child.tools(db_path) if t.spec.name != "charge"]
    else:
        tools = child.tools(db_path)
        tools[0].spec = agentrt.ToolSpec(
            "charge",
            "the charge tool",
            {"type": "object", "properties": {"amount": {"type": "string"}}},
            SideEffect.REMOTE_MUTATION,
            timedelta(seconds=10),
        )
    driver = agentrt.Driver(
        store=store, agent=ScriptedAgent([]), policy=child.policy(), tools=tools
    )
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert ("no longer registered" if change == "tool_gone" else "no longer match") in (
        run.reason_detail
    )
    assert len(child.journal_lines(db_path)) == 1


def test_resume_interrupted_step_is_reconciled_and_continued(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)

    def reconcile(view: RunView) -> Reconciliation:
        return Reconciliation.continue_run("no charge found upstream; the agent may retry")

    run = resumer(store, db_path, reconcile=reconcile).resume_sync(run_id)
    assert run.status == "COMPLETED"
    resumed = [e for e in store.list_events(run_id=run_id) if e.type == "run.resumed"]
    assert resumed[0].payload == {
        "after": "interruption",
        "reconcile": "continue",
        "detail": "no charge found upstream; the agent may retry",
    }
    assert store.list_steps(run_id)[0].status == "interrupted"


def _reconciled(db_path: Path | str, verdict: Any) -> agentrt.Run:
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)

    def reconcile(view: RunView) -> Any:
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    return resumer(store, db_path, reconcile=reconcile).resume_sync(run_id)


@pytest.mark.parametrize(
    ("verdict", "status", "reason", "detail"),
    [
        (
            Reconciliation.completed({"id": "ch_1"}, "found it"),
            "COMPLETED",
            "goal_completed",
            "found it",
        ),
        (
            Reconciliation.conflict("two charges upstream"),
            "FAILED",
            "reconcile_conflict",
            "two charges upstream",
        ),
        (
            Reconciliation.completed({"n": float("nan")}),
            "FAILED",
            "internal_error",
            "not usable JSON",
        ),
        (
            ValueError("ledger down"),
            "FAILED",
            "internal_error",
            "reconcile raised ValueError: ledger down",
        ),
        (Reconciliation(outcome="shrug"), "FAILED", "internal_error", "unknown outcome 'shrug'"),
        ("continue", "FAILED", "internal_error", "not a Reconciliation"),
        (
            Reconciliation.waiting(PolicyDecision.allow()),
            "FAILED",
            "internal_error",
            "must require an approval",
        ),
    ],
)
def test_resume_reconcile_outcomes(
    database: str, crash_journal: Path, verdict: Any, status: str, reason: str, detail: str
) -> None:
    db_path = database
    run = _reconciled(db_path, verdict)
    assert (run.status, run.reason) == (status, reason)
    assert detail in run.reason_detail
    assert len(child.journal_lines(db_path)) == 1


def test_resume_reconcile_waiting_pauses_on_the_consumers_approval(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    pause = PolicyDecision.require_approval(
        "charge_unclear",
        "the ledger shows a pending charge",
        capability={"charge": 5},
        presentation={"ledger": "pending"},
    )
    run = _reconciled(db_path, Reconciliation.waiting(pause, "ask finance"))
    assert run.status == "WAITING_FOR_APPROVAL"
    store = agentrt.open_existing(db_path)
    (approval,) = store.pending_approvals(run.id)
    assert (approval.kind, approval.presentation) == ("charge_unclear", {"ledger": "pending"})
    agentrt.approve(store, run.id, approval.id, by="finance")
    run = resumer(store, db_path).resume_sync(run.id)
    assert run.status == "COMPLETED"
    assert len(child.journal_lines(db_path)) == 2


def test_resume_reconcile_waiting_without_an_executing_call_is_a_conflict(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "deciding")
    store = agentrt.open_store(db_path)

    def reconcile(view: RunView) -> Reconciliation:
        return Reconciliation.waiting(PolicyDecision.require_approval("k", "r"))

    run = resumer(store, db_path, mode="deciding", reconcile=reconcile).resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")


RACER = """
import sys, agentrt
sys.path.insert(0, {here!r})
import crashing_child as child
from agentrt.scripted import ScriptedAgent
db = sys.argv[1]  # a SQLite file's path or a PostgreSQL URL
store = agentrt.open_store(db)
driver = agentrt.Driver(store=store, agent=ScriptedAgent(child.script("charge")),
                        policy=child.policy(), tools=child.tools(db))
try:
    run = driver.resume_sync(sys.argv[2])
except (agentrt.RunStateError, agentrt.LeaseLostError) as exc:
    print("refused", type(exc).__name__)
    sys.exit(3)
print("resumed", run.status)
"""


def test_several_processes_racing_to_resume_one_crashed_run_exactly_one_executes(
    database: str, crash_journal: Path, tmp_path: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(here=str(HERE)))
    racers = [
        subprocess.Popen(
            [sys.executable, str(script), db_path, run_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [r.communicate(timeout=60) for r in racers]
    codes = sorted(r.returncode for r in racers)
    assert codes == [0, 3, 3, 3], outputs
    store = agentrt.open_existing(db_path, read_only=True)
    types = event_types(store, run_id)
    assert sorted(out.split()[0] for out, _ in outputs) == ["refused"] * 3 + ["resumed"]
    assert types.count("lease.taken_over") == 1
    assert types.count("step.interrupted") == 1
    assert types.count("approval.requested") == 1
    assert store.get_run(run_id).status == "WAITING_FOR_APPROVAL"
    assert len(child.journal_lines(db_path)) == 1


def test_a_model_attempt_cut_off_by_sigkill_is_charged_at_takeover(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    from agentrt._accounting import project

    run_id = crash(db_path, "model")
    store = agentrt.open_store(db_path)
    (attempt,) = store.list_model_calls(run_id)
    assert attempt.status == "dispatched"
    assert store.get_run(run_id).estimated_cost_micros == 0  # not yet charged
    driver = resumer(store, db_path, mode="deciding")  # index 0 was the model step
    run = driver.resume_sync(run_id)
    assert run.status == "COMPLETED"
    projected = project(child.REQUEST, 1000, child.PRICE)
    (attempt,) = store.list_model_calls(run_id)
    assert (attempt.status, attempt.input_tokens, attempt.output_tokens, attempt.cost_micros) == (
        "ambiguous",
        projected.input_tokens,
        1000,
        projected.cost_micros,
    )
    run = store.get_run(run_id)
    assert run.estimated_cost_micros == projected.cost_micros
    assert (run.model_calls, run.output_tokens) == (1, 1000)
    types = event_types(store, run_id)
    taken = types.index("lease.taken_over")
    assert types[taken : taken + 3] == ["lease.taken_over", "model.failed", "step.interrupted"]


def test_reconcile_runs_under_a_renewed_lease(database: str, crash_journal: Path) -> None:
    """A reconcile slower than the lease keeps the run: no one else can take it meanwhile."""
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    refused: list[BaseException] = []

    def slow_reconcile(view: RunView) -> Reconciliation:
        time.sleep(0.8)  # several lease lengths
        other = resumer(agentrt.open_store(db_path), db_path)

        def try_to_take_it() -> None:  # another process would do this; a thread will do
            try:
                other.resume_sync(view.run.id)
            except RunLeasedError as exc:
                refused.append(exc)

        thread = threading.Thread(target=try_to_take_it)
        thread.start()
        thread.join(10)
        return Reconciliation.conflict("checked upstream")

    driver = resumer(
        store, db_path, reconcile=slow_reconcile, lease_ttl=timedelta(milliseconds=200)
    )
    run = driver.resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "reconcile_conflict")
    assert len(refused) == 1
    assert event_types(store, run_id).count("lease.taken_over") == 1


def test_a_mutation_re_declared_read_only_after_the_crash_still_waits_for_a_person(
    database: str,
    crash_journal: Path,
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    tools = child.tools(db_path)
    spec = tools[0].spec
    tools[0].spec = agentrt.ToolSpec(
        spec.name, spec.description, spec.input_schema, SideEffect.READ_ONLY, spec.timeout
    )
    driver = agentrt.Driver(
        store=store, agent=ScriptedAgent(child.script("charge")), policy=child.policy(), tools=tools
    )
    run = driver.resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"
    assert store.pending_approvals(run_id)[0].kind == "interrupted_side_effect"


def test_a_takeover_of_a_run_whose_limits_will_not_decode_ends_it(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    run_id = crash(db_path, "lookup")
    execute(db_path, "UPDATE runs SET limits_json = '[broken'")
    store = agentrt.open_store(db_path)
    run = resumer(store, db_path, mode="lookup").resume_sync(run_id)
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert len(child.journal_lines(db_path)) == 1


def test_lease_a_takeover_whose_reconcile_is_cancelled_gives_the_run_back(
    database: str, crash_journal: Path
) -> None:
    db_path = database
    import asyncio

    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)

    reconciling = threading.Event()

    async def slow_reconcile(view: RunView) -> Reconciliation:
        reconciling.set()
        await asyncio.sleep(30)
        return Reconciliation.conflict("never")

    driver = resumer(
        store, db_path, reconcile=slow_reconcile, lease_ttl=timedelta(milliseconds=300)
    )

    async def give_up() -> None:
        # Cancelled once the takeover is made and its reconcile is waiting (not after a
        # time the takeover may not have reached on a loaded machine).
        resuming = asyncio.ensure_future(driver.resume(run_id))
        while not reconciling.is_set():
            assert not resuming.done(), resuming
            await asyncio.sleep(0.005)
        resuming.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resuming

    asyncio.run(give_up())
    assert store.lease(run_id).owner == ""
    time.sleep(0.5)
    assert store.lease(run_id).owner == ""  # no heartbeat left renewing it
    run = resumer(store, db_path).resume_sync(run_id)
    assert run.status == "WAITING_FOR_APPROVAL"


class DenyCharges:
    policy_id = "deny-charges/1"

    def evaluate(self, request: agentrt.ToolRequest, view: RunView) -> PolicyDecision:
        return PolicyDecision.deny("charges are frozen")


@pytest.mark.parametrize("change", ["policy_denies", "args_invalid"])
def test_resume_an_approved_interrupted_call_still_passes_schema_and_policy(
    database: str, crash_journal: Path, change: str
) -> None:
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    resumer(store, db_path).resume_sync(run_id)
    (approval,) = store.pending_approvals(run_id)
    agentrt.approve(store, run_id, approval.id, by="ops")
    tools = child.tools(db_path)
    policy: Any = child.policy()
    if change == "policy_denies":
        policy = DenyCharges()
    else:
        spec = tools[0].spec
        tools[0].spec = agentrt.ToolSpec(
            spec.name,
            spec.description,
            {"type": "object", "properties": {"amount": {"type": "string"}}},
            spec.side_effect,
            spec.timeout,
        )
    driver = agentrt.Driver(
        store=store, agent=ScriptedAgent(child.script("charge")), policy=policy, tools=tools
    )
    run = driver.resume_sync(run_id)
    assert len(child.journal_lines(db_path)) == 1  # never called again
    first = store.list_steps(run_id)[0]
    assert first.status == "failed"
    assert first.observation is not None
    expected = "policy_denied" if change == "policy_denies" else "invalid_decision"
    assert first.observation.kind == expected
    assert run.status in ("COMPLETED", "FAILED")


def test_resume_an_interrupted_grant_satisfies_the_policys_own_approval_of_the_same_request(
    database: str,
    crash_journal: Path,
) -> None:
    """docs/decisions/0006: under a policy that asks a person for every charge, approving
    the interrupted_side_effect approval is that person's answer; it is not asked twice."""
    db_path = database
    run_id = crash(db_path, "charge")
    store = agentrt.open_store(db_path)
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(child.script("charge")),
        policy=agentrt.default_policy(),
        tools=child.tools(db_path),
    )
    assert driver.resume_sync(run_id).status == "WAITING_FOR_APPROVAL"
    (approval,) = store.pending_approvals(run_id)
    assert approval.kind == "interrupted_side_effect"
    agentrt.approve(store, run_id, approval.id, by="ops")
    run = driver.resume_sync(run_id)
    assert run.status == "COMPLETED"
    assert len(child.journal_lines(db_path)) == 2
    assert [a.kind for a in store.list_approvals(run_id)] == ["interrupted_side_effect"]
