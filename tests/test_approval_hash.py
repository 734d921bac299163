"""The approval hash and deciding, pinned by the mutation campaign (docs/mutation.md).

Each test here kills a mutant of `agentrt._approval` that the tests in
`test_approvals.py` let live once mutmut ran each mutant in a clean process.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

import agentrt
import agentrt._approval
from agentrt import (
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    Limits,
    NotFoundError,
    NotPendingError,
    RunStateError,
    SideEffect,
)
from agentrt._approval import approval_hash, approval_request, decide, verify_stored
from agentrt._canonical import content_hash
from agentrt._clock import format_time
from agentrt._records import Approval, ApprovalStatus
from agentrt._store.sqlite import SqliteTx
from conftest import EPOCH, FakeClock, RecordingTool
from support.approvals import paused_run


def test_an_approval_request_with_no_args_binds_an_empty_object() -> None:
    spec = RecordingTool("push", SideEffect.REMOTE_MUTATION).spec
    assert approval_request("r", "s", spec, None)["args"] == {}
    assert approval_request("r", "s", spec, None) == approval_request("r", "s", spec, {})


def test_no_capability_or_presentation_hashes_as_an_empty_object() -> None:
    request = {"run_id": "r"}
    expected = content_hash({"kind": "k", "capability": {}, "presentation": {}, "request": request})
    assert approval_hash("k", None, None, request) == expected
    assert approval_hash("k", {}, {}, request) == expected


def test_deciding_at_the_instant_an_approval_expires_is_refused_naming_the_time(
    any_store: agentrt.Store,
) -> None:
    clock = FakeClock(tick=timedelta(0))
    _driver, run, _push = paused_run(
        any_store, clock, limits=Limits(approval_ttl=timedelta(hours=1))
    )
    (approval,) = any_store.pending_approvals(run.id)
    assert approval.expires_at == EPOCH + timedelta(hours=1)
    with pytest.raises(
        ApprovalExpiredError,
        match=rf"^approval {approval.id} expired at 2026-11-30T10:00:00\.000000Z$",
    ):
        decide(
            any_store,
            run.id,
            approval.id,
            approve=True,
            by="ops",
            note="",
            shown_hash=None,
            now=approval.expires_at,
        )


def test_a_rejection_fails_the_step_with_the_tool_and_the_note(any_store: agentrt.Store) -> None:
    _driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    decide(
        any_store,
        run.id,
        approval.id,
        approve=False,
        by="ops",
        note="too risky",
        shown_hash=None,
        now=EPOCH + timedelta(minutes=1),
    )
    (step,) = any_store.list_steps(run.id)
    assert step.observation is not None
    assert (step.observation.kind, step.observation.summary) == (
        "policy_denied",
        "approval rejected: too risky",
    )
    assert step.observation.content == {"tool": "push", "reason": "approval rejected: too risky"}


def test_each_refusal_to_decide_says_what_and_why(any_store: agentrt.Store) -> None:
    _driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    now = EPOCH + timedelta(minutes=1)
    with pytest.raises(NotFoundError, match=r"^no run nope$"):
        decide(
            any_store, "nope", approval.id, approve=True, by="o", note="", shown_hash=None, now=now
        )
    with pytest.raises(NotFoundError, match=f"^no approval nope on run {run.id}$"):
        decide(any_store, run.id, "nope", approve=True, by="o", note="", shown_hash=None, now=now)
    decide(any_store, run.id, approval.id, approve=True, by="o", note="", shown_hash=None, now=now)
    already = f"^approval {approval.id} was already approved by o at 2026-11-30T09:01:00.000000Z$"
    with pytest.raises(NotPendingError, match=already):
        decide(
            any_store, run.id, approval.id, approve=True, by="o", note="", shown_hash=None, now=now
        )


def test_a_stored_approval_that_no_longer_verifies_is_refused_saying_why(
    any_store: agentrt.Store,
) -> None:
    _driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    verify_stored(approval)
    with pytest.raises(
        ApprovalHashError,
        match=rf"^approval {approval.id} cannot be read back \(bad bytes\); "
        "it will not be decided or executed$",
    ):
        verify_stored(dataclasses.replace(approval, decode_error="bad bytes"))
    with pytest.raises(ApprovalHashError, match=rf"^approval {approval.id} cannot be hashed: "):
        verify_stored(dataclasses.replace(approval, request={"x": float("nan")}))
    with pytest.raises(
        ApprovalHashError,
        match=rf"^approval {approval.id} no longer matches its hash: the stored request, kind, "
        "capability or presentation was altered after it was made$",
    ):
        verify_stored(dataclasses.replace(approval, hash="0" * 64))


def test_deciding_an_approval_expired_by_a_cancel_is_refused_saying_who_cancelled_the_run(
    any_store: agentrt.Store,
) -> None:
    driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    driver.cancel(run.id, by="ops", note="stop")
    cancelled = any_store.get_approval(run.id, approval.id).decided_at
    assert cancelled is not None
    with pytest.raises(
        ApprovalExpiredError,
        match=rf"^approval {approval.id} can no longer be decided: its run was cancelled by ops "
        rf"at {format_time(cancelled)}; nothing was decided$",
    ):
        decide(
            any_store,
            run.id,
            approval.id,
            approve=True,
            by="o",
            note="",
            shown_hash=None,
            now=EPOCH + timedelta(minutes=1),
        )


def test_deciding_for_a_run_that_is_not_waiting_is_refused_naming_its_status(
    any_store: agentrt.Store,
) -> None:
    _driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)
    with any_store.transaction() as tx:
        tx.execute("UPDATE runs SET status = 'RUNNING' WHERE id = ?", (run.id,))
    with pytest.raises(
        RunStateError, match=f"^run {run.id} is RUNNING, not waiting for an approval$"
    ):
        decide(
            any_store,
            run.id,
            approval.id,
            approve=True,
            by="o",
            note="",
            shown_hash=None,
            now=EPOCH + timedelta(minutes=1),
        )


def test_losing_the_compare_and_set_to_another_decision_is_refused_as_changed(
    any_store: agentrt.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _driver, run, _push = paused_run(any_store)
    (approval,) = any_store.pending_approvals(run.id)

    real_decide = SqliteTx.decide_approval

    def another_writer_first(
        tx: SqliteTx,
        approval: Approval,
        status: ApprovalStatus,
        by: str,
        note: str,
        now: datetime,
    ) -> Approval:
        # Another decision lands between this decide's read and its compare-and-set.
        tx.execute("UPDATE approvals SET status = 'rejected' WHERE id = ?", (approval.id,))
        return real_decide(tx, approval, status, by, note, now)

    monkeypatch.setattr(SqliteTx, "decide_approval", another_writer_first)
    with pytest.raises(
        ApprovalChangedError, match=f"^approval {approval.id} changed while being decided$"
    ):
        decide(
            any_store,
            run.id,
            approval.id,
            approve=True,
            by="o",
            note="",
            shown_hash=None,
            now=EPOCH + timedelta(minutes=1),
        )
    (still,) = any_store.pending_approvals(run.id)
    assert still.id == approval.id
