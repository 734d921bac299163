"""Approvals: bound by hash to the exact request, decided (approved, rejected) by a person."""

from __future__ import annotations

from datetime import timedelta

import pytest

import agentrt
from agentrt import (
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    Limits,
    NotPendingError,
    RunStateError,
    SideEffect,
)
from conftest import FakeClock, RecordingTool, event_types
from support.approvals import paused_run, restarted, tamper
from support.rows import query, snapshot


def test_tampered_approval_row_is_refused_by_hash(any_store: agentrt.Store, database: str) -> None:
    store = any_store
    driver, run, _push = paused_run(store)
    (approval,) = store.pending_approvals(run.id)
    tamper(database, approval.id)
    before = snapshot(database)
    with pytest.raises(ApprovalHashError, match="no longer matches its hash"):
        driver.approve(run.id, approval.id, by="alice")
    assert snapshot(database) == before


def test_approve_with_shown_hash_is_refused_after_a_concurrent_change(
    any_store: agentrt.Store, database: str
) -> None:
    """The operator was shown one approval; by the time they decide, the run re-paused on
    a new request (its tool description changed). The decision must not apply."""
    store = any_store
    driver, run, push = paused_run(store)
    (shown,) = store.pending_approvals(run.id)
    # Someone else decides the shown approval and the run pauses again on a changed tool.
    driver.approve(run.id, shown.id, by="bob")
    changed = RecordingTool("push", SideEffect.REMOTE_MUTATION, description="pushes to prod")
    driver2 = restarted(store, driver.agent, changed)
    assert driver2.resume_sync(run.id).status == "WAITING_FOR_APPROVAL"
    (current,) = store.pending_approvals(run.id)
    assert current.id != shown.id and current.hash != shown.hash
    before = snapshot(database)
    with pytest.raises(ApprovalChangedError, match="changed since it was shown"):
        agentrt.approve(store, run.id, current.id, by="alice", shown_hash=shown.hash)
    assert snapshot(database) == before
    with pytest.raises(NotPendingError):
        agentrt.approve(store, run.id, shown.id, by="alice", shown_hash=shown.hash)
    agentrt.approve(store, run.id, current.id, by="alice", shown_hash=current.hash)
    assert driver2.resume_sync(run.id).status == "COMPLETED"
    assert len(changed.calls) == 1 and push.calls == []


def test_reject_fails_the_step_and_cancels_the_run(any_store: agentrt.Store) -> None:
    driver, run, push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    decided = agentrt.reject(any_store, run.id, approval.id, by="alice", note="not today")
    assert decided.status == "rejected"
    run = any_store.get_run(run.id)
    assert (run.status, run.reason, run.reason_detail) == (
        "CANCELLED",
        "approval_rejected",
        "not today",
    )
    step = any_store.list_steps(run.id)[-1]
    assert step.status == "failed"
    assert step.observation is not None
    assert step.observation.kind == "policy_denied"
    assert step.observation.content == {"tool": "push", "reason": "approval rejected: not today"}
    assert event_types(any_store, run.id)[-4:] == [
        "approval.requested",
        "approval.decided",
        "step.failed",
        "run.finished",
    ]
    with pytest.raises(RunStateError):
        driver.resume_sync(run.id)
    assert push.calls == []


def test_a_rejection_stores_the_hash_of_its_observation(
    any_store: agentrt.Store, database: str
) -> None:
    store = any_store
    _, run, _ = paused_run(store)
    (approval,) = store.pending_approvals(run.id)
    agentrt.reject(store, run.id, approval.id, by="alice", note="not today")
    step = store.list_steps(run.id)[-1]
    expected = agentrt.content_hash({"tool": "push", "reason": "approval rejected: not today"})
    assert step.observation is not None
    assert step.observation.content_hash == expected
    assert query(database, "SELECT observation_hash FROM steps WHERE id = ?", (step.id,)) == [
        (expected,)
    ]


def test_approving_after_approval_ttl_is_refused(any_store: agentrt.Store, database: str) -> None:
    store = any_store
    clock = FakeClock()
    driver, run, _push = paused_run(
        store, clock=clock, limits=Limits(approval_ttl=timedelta(minutes=10))
    )
    (approval,) = store.pending_approvals(run.id)
    clock.advance(timedelta(minutes=11))
    before = snapshot(database)
    with pytest.raises(ApprovalExpiredError):
        driver.approve(run.id, approval.id, by="late")
    assert snapshot(database) == before
