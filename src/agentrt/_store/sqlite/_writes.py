"""The named compare-and-set writes: every state change of a run, a step or an approval.

Every statement here is a compare-and-set: it names the statuses it may leave
(`AND status IN (...)`) and raises `RunStateError` when no row matched, so a
concurrent writer (an operator's cancel, another resume) is never overwritten.
Each write appends its audit events in the same transaction, and no event is
appended anywhere else (decision 0036).

Each returns the records as written, which the step machine keeps as its
in-memory copy (decision 0011): the hot writes of a step (`record_decision`,
`start_tool`, `finish_tool`) build them from the caller's copy and the values
they wrote, decoded as a reader would; a run's update returns its row
(`RETURNING *`); the rarer transitions read their rows back.

The step machine names its transitions (the end of this file): `end_run`,
`fail_at_limit`, `end_with_step`, `end_waiting` (the one way a run ends from
waiting, used by a resume's policy, `expire_waiting` and `reject_approval`),
`leave_waiting`, `fail_and_go_on`, `take_over`, `go_on_after_interruption`,
`record_late_outcome`; the row-level writes above them (`fail_step`,
`finish_run`, `close_step`, `record_policy`) are their parts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ... import _events as ev
from ..._canonical import from_text, to_text
from ..._clock import as_stored, format_time
from ..._errors import ApprovalChangedError, LeaseLostError, RunStateError
from ..._model import Usage
from ..._records import (
    JSON,
    Approval,
    ApprovalStatus,
    Decision,
    Limits,
    ModelCallStatus,
    Observation,
    PolicyDecision,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
    ToolSpec,
    evolve,
)
from .._records import (
    Leased,
    LeaseState,
    Paused,
    Settled,
    TakenOver,
    ToolStart,
    WrittenObservation,
)
from ._codecs import clamp_charge, run_from_row, saturating_add_sql
from ._connection import check_schema
from ._migrations import rollback_quietly
from ._reads import TxReads, reason_key
from ._tx import TxCore

IN_FLIGHT = ("deciding", "executing", "awaiting_approval")


_RENEW_SQL = "UPDATE runs SET lease_expires_at = ? WHERE id = ? AND lease_owner = ?"


def renew_lease(
    tx: TxCore | sqlite3.Connection, run_id: str, owner: str, expires_at: datetime
) -> bool:
    """Push the lease's expiry out, if `owner` still holds it; False when it does not."""
    return bool(tx.execute(_RENEW_SQL, (format_time(expires_at), run_id, owner)).rowcount == 1)


_NAMED_SQL = "SELECT 1 FROM runs WHERE id = ? AND lease_owner = ? AND lease_epoch = ?"


def lease_named(conn: sqlite3.Connection, run_id: str, owner: str, epoch: int) -> bool:
    """Whether the run's lease still names `owner` at `epoch` (expired or not): one read on
    the heartbeat's connection, outside any transaction; nothing written (decision 0225)."""
    return conn.execute(_NAMED_SQL, (run_id, owner, epoch)).fetchone() is not None


def renew_lease_alone(
    conn: sqlite3.Connection,
    safe_schema: int | None,
    run_id: str,
    owner: str,
    expires_at: datetime,
    *,
    may_commit: Callable[[], bool] | None = None,
) -> tuple[bool, int | None]:
    """`renew_lease` in a transaction of its own on `conn` (the heartbeat's connection).

    Like every store transaction it re-checks the schema first: a trigger added
    since the last renewal must not fire on this write (`UnsafeSchemaError`,
    nothing written). `may_commit` false just before the COMMIT (the file was deleted
    or replaced) rolls back: nothing written, not renewed. Returns whether the lease
    was renewed and the schema version now known safe.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        safe_schema = check_schema(conn, safe_schema)
        renewed = renew_lease(conn, run_id, owner, expires_at)
        if may_commit is not None and not may_commit():
            rollback_quietly(conn)
            return False, safe_schema
        conn.execute("COMMIT")
    except BaseException:
        rollback_quietly(conn)
        raise
    return renewed, safe_schema


# --- the named transitions of the step machine ---------------------------------------
#
# Each is one state change of a run as the step machine names it, with the row
# compare-and-sets and the audit events it is made of, in the caller's transaction;
# each returns the records as written, which are the session's in-memory copy.


class SqliteTx(TxReads):
    """One write transaction of the SQLite store: every named compare-and-set write and read.

    Handed out by `SqliteStore.transaction()`; valid only inside its block.
    """

    def fail_step(
        self,
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
        cur = self.execute(
            f"UPDATE steps SET status = ?, observation_json = ?, observation_hash = ?, "
            f"finished_at = ? WHERE id = ? AND run_id = ? AND status IN ({placeholders})",
            (
                str(status),
                self.stored(to_text(observation.to_json())),
                observation.content_hash,
                format_time(now),
                step_id,
                run_id,
                *[str(s) for s in from_statuses],
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} is no longer in {list(map(str, from_statuses))}")
        self.append_event(run_id, step_id, now, ev.STEP_FAILED, ev.observation_payload(observation))

    def finish_run(
        self,
        run_id: str,
        status: str,
        reason: str,
        detail: str,
        now: datetime,
        *,
        from_statuses: tuple[str, ...],
        result: JSON = None,
        active_ms_add: int = 0,
    ) -> Run:
        """End a run: status, reason, result and a cleared lease, then `run.finished`.

        The row-level step of every ending below; returns the run as written."""
        placeholders = ",".join("?" for _ in from_statuses)
        cur = self.execute(
            f"UPDATE runs SET status = ?, reason = ?, reason_detail = ?, finished_at = ?, "
            f"result_json = ?, active_ms = active_ms + ?, "
            f"lease_owner = '', lease_expires_at = '', lease_holder = '' "
            f"WHERE id = ? AND status IN ({placeholders})",
            (
                str(status),
                str(reason),
                detail,
                format_time(now),
                "" if result is None else self.stored(to_text(result)),
                max(0, active_ms_add),
                run_id,
                *[str(s) for s in from_statuses],
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"run {run_id} moved before it could be finished")
        # An attempt whose outcome was never recorded is charged before the run closes.
        self.charge_dispatched(run_id, now)
        row = self.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        self.append_event(
            run_id,
            "",
            now,
            ev.RUN_FINISHED,
            {
                "status": str(status),
                "reason": str(reason),
                "detail": detail,
                "steps": row["step_count"],
            },
        )
        return run_from_row(row)

    def charge_run(self, run_id: str, usage: Usage, cost_micros: int) -> Run:
        """Add usage and cost to the run's totals, saturating at 2^63-1, never negative;
        the run as written."""
        rows = self.execute(
            "UPDATE runs SET "
            f"input_tokens = {saturating_add_sql('input_tokens', ':input')}, "
            f"output_tokens = {saturating_add_sql('output_tokens', ':output')}, "
            f"cached_input_tokens = {saturating_add_sql('cached_input_tokens', ':cached')}, "
            f"estimated_cost_micros = {saturating_add_sql('estimated_cost_micros', ':cost')} "
            "WHERE id = :id RETURNING *",
            {
                "input": clamp_charge(usage.input_tokens),
                "output": clamp_charge(usage.output_tokens),
                "cached": clamp_charge(usage.cached_input_tokens),
                "cost": clamp_charge(cost_micros),
                "id": run_id,
            },
        ).fetchall()
        if len(rows) != 1:
            raise RunStateError(f"run {run_id} disappeared before it could be charged")
        return run_from_row(rows[0])

    def charge_dispatched(self, run_id: str, now: datetime) -> None:
        """Charge every attempt still `dispatched` at the estimate it reserved.

        A process that died during a model request (or a settle that never
        committed) leaves its attempt `dispatched`. The takeover, a cancel and every
        other ending of the run charge it here, in their own transaction, so spend
        can never vanish from the totals.
        """
        rows = self.execute(
            "SELECT id, step_id, attempt, model, input_tokens, output_tokens, cost_micros, "
            "dispatched_at FROM model_calls WHERE run_id = ? AND status = 'dispatched' "
            "ORDER BY rowid",
            (run_id,),
        ).fetchall()
        for row in rows:
            usage = Usage(input_tokens=row["input_tokens"], output_tokens=row["output_tokens"])
            error = "its outcome was never recorded; charged at the conservative estimate"
            self.execute(
                "UPDATE model_calls SET status = 'ambiguous', error = ?, completed_at = ? "
                "WHERE id = ? AND status = 'dispatched'",
                (error, format_time(now), row["id"]),
            )
            self.charge_run(run_id, usage, row["cost_micros"])
            self.append_event(
                run_id,
                row["step_id"],
                now,
                ev.MODEL_FAILED,
                {
                    "call_id": row["id"],
                    "attempt": row["attempt"],
                    "status": "ambiguous",
                    "model": row["model"],
                    "usage": usage.to_json(),
                    "cost_micros": row["cost_micros"],
                    "latency_ms": 0,
                    "error": error,
                },
            )

    def decide_approval(
        self, approval: Approval, status: ApprovalStatus, by: str, note: str, now: datetime
    ) -> Approval:
        """Approve or reject a pending approval still bearing its hash; `approval.decided`.

        Raises `RunStateError` when the row is no longer pending with that hash.
        """
        cur = self.execute(
            "UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, note = ? "
            "WHERE id = ? AND status = 'pending' AND hash = ?",
            (str(status), format_time(now), by, note, approval.id, approval.hash),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"approval {approval.id} changed while being decided")
        self.append_event(
            approval.run_id,
            approval.step_id,
            now,
            ev.APPROVAL_DECIDED,
            {"approval_id": approval.id, "status": str(status), "by": by, "note": note},
        )
        return self.approval_record(approval.id)

    def cancel_run(self, run_id: str, by: str, note: str, now: datetime) -> Run:
        """Cancel a live run: its in-flight steps fail, its pending approvals expire, it ends.

        The caller has checked that the run is live (RUNNING or WAITING_FOR_APPROVAL).
        """
        observation = Observation.cancelled(by, note)
        for step_id, status in self.steps_in(run_id, IN_FLIGHT):
            self.fail_step(run_id, step_id, observation, now, from_statuses=(status,))
        # Pending approvals of a cancelled run can never be acted on.
        self.execute(
            "UPDATE approvals SET status = 'expired', decided_at = ?, decided_by = ?, "
            "note = ? WHERE run_id = ? AND status = 'pending'",
            (format_time(now), by, "the run was cancelled", run_id),
        )
        self.finish_run(
            run_id,
            RunStatus.CANCELLED,
            TerminalReason.OPERATOR_CANCELLED,
            note,
            now,
            from_statuses=(RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL),
        )
        return self.run_record(run_id)

    def create_run(
        self,
        run_id: str,
        goal: str,
        limits: Limits,
        *,
        owner: str,
        lease_expires_at: datetime,
        holder: str,
        specs: Sequence[tuple[str, ToolSpec]],
        now: datetime,
        origin: str = "gate",
    ) -> Run:
        """A new RUNNING run leased to `owner` at epoch 1, its tool specs kept by hash.

        `origin` records which kind of program began it (docs/decisions/0049).

        Appends `run.created` and `run.started`; `RunStateError` if the id is taken.
        """
        if self.run_exists(run_id):
            raise RunStateError(f"run {run_id} already exists; start refuses to reuse an id")
        at = format_time(now)
        self.execute(
            "INSERT INTO runs (id, goal, status, limits_json, created_at, started_at, "
            "lease_owner, lease_expires_at, lease_epoch, lease_holder, origin) "
            "VALUES (?, ?, 'RUNNING', ?, ?, ?, ?, ?, 1, ?, ?)",
            (
                run_id,
                goal,
                to_text(limits.to_json()),
                at,
                at,
                owner,
                format_time(lease_expires_at),
                holder,
                origin,
            ),
        )
        for spec_hash, spec in specs:
            self.execute(
                "INSERT OR IGNORE INTO tool_specs (hash, spec_json) VALUES (?, ?)",
                (spec_hash, to_text(spec.to_json())),
            )
        self.append_event(
            run_id,
            "",
            now,
            ev.RUN_CREATED,
            {"goal": goal, "limits": limits.to_json(), "tools": [h for h, _ in specs]},
        )
        self.append_event(run_id, "", now, ev.RUN_STARTED, {})
        return self.run_record(run_id)

    def take_lease(
        self,
        run_id: str,
        owner: str,
        expires_at: datetime,
        holder: str,
        *,
        from_status: str,
        previous: LeaseState | None = None,
    ) -> int:
        """Move the run to RUNNING under a new lease, compare-and-set; return the new epoch.

        With `previous` the update also requires the lease to be
        exactly the one the caller judged expired. `RunStateError` when no row matched.
        """
        sql = (
            "UPDATE runs SET status = 'RUNNING', lease_owner = ?, lease_expires_at = ?, "
            "lease_holder = ?, lease_epoch = lease_epoch + 1 WHERE id = ? AND status = ?"
        )
        params: list[Any] = [owner, format_time(expires_at), holder, run_id, from_status]
        if previous is not None:
            sql += " AND lease_owner = ? AND lease_expires_at = ?"
            params += list(previous.stored)
        cur = self.execute(sql, params)
        if cur.rowcount != 1:
            raise RunStateError(
                f"run {run_id} was taken by another resume or changed status; nothing was executed"
            )
        row = self.execute("SELECT lease_epoch FROM runs WHERE id = ?", (run_id,)).fetchone()
        return int(row[0])

    def dispatch_model_call(
        self,
        run_id: str,
        step_id: str,
        call_id: str,
        attempt: int,
        model: str,
        estimate: Usage,
        estimate_cost_micros: int,
        now: datetime,
    ) -> Run:
        """Record a model attempt as `dispatched` at its estimate, before it is sent.

        Counts it on the run and appends `model.dispatched`; charging waits for the
        settle (or for `charge_dispatched`, when it never comes). Returns the run as
        written.
        """
        self.execute(
            "INSERT INTO model_calls (id, run_id, step_id, attempt, status, model, "
            "input_tokens, output_tokens, cost_micros, dispatched_at) "
            "VALUES (?, ?, ?, ?, 'dispatched', ?, ?, ?, ?, ?)",
            (
                call_id,
                run_id,
                step_id,
                attempt,
                model,
                clamp_charge(estimate.input_tokens),
                clamp_charge(estimate.output_tokens),
                clamp_charge(estimate_cost_micros),
                format_time(now),
            ),
        )
        rows = self.execute(
            f"UPDATE runs SET model_calls = {saturating_add_sql('model_calls', ':one')} "
            "WHERE id = :id RETURNING *",
            {"one": 1, "id": run_id},
        ).fetchall()
        if len(rows) != 1:
            raise RunStateError(f"run {run_id} disappeared before its model call was dispatched")
        self.append_event(
            run_id,
            step_id,
            now,
            ev.MODEL_DISPATCHED,
            {"call_id": call_id, "attempt": attempt, "model": model},
        )
        return run_from_row(rows[0])

    def settle_model_call(
        self,
        run_id: str,
        step_id: str,
        call_id: str,
        attempt: int,
        model: str,
        *,
        status: str,
        usage: Usage,
        cost_micros: int | None,
        latency_ms: int,
        error: str,
        now: datetime,
    ) -> Run | None:
        """Record a still-dispatched attempt's outcome, charge the run, and append its event.

        `cost_micros` is None when the model has no price (the event says so; 0 is charged).

        Returns the run as written; None, writing nothing, when the attempt is no
        longer `dispatched` (a takeover or a cancel charged it at its estimate already).
        """
        cur = self.execute(
            "UPDATE model_calls SET status = ?, input_tokens = ?, output_tokens = ?, "
            "cached_input_tokens = ?, cost_micros = ?, latency_ms = ?, error = ?, "
            "completed_at = ? WHERE id = ? AND status = 'dispatched'",
            (
                status,
                clamp_charge(usage.input_tokens),
                clamp_charge(usage.output_tokens),
                clamp_charge(usage.cached_input_tokens),
                clamp_charge(cost_micros or 0),
                latency_ms,
                error,
                format_time(now),
                call_id,
            ),
        )
        if cur.rowcount != 1:
            return None
        run = self.charge_run(run_id, usage, cost_micros or 0)
        kind = ev.MODEL_COMPLETED if status == ModelCallStatus.OK else ev.MODEL_FAILED
        self.append_event(
            run_id,
            step_id,
            now,
            kind,
            {
                "call_id": call_id,
                "attempt": attempt,
                "status": status,
                "model": model,
                "usage": usage.to_json(),
                "cost_micros": cost_micros,
                "latency_ms": latency_ms,
                "error": error,
            },
        )
        return run

    def charge_beyond_estimate(
        self,
        run_id: str,
        call_id: str,
        attempt: int,
        model: str,
        usage: Usage,
        cost: int,
        now: datetime,
    ) -> None:
        """A late reply to an attempt already charged at its estimate: add only the excess."""
        row = self.execute(
            "SELECT status, input_tokens, output_tokens, cached_input_tokens, cost_micros "
            "FROM model_calls WHERE id = ?",
            (call_id,),
        ).fetchone()
        if row is None or row["status"] != ModelCallStatus.AMBIGUOUS:
            return
        extra = Usage(
            input_tokens=max(0, usage.input_tokens - row["input_tokens"]),
            output_tokens=max(0, usage.output_tokens - row["output_tokens"]),
            cached_input_tokens=max(0, usage.cached_input_tokens - row["cached_input_tokens"]),
        )
        extra_cost = max(0, cost - row["cost_micros"])
        if extra == Usage() and extra_cost == 0:
            return
        self.execute(
            "UPDATE model_calls SET input_tokens = input_tokens + ?, "
            "output_tokens = output_tokens + ?, cached_input_tokens = cached_input_tokens + ?, "
            "cost_micros = cost_micros + ? "
            "WHERE id = ?",
            (
                clamp_charge(extra.input_tokens),
                clamp_charge(extra.output_tokens),
                clamp_charge(extra.cached_input_tokens),
                clamp_charge(extra_cost),
                call_id,
            ),
        )
        self.charge_run(run_id, extra, extra_cost)
        self.append_event(
            run_id,
            "",
            now,
            ev.MODEL_COMPLETED,
            {
                "call_id": call_id,
                "attempt": attempt,
                "status": "late",
                "model": model,
                "usage": extra.to_json(),
                "cost_micros": extra_cost,
                "latency_ms": 0,
                "error": "a late reply cost more than the estimate charged for it",
            },
        )

    # --- one step ---------------------------------------------------------------------

    def claim_step(
        self,
        run_id: str,
        index: int,
        owner: str,
        new_id: Callable[[], str],
        now: datetime,
        *,
        epoch: int,
    ) -> Step:
        """Claim step `index` of a RUNNING run leased to `owner` at `epoch`: `step_count`
        compare-and-set on exactly that lease (decision 0204).

        Inserts the step `deciding` (its id from `new_id`, drawn once the claim
        held), appends `step.started`, and returns the step as written.
        """
        cur = self.execute(
            "UPDATE runs SET step_count = step_count + 1 WHERE id = ? AND status = 'RUNNING' "
            "AND step_count = ? AND lease_owner = ? AND lease_epoch = ?",
            (run_id, index, owner, epoch),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"run {run_id} moved while claiming step {index}")
        step_id = new_id()
        self.execute(
            "INSERT INTO steps (id, run_id, idx, status, started_at) VALUES (?, ?, ?, ?, ?)",
            (step_id, run_id, index, str(StepStatus.DECIDING), format_time(now)),
        )
        self.append_event(run_id, step_id, now, ev.STEP_STARTED, {"index": index})
        return Step(
            id=step_id,
            run_id=run_id,
            index=index,
            status=StepStatus.DECIDING,
            decision=None,
            policy=None,
            observation=None,
            started_at=as_stored(now),
            finished_at=None,
        )

    def claim_next_step(
        self, run: Run, owner: str, new_id: Callable[[], str], now: datetime, *, epoch: int
    ) -> Settled:
        """`claim_step` for the step after `run` (the caller's copy: the claim is a
        compare-and-set on its step count); returns the run and the new step as written,
        the run built from the copy and the count written rather than read back (decision
        0011)."""
        step = self.claim_step(run.id, run.step_count, owner, new_id, now, epoch=epoch)
        return Settled(evolve(run, step_count=run.step_count + 1), step)

    def record_decision(self, step: Step, text: str, decision: Decision, now: datetime) -> Step:
        """Record a deciding step's decision verbatim (`text`), then `step.decided`; returns
        `step` (the caller's copy) as written. `decision` is what `text` reads back as
        (`_decisions.record` makes the two together), so it is not decoded again here,
        and `text` is what encoding it gives: the payload of `step.decided`, written as
        that text rather than encoded again.

        The reason's head (`reads.reason_key`) goes in `reason_key` in the same
        statement: what `steps_with_reasons` finds the step by (docs/decisions/0060)."""
        cur = self.execute(
            "UPDATE steps SET decision_json = ?, "
            "reason_key = ? WHERE id = ? AND status = 'deciding' AND decision_json = ''",
            (
                self.stored(text),
                reason_key(decision.reason) if isinstance(decision.reason, str) else "",
                step.id,
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(
                f"step {step.id} is no longer deciding, or has its decision already"
            )
        self.append_event_text(step.run_id, step.id, now, ev.STEP_DECIDED, text)
        return evolve(step, decision=decision)

    def close_step(
        self, step_id: str, status: str, now: datetime, *, from_statuses: tuple[str, ...]
    ) -> None:
        """Settle a step with no observation (the run ends with it: `complete`, `fail`)."""
        placeholders = ",".join("?" for _ in from_statuses)
        cur = self.execute(
            "UPDATE steps SET status = ?, finished_at = ? "
            f"WHERE id = ? AND status IN ({placeholders})",
            (str(status), format_time(now), step_id, *map(str, from_statuses)),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} moved before the run could end")

    def record_policy(
        self,
        run_id: str,
        step_id: str,
        payload: dict[str, Any],
        now: datetime,
        *,
        from_status: str,
    ) -> None:
        """The step row's policy columns and `step.policy`, written together, compare-and-set
        on the step still being `from_status` (`RunStateError` when it is not)."""
        cur = self.execute(
            "UPDATE steps SET policy_json = ?, spec_hash = ?, policy_id = ? "
            "WHERE id = ? AND status = ?",
            (
                self.stored(to_text(payload["decision"])),
                payload["spec_hash"],
                payload["policy_id"],
                step_id,
                str(from_status),
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} moved before its policy could be recorded")
        self.append_event(run_id, step_id, now, ev.STEP_POLICY, payload)

    def pause_for_approval(
        self,
        run_id: str,
        step_id: str,
        *,
        new_id: Callable[[], str],
        decision: PolicyDecision,
        request: JSON,
        digest: str,
        expires_at: datetime | None,
        payload: dict[str, Any],
        active_ms: int,
        from_step: tuple[str, ...],
        from_run: str,
        now: datetime,
    ) -> Paused:
        """Pause for a person: step `awaiting_approval` with its policy, a pending approval
        bound by `digest` to `request`, the run WAITING with its lease released; then
        `step.policy` and `approval.requested`. Returns the three as written."""
        placeholders = ",".join("?" for _ in from_step)
        cur = self.execute(
            f"UPDATE steps SET status = 'awaiting_approval', policy_json = ?, spec_hash = ?, "
            f"policy_id = ? WHERE id = ? AND status IN ({placeholders})",
            (
                self.stored(to_text(decision.to_json())),
                payload["spec_hash"],
                payload["policy_id"],
                step_id,
                *map(str, from_step),
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} moved before it could pause")
        approval_id = new_id()
        self.execute(
            "INSERT INTO approvals (id, run_id, step_id, kind, capability_json, "
            "presentation_json, request_json, hash, status, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
            (
                approval_id,
                run_id,
                step_id,
                decision.kind,
                self.stored(to_text({} if decision.capability is None else decision.capability)),
                self.stored(
                    to_text({} if decision.presentation is None else decision.presentation)
                ),
                self.stored(to_text(request)),
                digest,
                format_time(now),
                format_time(expires_at),
            ),
        )
        cur = self.execute(
            "UPDATE runs SET status = 'WAITING_FOR_APPROVAL', active_ms = active_ms + ?, "
            "lease_owner = '', lease_expires_at = '', lease_holder = '' "
            "WHERE id = ? AND status = ?",
            (active_ms, run_id, str(from_run)),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"run {run_id} moved before it could pause")
        self.append_event(run_id, step_id, now, ev.STEP_POLICY, payload)
        self.append_event(
            run_id,
            step_id,
            now,
            ev.APPROVAL_REQUESTED,
            {
                "approval_id": approval_id,
                "kind": decision.kind,
                "reason": decision.reason,
                "capability": decision.capability,
                "presentation": decision.presentation,
                "hash": digest,
            },
        )
        return Paused(
            self.run_record(run_id),
            self.step_record(step_id),
            self.approval_record(approval_id),
        )

    def start_tool(
        self,
        step: Step,
        start: ToolStart,
        *,
        from_statuses: tuple[str, ...],
        now: datetime,
    ) -> Step:
        """Step `executing` with its policy; `step.policy`, `step.tool_started`, as `start`
        encoded them (`tool_start`, before the transaction).

        Nothing claims the tool started until this commits. Returns `step` (the
        caller's copy) as written, the policy as a reader would decode it (decision 0011).
        """
        run_id, step_id = step.run_id, step.id
        placeholders = ",".join("?" for _ in from_statuses)
        cur = self.execute(
            f"UPDATE steps SET status = 'executing', policy_json = ?, spec_hash = ?, "
            f"policy_id = ? WHERE id = ? AND status IN ({placeholders})",
            (
                self.stored(start.policy_text),
                start.spec_hash,
                start.policy_id,
                step_id,
                *map(str, from_statuses),
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} moved before its tool could start")
        self.append_event_text(run_id, step_id, now, ev.STEP_POLICY, start.payload_text)
        self.append_event_text(run_id, step_id, now, ev.STEP_TOOL_STARTED, start.started_text)
        return evolve(
            step,
            status=StepStatus.EXECUTING,
            policy=start.policy,
            spec_hash=start.spec_hash,
            policy_id=start.policy_id,
        )

    def finish_tool(
        self,
        step: Step,
        status: str,
        written: WrittenObservation,
        finished: dict[str, Any],
        *,
        failed_event: bool,
        now: datetime,
    ) -> Step:
        """An executing step's outcome: its observation (as `written_observation` encoded
        it, before the transaction), `step.tool_finished` (`finished`) and, when
        `failed_event`, `step.failed`. Returns `step` (the caller's copy) as written, the
        observation as a read of its text gives it."""
        run_id, step_id = step.run_id, step.id
        observation = written.observation
        cur = self.execute(
            "UPDATE steps SET status = ?, observation_json = ?, observation_hash = ?, "
            "finished_at = ? WHERE id = ? AND status = 'executing'",
            (
                str(status),
                self.stored(written.text),
                observation.content_hash,
                format_time(now),
                step_id,
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} is no longer executing")
        self.append_event(run_id, step_id, now, ev.STEP_TOOL_FINISHED, finished)
        if failed_event:
            self.append_event(
                run_id, step_id, now, ev.STEP_FAILED, ev.observation_payload(observation)
            )
        return evolve(step, status=status, observation=written.read, finished_at=as_stored(now))

    def leave_running(self, run_id: str, owner: str, *, epoch: int, active_ms_add: int = 0) -> Run:
        """`owner` gives up the lease it was granted at `epoch` of a run left RUNNING (for a
        later resume), adding active time; `LeaseLostError` (nothing written) when the run
        is not RUNNING under exactly that lease. Returns the run as written."""
        rows = self.execute(
            "UPDATE runs SET active_ms = active_ms + ?, lease_owner = '', "
            "lease_expires_at = '', lease_holder = '' "
            "WHERE id = ? AND status = 'RUNNING' AND lease_owner = ? AND lease_epoch = ? "
            "RETURNING *",
            (active_ms_add, run_id, owner, epoch),
        ).fetchall()
        if len(rows) != 1:
            raise LeaseLostError(
                f"run {run_id} is not running under {owner!r}'s lease granted at epoch {epoch}"
            )
        return run_from_row(rows[0])

    def add_active_time(self, run: Run, owner: str, active_ms: int, *, epoch: int) -> Run:
        """Add a loop's active time to `run` (the caller's copy, as it stands in this
        transaction), RUNNING under the lease `owner` was granted at `epoch`;
        `LeaseLostError` (nothing written) otherwise. Returns the run as written, built
        from the copy rather than read back (decision 0011)."""
        cur = self.execute(
            "UPDATE runs SET active_ms = active_ms + ? "
            "WHERE id = ? AND status = 'RUNNING' AND lease_owner = ? AND lease_epoch = ?",
            (active_ms, run.id, owner, epoch),
        )
        if cur.rowcount != 1:
            raise LeaseLostError(
                f"run {run.id} is not running under {owner!r}'s lease granted at epoch {epoch}"
            )
        return evolve(run, active_time=run.active_time + timedelta(milliseconds=active_ms))

    def release_lease(self, run_id: str, owner: str, *, epoch: int) -> bool:
        """Give up the lease `owner` was granted at `epoch`; False (nothing changed) for any
        other lease: one that lapsed and was taken (by another owner, or by `owner` again at
        a later epoch), or a run that ended, is not an error for a holder letting go
        (decisions 0036, 0187)."""
        cur = self.execute(
            "UPDATE runs SET lease_owner = '', lease_expires_at = '', lease_holder = '' "
            "WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
            (run_id, owner, epoch),
        )
        return bool(cur.rowcount == 1)

    def expire_approval(self, approval_id: str) -> bool:
        """A pending approval expired undecided; False (nothing changed) when it is no
        longer pending."""
        cur = self.execute(
            "UPDATE approvals SET status = 'expired' WHERE id = ? AND status = 'pending'",
            (approval_id,),
        )
        return bool(cur.rowcount == 1)

    def interrupt_step(
        self, run_id: str, step_id: str, previous_status: str, now: datetime
    ) -> Observation:
        """A step found in flight at a takeover: `interrupted`, outcome unknown.

        Appends `step.interrupted`."""
        observation = Observation.interrupted(previous_status)
        cur = self.execute(
            "UPDATE steps SET status = 'interrupted', observation_json = ?, "
            "observation_hash = ?, finished_at = ? WHERE id = ? AND status = ?",
            (
                self.stored(to_text(observation.to_json())),
                observation.content_hash,
                format_time(now),
                step_id,
                previous_status,
            ),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step_id} moved during the takeover")
        self.append_event(run_id, step_id, now, ev.STEP_INTERRUPTED, observation.content)
        return observation

    def end_run(
        self,
        run_id: str,
        status: str,
        reason: str,
        detail: str,
        *,
        result: JSON = None,
        active_ms_add: int = 0,
        now: datetime,
    ) -> Run:
        """End a RUNNING run with no step to settle (a record that will not decode, a
        takeover's verdict, a tool that aborted or completed the run); `run.finished`."""
        return self.finish_run(
            run_id,
            status,
            reason,
            detail,
            now,
            from_statuses=(RunStatus.RUNNING,),
            result=result,
            active_ms_add=active_ms_add,
        )

    def fail_at_limit(
        self,
        run_id: str,
        *,
        reason: str,
        detail: str,
        loop: JSON = None,
        active_ms_add: int,
        now: datetime,
    ) -> Run:
        """A limit was reached before a step: `loop.detected` (with `loop`, the repeated
        call) or `limit.exceeded`, then the RUNNING run ends FAILED with `reason`."""
        if loop is not None:
            self.append_event(run_id, "", now, ev.LOOP_DETECTED, loop)
        else:
            self.append_event(
                run_id, "", now, ev.LIMIT_EXCEEDED, {"reason": reason, "detail": detail}
            )
        return self.end_run(
            run_id, RunStatus.FAILED, reason, detail, active_ms_add=active_ms_add, now=now
        )

    def _end_with_step(
        self,
        run_id: str,
        step_id: str,
        *,
        status: str,
        reason: str,
        detail: str,
        step_status: str,
        observation: Observation | None,
        policy: dict[str, Any] | None,
        result: JSON,
        from_step: str,
        from_run: str,
        active_ms_add: int,
        now: datetime,
    ) -> Settled:
        if policy is not None:
            self.record_policy(run_id, step_id, policy, now, from_status=from_step)
        if observation is not None:
            self.fail_step(
                run_id, step_id, observation, now, from_statuses=(from_step,), status=step_status
            )
        else:
            self.close_step(step_id, step_status, now, from_statuses=(from_step,))
        run = self.finish_run(
            run_id,
            status,
            reason,
            detail,
            now,
            from_statuses=(from_run,),
            result=result,
            active_ms_add=active_ms_add,
        )
        return Settled(run, self.step_record(step_id))

    def end_with_step(
        self,
        run_id: str,
        step_id: str,
        *,
        status: str,
        reason: str,
        detail: str,
        step_status: str = StepStatus.FAILED,
        observation: Observation | None = None,
        policy: dict[str, Any] | None = None,
        result: JSON = None,
        active_ms_add: int = 0,
        from_step: str = StepStatus.DECIDING,
        now: datetime,
    ) -> Settled:
        """End a RUNNING run with its step, in one transaction: the step's policy
        (`step.policy`, when given), the step `step_status` (with `observation` and
        `step.failed`, or closed without one), the run `status` (`run.finished`). The step
        is `deciding`, or (`from_step`) `interrupted` at a takeover whose call is judged
        again (decision 0135)."""
        return self._end_with_step(
            run_id,
            step_id,
            status=status,
            reason=reason,
            detail=detail,
            step_status=step_status,
            observation=observation,
            policy=policy,
            result=result,
            from_step=from_step,
            from_run=RunStatus.RUNNING,
            active_ms_add=active_ms_add,
            now=now,
        )

    def end_waiting(
        self,
        run_id: str,
        step_id: str,
        observation: Observation,
        *,
        status: str,
        reason: str,
        detail: str,
        policy: dict[str, Any] | None = None,
        expire: str = "",
        now: datetime,
    ) -> Settled:
        """End a WAITING run: its step awaiting approval fails with `observation`
        (`step.policy` first when given, then `step.failed`), the run ends `status`
        (`run.finished`). The one way a run ends from waiting: a policy that aborts or
        fails at a resume, an approval or grant that expired, a rejection, a record that
        will not decode. `expire` names the step's approval, expired if still pending (a
        run that ended can never have it decided)."""
        if expire:
            self.expire_approval(expire)
        return self._end_with_step(
            run_id,
            step_id,
            status=status,
            reason=reason,
            detail=detail,
            step_status=StepStatus.FAILED,
            observation=observation,
            policy=policy,
            result=None,
            from_step=StepStatus.AWAITING_APPROVAL,
            from_run=RunStatus.WAITING_FOR_APPROVAL,
            active_ms_add=0,
            now=now,
        )

    def expire_waiting(
        self, run_id: str, step_id: str, approval: Approval, *, tool: str, why: str, now: datetime
    ) -> tuple[Settled, Approval]:
        """Cancel a WAITING run `approval_expired`: `approval` (the step's latest) expires
        if still pending, the step fails denied with `why`, the run ends. Returns the run
        and step, and the approval, as written."""
        if approval.status == ApprovalStatus.PENDING and not self.expire_approval(approval.id):
            raise RunStateError(f"approval {approval.id} was decided before it could expire")
        settled = self.end_waiting(
            run_id,
            step_id,
            Observation.denied(tool, why),
            status=RunStatus.CANCELLED,
            reason=TerminalReason.APPROVAL_EXPIRED,
            detail=why,
            now=now,
        )
        return settled, self.approval_record(approval.id)

    def reject_approval(
        self, approval: Approval, by: str, note: str, now: datetime
    ) -> tuple[Approval, Run]:
        """A person rejects a pending approval still bearing its hash: `approval.decided`,
        the step fails `policy_denied` (`Observation.rejected`), the run is cancelled
        `approval_rejected`. `ApprovalChangedError` (nothing written) when the approval
        is no longer pending with that hash. Returns the approval and the run as written."""
        try:
            decided = self.decide_approval(approval, ApprovalStatus.REJECTED, by, note, now)
        except RunStateError as exc:
            raise ApprovalChangedError(
                f"approval {approval.id} changed while being decided"
            ) from exc
        request = approval.request
        tool = request.get("spec", {}).get("name", "") if isinstance(request, dict) else ""
        settled = self.end_waiting(
            approval.run_id,
            approval.step_id,
            Observation.rejected(tool, note),
            status=RunStatus.CANCELLED,
            reason=TerminalReason.APPROVAL_REJECTED,
            detail=note,
            now=now,
        )
        return decided, settled.run

    def leave_waiting(
        self,
        run_id: str,
        approval_id: str,
        *,
        owner: str,
        epoch: int,
        expires_at: datetime,
        holder: str,
        now: datetime,
    ) -> Leased:
        """Take a WAITING run that `owner` holds at `epoch` (`hold_waiting`'s) back to
        RUNNING under that lease, renewed (compare-and-set on the status and exactly that
        hold: of two resumes exactly one leaves; a hold of the same owner granted since is
        another session's, decision 0204), then `run.resumed` naming the approval that
        allowed it. The caller then starts the tool or fails the step."""
        cur = self.execute(
            "UPDATE runs SET status = 'RUNNING', lease_expires_at = ?, lease_holder = ? "
            "WHERE id = ? AND status = 'WAITING_FOR_APPROVAL' AND lease_owner = ? "
            "AND lease_epoch = ?",
            (format_time(expires_at), holder, run_id, owner, epoch),
        )
        if cur.rowcount != 1:
            raise RunStateError(
                f"run {run_id} was taken by another resume or changed status; nothing was executed"
            )
        self.append_event(run_id, "", now, ev.RUN_RESUMED, {"approval_id": approval_id})
        return Leased(self.run_record(run_id), epoch)

    def hold_waiting(
        self,
        run_id: str,
        *,
        owner: str,
        expires_at: datetime,
        holder: str,
        previous: LeaseState,
    ) -> Leased:
        """`owner` holds the lease of a WAITING run it is attaching (decisions 0032, 0204): a
        compare-and-set on the status and on exactly the lease the caller judged free
        (none, expired, its own, or a dead holder's), so of two attaches one holds it and
        the other is refused. The hold is a lease of its own, at the next epoch (two holds
        of one owner are told apart by it, as its release is, decision 0187); the run stays
        WAITING, and no event is appended: nothing about the run has changed until
        `leave_waiting`. `RunStateError` when no row matched. Returns the run as written
        and the hold's epoch."""
        cur = self.execute(
            "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, lease_holder = ?, "
            "lease_epoch = lease_epoch + 1 "
            "WHERE id = ? AND status = 'WAITING_FOR_APPROVAL' "
            "AND lease_owner = ? AND lease_expires_at = ? AND lease_epoch = ?",
            (owner, format_time(expires_at), holder, run_id, *previous.stored, previous.epoch),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"run {run_id} was attached elsewhere or changed status")
        return Leased(self.run_record(run_id), previous.epoch + 1)

    def fail_and_go_on(
        self,
        run_id: str,
        step_id: str,
        observation: Observation,
        *,
        policy: dict[str, Any] | None = None,
        from_step: str,
        now: datetime,
    ) -> Step:
        """The step fails and the run goes on: `step.policy` (when the policy judged it),
        then the step `failed` from `from_step` with `observation` and `step.failed`.
        Returns the step as written."""
        if policy is not None:
            self.record_policy(run_id, step_id, policy, now, from_status=from_step)
        self.fail_step(run_id, step_id, observation, now, from_statuses=(from_step,))
        return self.step_record(step_id)

    def take_over(
        self,
        run_id: str,
        *,
        owner: str,
        expires_at: datetime,
        holder: str,
        previous: LeaseState,
        proof: dict[str, Any],
        now: datetime,
    ) -> TakenOver:
        """Take a RUNNING run whose owner is gone: the lease (compare-and-set on exactly the
        lease judged gone; epoch + 1), `lease.taken_over` with `proof` (when there was an
        owner), unsettled model attempts charged, in-flight steps `interrupted`."""
        epoch = self.take_lease(
            run_id,
            owner,
            expires_at,
            holder,
            from_status=RunStatus.RUNNING,
            previous=previous,
        )
        if previous.owner:
            self.append_event(
                run_id,
                "",
                now,
                ev.LEASE_TAKEN_OVER,
                {
                    "previous_owner": previous.owner,
                    "previous_expires_at": previous.shown_expiry(),
                    "owner": owner,
                    "epoch": epoch,
                    "proof": proof,
                },
            )
        self.charge_dispatched(run_id, now)
        interrupted = []
        for step_id, status in self.steps_in(run_id, (StepStatus.DECIDING, StepStatus.EXECUTING)):
            self.interrupt_step(run_id, step_id, status, now)
            interrupted.append(self.step_record(step_id))
        return TakenOver(self.run_record(run_id), epoch, tuple(interrupted))

    def go_on_after_interruption(
        self, run_id: str, payload: dict[str, Any], now: datetime
    ) -> dict[str, Any]:
        """A taken-over run goes on (nothing was executing, a read-only call, or a
        consumer's `reconcile` said so): `run.resumed` with `payload`; no row changes.
        Returns the event's payload as appended."""
        resumed = {"after": "interruption", **payload}
        self.append_event(run_id, "", now, ev.RUN_RESUMED, resumed)
        return resumed

    def record_reconciled(
        self, run_id: str, step_id: str, payload: dict[str, Any], now: datetime
    ) -> None:
        """A tool's reconciliation answered about its interrupted step: `step.reconciled`
        (`payload` names the decider and the answer); no row changes (decision 0067)."""
        self.append_event(run_id, step_id, now, ev.STEP_RECONCILED, payload)

    def complete_reconciled(
        self, step: Step, observation: Observation, payload: dict[str, Any], now: datetime
    ) -> Step:
        """An interrupted step whose tool's reconciliation found the effect: `done` with the
        recovered result as its observation; `step.reconciled` (`payload`). Returns `step`
        (the caller's copy) as written (decision 0067)."""
        observation_text = to_text(observation.to_json())
        cur = self.execute(
            "UPDATE steps SET status = 'done', observation_json = ?, observation_hash = ?, "
            "finished_at = ? WHERE id = ? AND status = 'interrupted'",
            (self.stored(observation_text), observation.content_hash, format_time(now), step.id),
        )
        if cur.rowcount != 1:
            raise RunStateError(f"step {step.id} is no longer interrupted")
        self.append_event(step.run_id, step.id, now, ev.STEP_RECONCILED, payload)
        return replace(
            step,
            status=StepStatus.DONE,
            observation=Observation.from_json(from_text(observation_text)),
            finished_at=as_stored(now),
        )

    def record_late_outcome(
        self, run_id: str, step_id: str, finished: dict[str, Any], now: datetime
    ) -> Settled:
        """A tool finished after an operator cancelled its run (under the lease the cancel
        ended): `step.tool_finished` marked `late`, changing no row. Returns the run and
        step as they stand."""
        self.append_event(run_id, step_id, now, ev.STEP_TOOL_FINISHED, {**finished, "late": True})
        return Settled(self.run_record(run_id), self.step_record(step_id))
