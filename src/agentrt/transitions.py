"""The guarded writes that move steps and runs between statuses.

Every statement here is a compare-and-set: it names the statuses it may leave
(`AND status IN (...)`) and raises `RunStateError` when no row matched, so a
concurrent writer (an operator's cancel, another resume) is never overwritten.
Each write appends its audit event in the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from . import events as ev
from .canonical import to_text
from .clock import format_time
from .errors import RunStateError
from .records import JSON, Observation, StepStatus
from .store import Tx


def fail_step(
    tx: Tx,
    run_id: str,
    step_id: str,
    observation: Observation,
    now: datetime,
    *,
    from_statuses: tuple[str, ...],
    status: str = StepStatus.FAILED,
) -> None:
    """Move one step to `failed` (or `interrupted`) with its observation and `step.failed`."""
    placeholders = ",".join("?" for _ in from_statuses)
    cur = tx.execute(
        f"UPDATE steps SET status = ?, observation_json = ?, observation_hash = ?, "
        f"finished_at = ? WHERE id = ? AND run_id = ? AND status IN ({placeholders})",
        (
            str(status),
            to_text(observation.to_json()),
            observation.content_hash,
            format_time(now),
            step_id,
            run_id,
            *[str(s) for s in from_statuses],
        ),
    )
    if cur.rowcount != 1:
        raise RunStateError(f"step {step_id} is no longer in {list(map(str, from_statuses))}")
    tx.append_event(run_id, step_id, now, ev.STEP_FAILED, ev.observation_payload(observation))


def finish_run(
    tx: Tx,
    run_id: str,
    status: str,
    reason: str,
    detail: str,
    now: datetime,
    *,
    from_statuses: tuple[str, ...],
    result: JSON = None,
    active_ms_add: int = 0,
) -> None:
    """End a run: status, reason, result and a cleared lease, then `run.finished`."""
    placeholders = ",".join("?" for _ in from_statuses)
    cur = tx.execute(
        f"UPDATE runs SET status = ?, reason = ?, reason_detail = ?, finished_at = ?, "
        f"result_json = ?, active_ms = active_ms + ?, "
        f"lease_owner = '', lease_expires_at = '', lease_holder = '' "
        f"WHERE id = ? AND status IN ({placeholders})",
        (
            str(status),
            str(reason),
            detail,
            format_time(now),
            "" if result is None else to_text(result),
            max(0, active_ms_add),
            run_id,
            *[str(s) for s in from_statuses],
        ),
    )
    if cur.rowcount != 1:
        raise RunStateError(f"run {run_id} moved before it could be finished")
    steps = tx.execute("SELECT step_count FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    tx.append_event(
        run_id,
        "",
        now,
        ev.RUN_FINISHED,
        {"status": str(status), "reason": str(reason), "detail": detail, "steps": steps},
    )
