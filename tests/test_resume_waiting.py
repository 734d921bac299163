"""Resuming a WAITING run: only the latest grant counts, re-verified by hash, re-judged
against the tool and the policy as they are now; pending refuses, expiry cancels."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import (
    ApprovalExpiredError,
    ApprovalHashError,
    Decision,
    Limits,
    PolicyDecision,
    RunStateError,
    RunView,
    SideEffect,
    ToolRequest,
)
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool, event_types
from support.approvals import PUSH_SCHEMA, approved_run, paused_run, restarted
from support.leases import expire_lease
from support.rows import execute, snapshot


def test_approve_then_resume_executes_the_request_once(any_store: agentrt.Store) -> None:
    args = {
        "branch": "main",
        "force": True,
        "retries": 0,
        "ratio": 0.5,
        "labels": ["a", "b"],
        "meta": {"n": 1, "ok": False},
        "note": None,
    }
    tool = RecordingTool("push", SideEffect.REMOTE_MUTATION, schema=PUSH_SCHEMA)
    driver, run, push = paused_run(any_store, tool=tool, args=args)
    (approval,) = any_store.pending_approvals(run.id)
    assert approval.kind == "remote_mutation"
    assert approval.request["args"] == args
    assert approval.hash == agentrt.approval_hash(
        approval.kind, approval.capability, approval.presentation, approval.request
    )
    decided = driver.approve(run.id, approval.id, by="alice", note="fine")
    assert (decided.status, decided.decided_by, decided.note) == ("approved", "alice", "fine")
    assert push.calls == []  # approving never executes anything
    run = driver.resume_sync(run.id)
    assert run.status == "COMPLETED"
    # Exactly the approved request, once: the same step, and the approved args key by
    # key, with their types (True is not 1, 0 is not False, 0.5 is not "0.5").
    (call,) = push.calls
    assert (call.run_id, call.step_id) == (run.id, approval.step_id)
    approved = approval.request["args"]
    assert type(call.args) is dict
    assert sorted(call.args) == sorted(approved) == sorted(args)
    for key, value in approved.items():
        assert call.args[key] == value == args[key], key
        assert type(call.args[key]) is type(value) is type(args[key]), key
    assert call.args["meta"] == {"n": 1, "ok": False}
    assert [type(v) for v in call.args["meta"].values()] == [int, bool]
    assert agentrt.canonical_json(call.args) == agentrt.canonical_json(approved)
    started = [e for e in any_store.list_events(run_id=run.id) if e.type == "step.tool_started"]
    assert [e.payload for e in started] == [
        {"tool": "push", "args": approved, "approval_id": approval.id}
    ]


def test_tampered_row_after_approval_is_refused_at_resume(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    driver, run, push, approval = approved_run(store)
    execute(
        database,
        'UPDATE approvals SET capability_json = \'{"tool":"push","args":{"x":2}}\' WHERE id = ?',
        (approval.id,),
    )
    before = snapshot(database)
    with pytest.raises(ApprovalHashError):
        driver.resume_sync(run.id)
    assert snapshot(database) == before
    assert push.calls == []


def test_pending_approval_refuses_resume_and_changes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    driver, run, _push = paused_run(store)
    before = snapshot(database)
    for _ in range(3):
        with pytest.raises(RunStateError, match="still pending"):
            driver.resume_sync(run.id)
    assert snapshot(database) == before


def test_approval_ttl_expiry_cancels_the_run(any_store: agentrt.Store) -> None:
    clock = FakeClock()
    driver, run, push = paused_run(
        any_store, clock=clock, limits=Limits(approval_ttl=timedelta(minutes=10))
    )
    (approval,) = any_store.pending_approvals(run.id)
    assert approval.expires_at == approval.created_at + timedelta(minutes=10)  # type: ignore[operator]
    clock.advance(timedelta(minutes=11))
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("CANCELLED", "approval_expired")
    assert any_store.get_approval(run.id, approval.id).status == "expired"
    with pytest.raises(ApprovalExpiredError):
        driver.approve(run.id, approval.id, by="late")
    assert push.calls == []


def test_grant_older_than_grant_ttl_cancels_with_nothing_executed(any_store: agentrt.Store) -> None:
    clock = FakeClock()
    driver, run, push, _ = approved_run(
        any_store, clock=clock, limits=Limits(grant_ttl=timedelta(hours=1))
    )
    clock.advance(timedelta(hours=2))
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("CANCELLED", "approval_expired")
    assert push.calls == []


def test_changed_tool_description_between_approval_and_resume_pauses_again(
    any_store: agentrt.Store,
) -> None:
    driver, run, push, _ = approved_run(any_store)
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="now force-pushes")
    driver2 = restarted(any_store, driver.agent, changed)
    run = driver2.resume_sync(run.id)
    assert run.status == "WAITING_FOR_APPROVAL"
    approvals = any_store.list_approvals(run.id)
    assert [a.status for a in approvals] == ["approved", "pending"]
    assert approvals[1].request["spec"]["description"] == "now force-pushes"
    assert approvals[1].step_id == approvals[0].step_id
    assert changed.calls == [] and push.calls == []
    assert event_types(any_store, run.id)[-2:] == ["step.policy", "approval.requested"]


def test_args_failing_the_current_schema_end_the_step_and_the_loop_goes_on(
    any_store: agentrt.Store,
) -> None:
    _driver, run, _push, _ = approved_run(any_store)
    narrowed = RecordingTool(
        "push",
        SideEffect.REMOTE_MUTATION,
        schema={"type": "object", "properties": {"x": {"type": "string"}}},
    )
    agent = ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete("gave up")])
    driver2 = restarted(any_store, agent, narrowed)
    run = driver2.resume_sync(run.id)
    assert (run.status, run.result) == ("COMPLETED", "gave up")
    first = any_store.list_steps(run.id)[0]
    assert first.status == "failed"
    assert first.observation is not None and first.observation.kind == "invalid_decision"
    assert "no longer match the current input schema" in first.observation.content["error"]
    assert narrowed.calls == []


def test_only_the_latest_grant_counts(any_store: agentrt.Store) -> None:
    """An older approved grant of the same step is spent once the step re-paused."""
    driver, run, push, _ = approved_run(any_store)
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="changed")
    driver2 = restarted(any_store, driver.agent, changed)
    assert driver2.resume_sync(run.id).status == "WAITING_FOR_APPROVAL"
    # The first grant is approved, but the latest approval is pending: no execution.
    with pytest.raises(RunStateError, match="still pending"):
        driver.resume_sync(run.id)
    assert push.calls == [] and changed.calls == []


def test_policy_is_asked_again_on_resume_and_a_denial_wins(any_store: agentrt.Store) -> None:
    answers: list[str] = []

    class Flipping:
        policy_id = "flipping/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            answers.append(view.run.status)
            if len(answers) == 1:
                return PolicyDecision.require_approval("remote_mutation", "ask", {"t": 1})
            return PolicyDecision.deny("changed my mind")

    driver, run, push, _ = approved_run(any_store, policy=Flipping())
    run = driver.resume_sync(run.id)
    assert answers == ["RUNNING", "WAITING_FOR_APPROVAL"]  # asked again while still waiting
    assert push.calls == []
    first = any_store.list_steps(run.id)[0]
    assert first.observation is not None
    assert first.observation.content == {"tool": "push", "reason": "changed my mind"}
    assert run.status == "COMPLETED"  # the loop went on to the agent's next decision


def test_file_backed_store_closed_and_reopened_mid_run_resumes(database: str) -> None:
    store = agentrt.open_store(database)
    _driver, run, push = paused_run(store)
    (approval,) = store.pending_approvals(run.id)
    store.close()

    reopened = agentrt.open_store(database)
    assert reopened.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    agentrt.approve(reopened, run.id, approval.id, by="alice", shown_hash=approval.hash)
    agent = ScriptedAgent([Decision.tool_call("push", {"x": 1}), Decision.complete("ok")])
    push2 = RecordingTool("push", SideEffect.REMOTE_MUTATION)
    driver2 = restarted(reopened, agent, push2)
    run = driver2.resume_sync(run.id)
    assert run.status == "COMPLETED" and run.result == "ok"
    assert len(push2.calls) == 1 and push.calls == []
    assert [s.status for s in reopened.list_steps(run.id)] == ["done", "done"]
    assert reopened.verify_events().intact
    reopened.close()


def test_a_grant_superseded_by_a_concurrent_re_pause_executes_nothing(
    any_store: agentrt.Store, database: str
) -> None:
    """Resume A holds the approved grant while its policy thinks; resume B (a newer deploy,
    the tool's description changed) pauses the step again on a new approval. A must not
    run the tool under the spent grant. (B attaches only because A's hold on the waiting
    run has lapsed, its stored expiry an hour past by the clock that judges it: a live
    hold would refuse B, decision 0032.)"""
    store = any_store
    import threading

    driver, run, push, _ = approved_run(store)
    thinking = threading.Event()
    go_on = threading.Event()

    class SlowPolicy:
        policy_id = "slow/1"

        def evaluate(self, request: ToolRequest, view: RunView) -> PolicyDecision:
            thinking.set()
            assert go_on.wait(10)
            return agentrt.default_policy().evaluate(request, view)  # type: ignore[return-value]

    slow_a = agentrt.Driver(
        store=store,
        agent=driver.agent,
        policy=SlowPolicy(),
        tools=[push],
        new_id=Ids("c"),
        lease_ttl=timedelta(hours=1),  # its heartbeat renews nothing during the test
    )
    box: dict[str, Any] = {}

    def resume_a() -> None:
        try:
            box["run"] = slow_a.resume_sync(run.id)
        except Exception as exc:
            box["error"] = exc

    thread = threading.Thread(target=resume_a)
    thread.start()
    assert thinking.wait(10)
    expire_lease(database, run.id)
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="changed terms")
    with agentrt.open_store(database) as b_store:  # B: another program on the same record
        b = agentrt.Driver(
            store=b_store,
            agent=driver.agent,
            policy=agentrt.default_policy(),
            tools=[changed],
            new_id=Ids("b"),
        )
        assert b.resume_sync(run.id).status == "WAITING_FOR_APPROVAL"
    go_on.set()
    thread.join(10)
    assert isinstance(box.get("error"), RunStateError), box
    assert push.calls == [] and changed.calls == []
    assert store.get_run(run.id).status == "WAITING_FOR_APPROVAL"
    assert [a.status for a in store.list_approvals(run.id)] == ["approved", "pending"]


def test_a_waiting_run_whose_record_will_not_decode_is_failed_not_continued(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    driver, run, push, _ = approved_run(store)
    execute(database, "UPDATE runs SET limits_json = '{not json'")
    run = driver.resume_sync(run.id)
    assert (run.status, run.reason) == ("FAILED", "internal_error")
    assert "cannot be read back" in run.reason_detail
    assert push.calls == []
