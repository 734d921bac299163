"""An approved waiting run's resume: its hold renewed while the policy judges it, a hold
that lapsed starting nothing, a cancel meanwhile returned as the cancelled run, a run failed
as unreadable leaving nothing to decide, and `recover()` naming a held waiting run as
waiting (decision 0137; found by an attack on the approval and resume paths).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentrt
from agentrt import PolicyDecision, RunView, ToolRequest
from agentrt._clock import format_time
from agentrt.approver import Local
from conftest import FakeClock, Ids, event_types
from support.approvals import approved_run, paused_run
from support.gates import make_gate
from support.leases import MovableWall, expire_lease, stored_expiry, wait_for_renewal
from support.rows import execute


def test_a_lapsed_hold_on_a_waiting_run_starts_no_side_effect(
    any_store: agentrt.Store, database: str
) -> None:
    """The seed: a loop that stalled past its lease starts nothing even if nobody has taken
    the run; so too a session holding an approved waiting run."""
    store = any_store
    _, run, push, _ = approved_run(store)
    gate = make_gate(store, push, clock=FakeClock(), lease_ttl=timedelta(hours=1))
    session, verdict = gate.attach_sync(run.id)
    assert verdict is not None and verdict.outcome == "allowed"
    expire_lease(database, run.id, holder_elsewhere=False)  # a stall past the hold
    step = session.current()
    assert step is not None
    with pytest.raises(agentrt.LeaseLostError) as lost:
        step.execute_sync()
    assert str(lost.value).startswith(f"the hold on run {run.id} lapsed at ")
    assert str(lost.value).endswith("; no side effect is started on a lapsed lease")
    assert push.calls == []
    assert "step.tool_started" not in event_types(store, run.id)
    assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    session.close_sync()


def test_a_hold_is_renewed_while_the_attach_asks_the_policy(db_path: Path) -> None:
    """Leases judged on the test's clock (SQLite: PostgreSQL judges on its server's), so
    that only the renewal decides: a policy slower than the hold no longer lets a second
    attach hold the run and be told the same call is allowed."""
    store = agentrt.open_store(db_path)
    _, run, push, _ = approved_run(store)
    thinking, go_on = threading.Event(), threading.Event()

    class SlowPolicy:
        policy_id = "slow/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            thinking.set()
            assert go_on.wait(30)
            return PolicyDecision.allow()

    wall = MovableWall()
    lease = timedelta(milliseconds=300)
    gate_a = agentrt.Gate(
        store=store, policy=SlowPolicy(), tools=[push], new_id=Ids("c"), lease_ttl=lease, wall=wall
    )
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("a", gate_a.attach_sync(run.id)))
    thread.start()
    try:
        assert thinking.wait(10)
        wall.now += timedelta(seconds=1)  # more than three holds' length
        wait_for_renewal(lambda: stored_expiry(db_path, run.id), format_time(wall()), within=20)
        gate_b = agentrt.Gate(
            store=store, policy=agentrt.default_policy(), tools=[push], new_id=Ids("b"), wall=wall
        )
        with pytest.raises(agentrt.RunLeasedError):
            gate_b.attach_sync(run.id)
    finally:
        go_on.set()
        thread.join(10)
    session, verdict = box["a"]
    assert verdict is not None and verdict.outcome == "allowed"
    session.close_sync()
    assert push.calls == []
    store.close()


@pytest.mark.parametrize("answer", ["allow", "deny", "abort", "ask_again", "raise"])
def test_a_cancel_while_the_resume_asks_the_policy_returns_the_cancelled_run(
    any_store: agentrt.Store, answer: str
) -> None:
    """loop.md: a loop finds a cancel at its next write and returns the cancelled run
    without error; a resume whose policy judges the approved request again does too,
    whatever the policy answers."""
    store = any_store
    asked: list[str] = []

    class CancelledWhileThinking:
        policy_id = "cancelled-while-thinking/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            asked.append(view.run.status)
            if len(asked) == 1:  # the first time: the run pauses for a person
                return PolicyDecision.require_approval("remote_mutation", "ask", {"t": 1})
            agentrt.cancel(store, request.run_id, "carol", "stop it")
            if answer == "raise":
                raise ValueError("policy service down")
            return {
                "allow": PolicyDecision.allow(),
                "deny": PolicyDecision.deny("no"),
                "abort": PolicyDecision.abort("no"),
                "ask_again": PolicyDecision.require_approval("remote_mutation", "ask", {"t": 2}),
            }[answer]

    driver, run, push, _ = approved_run(store, policy=CancelledWhileThinking())
    resumed = driver.resume_sync(run.id)
    assert asked == ["RUNNING", "WAITING_FOR_APPROVAL"]
    assert (resumed.status, resumed.reason) == ("CANCELLED", "operator_cancelled")
    assert push.calls == []
    assert store.get_run(run.id) == resumed
    assert store.lease(run.id).owner == ""
    assert event_types(store, run.id)[-1] == "run.finished"


def test_a_waiting_run_failed_as_unreadable_leaves_nothing_to_decide(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    driver, run, push = paused_run(store)
    (waiting,) = store.pending_approvals(run.id)
    execute(database, "UPDATE runs SET limits_json = '{not json'")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert push.calls == []
    assert store.pending_approvals(run.id) == []
    assert Local(store).pending(run.id) == []
    assert store.get_approval(run.id, waiting.id).status == "expired"


def test_recover_skips_a_held_waiting_run_saying_it_waits(any_store: agentrt.Store) -> None:
    store = any_store
    driver, run, push, _ = approved_run(store)
    holder = make_gate(store, push, lease_ttl=timedelta(hours=1), lease_owner="holder-7")
    session, verdict = holder.attach_sync(run.id)
    assert verdict is not None and verdict.outcome == "allowed"
    try:
        other = agentrt.Driver(
            store=store,
            agent=driver.agent,
            policy=agentrt.default_policy(),
            tools=[push],
            new_id=Ids("c"),
        )
        (found,) = other.recover_sync()
        assert found.action == "skipped"
        assert found.why.startswith("WAITING_FOR_APPROVAL, its approved request held by holder-7/")
        assert found.why.endswith(" (another program is resuming it); not taken")
    finally:
        session.close_sync()
    assert push.calls == []
    assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
