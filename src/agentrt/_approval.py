"""Approvals: the hash that binds a person's decision to one exact request.

Invariants this module owns:

- The approval hash is SHA-256 over the canonical JSON of `{kind, capability,
  presentation, request}`, where the request names the run, the step, the tool
  spec as registered (timeout in nanoseconds) and the args. A value that cannot
  be encoded is an error, never a stand-in hash.
- Deciding (approve or reject) re-verifies the stored row against its hash
  (`ApprovalHashError`), checks the hash the operator was shown inside the same
  transaction (`ApprovalChangedError`), and updates only `WHERE status =
  'pending' AND hash = ?`. Approving never executes anything.
- Rejecting fails the step (`policy_denied`) and cancels the run
  (`approval_rejected`) in the same transaction.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ._canonical import content_hash
from ._clock import format_time
from ._errors import (
    ApprovalChangedError,
    ApprovalExpiredError,
    ApprovalHashError,
    NotFoundError,
    NotPendingError,
    RunFinishedError,
    RunStateError,
)
from ._records import (
    JSON,
    Approval,
    ApprovalStatus,
    Event,
    Run,
    RunStatus,
    ToolSpec,
)
from ._store import Store, Tx


def approval_request(run_id: str, step_id: str, spec: ToolSpec, args: JSON) -> dict[str, Any]:
    """The request an approval is bound to, in the shape that is hashed."""
    return {
        "run_id": run_id,
        "step_id": step_id,
        "spec": spec.to_json(),
        "args": {} if args is None else args,
    }


def approval_hash(kind: str, capability: JSON, presentation: JSON, request: JSON) -> str:
    """The SHA-256 (hex) of an approval's canonical JSON.

    It covers the approval's kind, capability, presentation and request.
    """
    return content_hash(
        {
            "kind": kind,
            "capability": {} if capability is None else capability,
            "presentation": {} if presentation is None else presentation,
            "request": request,
        }
    )


def verify_stored(approval: Approval) -> None:
    """Raise `ApprovalHashError` unless the stored fields still hash to the stored hash."""
    if approval.decode_error:
        raise ApprovalHashError(
            f"approval {approval.id} cannot be read back ({approval.decode_error}); "
            "it will not be decided or executed"
        )
    try:
        recomputed = approval_hash(
            approval.kind, approval.capability, approval.presentation, approval.request
        )
    except ValueError as exc:
        raise ApprovalHashError(f"approval {approval.id} cannot be hashed: {exc}") from exc
    if recomputed != approval.hash:
        raise ApprovalHashError(
            f"approval {approval.id} no longer matches its hash: the stored request, kind, "
            "capability or presentation was altered after it was made"
        )


DECIDED_NOTE_SHOWN = 200
"""Characters of a decision's note that a refusal quotes."""


def decided_words(approval: Approval) -> str:
    """Who decided an approval, how and when: `approved by ann at 2026-...Z (note: "fine")`.

    The note is a JSON literal (its line breaks escaped), its first 200 characters;
    the caller sanitizes the whole text before it is shown.
    """
    by = approval.decided_by or "someone unrecorded"
    when = format_time(approval.decided_at) if approval.decided_at else "an unrecorded time"
    note = ""
    if approval.note:
        cut = approval.note[:DECIDED_NOTE_SHOWN]
        more = "…" if len(approval.note) > DECIDED_NOTE_SHOWN else ""
        note = f" (note: {json.dumps(cut, ensure_ascii=False)}{more})"
    return f"{approval.status} by {by} at {when}{note}"


def expired_words(approval: Approval) -> str:
    """Why an expired approval can no longer be decided, for the refusal of a decision.

    A cancel expires its run's pending approvals and records who cancelled
    (`decided_by`): the refusal says the run was cancelled, by whom and when, not
    merely that the approval expired, which reads as its time having run out.
    """
    # Only a cancel records when (and who, if it was given a name) with an expiry: a lapse
    # sets the status alone. A cancel with no name (`by=""`) is still a cancel.
    if approval.decided_by or approval.decided_at is not None:
        when = format_time(approval.decided_at) if approval.decided_at else "an unrecorded time"
        by = f" by {approval.decided_by}" if approval.decided_by else ""
        return (
            f"approval {approval.id} can no longer be decided: its run was cancelled{by} at {when}"
        )
    if approval.expires_at is not None:
        return f"approval {approval.id} expired at {format_time(approval.expires_at)}"
    return f"approval {approval.id} has expired"


def expired_error(approval: Approval) -> ApprovalExpiredError:
    """The refusal of a decision on an expired approval: `expired_words`, and who
    cancelled its run (`cancelled_by`) when a cancel expired it."""
    error = ApprovalExpiredError(f"{expired_words(approval)}; nothing was decided")
    error.cancelled_by = approval.decided_by
    return error


def _load(tx: Tx, run_id: str, approval_id: str) -> tuple[Run, Approval]:
    guarded = tx.lock_run(run_id)
    if guarded is None:
        raise NotFoundError(f"no run {run_id}")
    approval = tx.approval_of_run(approval_id, run_id)
    if approval is None:
        raise NotFoundError(f"no approval {approval_id} on run {run_id}")
    return guarded.run, approval


def decide(
    store: Store,
    run_id: str,
    approval_id: str,
    *,
    approve: bool,
    by: str,
    note: str,
    shown_hash: str | None,
    now: datetime,
) -> tuple[Approval, list[Event]]:
    """Approve or reject one pending approval in one transaction; returns it and the events."""
    with store.transaction() as tx:
        run, approval = _load(tx, run_id, approval_id)
        if approval.status == ApprovalStatus.EXPIRED:
            raise expired_error(approval)
        if approval.status != ApprovalStatus.PENDING:
            raise NotPendingError(f"approval {approval_id} was already {decided_words(approval)}")
        if isinstance(run.status, RunStatus) and run.status.terminal:
            raise RunFinishedError(f"run {run_id} already ended {run.status}; nothing is decided")
        if run.status != RunStatus.WAITING_FOR_APPROVAL:
            raise RunStateError(f"run {run_id} is {run.status}, not waiting for an approval")
        verify_stored(approval)
        if shown_hash is not None and shown_hash != approval.hash:
            raise ApprovalChangedError(
                f"approval {approval_id} changed since it was shown: shown hash {shown_hash}, "
                f"current hash {approval.hash}"
            )
        if approval.expires_at is not None and now >= approval.expires_at:
            raise ApprovalExpiredError(
                f"approval {approval_id} expired at {format_time(approval.expires_at)}"
            )
        if approve:
            try:
                decided = tx.decide_approval(approval, ApprovalStatus.APPROVED, by, note, now)
            except RunStateError as exc:
                raise ApprovalChangedError(
                    f"approval {approval_id} changed while being decided"
                ) from exc
        else:
            decided, _ = tx.reject_approval(approval, by, note, now)
        return decided, list(tx.events)
