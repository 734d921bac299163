"""Resuming a WAITING run after a person decided.

Only the step's latest approval counts. Pending → refused (nothing changes,
however often); expired by `approval_ttl` → the run is cancelled
`approval_expired`; approved → its stored fields are re-verified against the
hash, the request is rebuilt from the tool as registered *now* (a tool gone or
args failing the current schema fail the step `invalid_decision`), a grant
older than `grant_ttl` cancels the run, and the policy is asked again while the
run still waits; its answer is settled by `_settle.settle` from the waiting
state: the call executes only on `allow` or on a `require_approval` the grant
satisfies, otherwise the run pauses again. Leaving WAITING (`run.resumed`,
`step.policy`, `step.tool_started`) is one compare-and-set transaction, so of
two concurrent resumes exactly one executes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ._session import (
    LoopConfig,
    RunSession,
)
from ._settle import FromWaiting, fail_and_go_on, require_latest, settle
from ._store import writes
from ._store.writes import fail_step, finish_run
from .approval import verify_stored
from .decisions import call_args
from .errors import RunStateError
from .records import (
    Approval,
    ApprovalStatus,
    Observation,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
)
from .store import Tx


class Undecodable(Exception):
    """The WAITING run's record will not decode: the driver fails it, never continues it."""


async def resume_waiting(
    config: LoopConfig, run: Run, steps: Sequence[Step], approvals: Sequence[Approval]
) -> RunSession:
    """Settle a WAITING run's latest approval. The session's run says what became of it."""
    now = config.clock()
    session = RunSession(config, run, steps, approvals, epoch=0, mark=now)
    if not steps or steps[-1].status != StepStatus.AWAITING_APPROVAL:
        raise RunStateError(f"run {run.id} is waiting but has no step awaiting approval")
    step = steps[-1]
    if run.decode_error or step.decode_error:
        raise Undecodable(run.decode_error or step.decode_error)
    mine = [a for a in approvals if a.step_id == step.id]
    if not mine:
        raise RunStateError(f"run {run.id} is waiting but step {step.id} has no approval")
    latest = mine[-1]
    if latest.status == ApprovalStatus.PENDING:
        if latest.expires_at is not None and now >= latest.expires_at:
            await _expire(session, step, latest, now, "approval expired before it was decided")
            return session
        raise RunStateError(
            f"run {run.id} is waiting for approval {latest.id}, which is still pending"
        )
    if latest.status != ApprovalStatus.APPROVED:
        raise RunStateError(f"the latest approval {latest.id} of run {run.id} is {latest.status}")
    verify_stored(latest)
    grant_ttl = run.limits.grant_ttl
    if (
        grant_ttl is not None
        and latest.decided_at is not None
        and now >= latest.decided_at + grant_ttl
    ):
        await _expire(session, step, latest, now, "the grant expired before the run resumed")
        return session
    decision = step.decision
    tool = decision.tool if decision is not None else ""
    spec = config.specs.get(tool)
    args = call_args(decision) if decision is not None else {}
    if spec is None:
        await fail_and_go_on(
            session,
            FromWaiting(latest, now),
            step,
            Observation.invalid_decision(
                f"tool {tool!r} is no longer registered; nothing was executed"
            ),
            None,
        )
        return session
    errors = config.compiled[tool].check(args)
    if errors:
        await fail_and_go_on(
            session,
            FromWaiting(latest, now),
            step,
            Observation.invalid_decision(
                f"args no longer match the current input schema of {tool!r}: " + "; ".join(errors)
            ),
            None,
        )
        return session
    check = await session.ask_policy(step, spec, args)
    await settle(session, FromWaiting(latest, now), step, spec, args, check)
    return session


async def _expire(
    session: RunSession, step: Step, approval: Approval, now: datetime, why: str
) -> None:
    def tx_expire(tx: Tx) -> None:
        require_latest(tx, step.id, approval)
        if approval.status == ApprovalStatus.PENDING:
            writes.expire_approval(tx, approval.id)
        tool = step.decision.tool if step.decision is not None else ""
        fail_step(
            tx,
            session.run_id,
            step.id,
            Observation.denied(tool, why),
            now,
            from_statuses=(StepStatus.AWAITING_APPROVAL,),
        )
        finish_run(
            tx,
            session.run_id,
            RunStatus.CANCELLED,
            TerminalReason.APPROVAL_EXPIRED,
            why,
            now,
            from_statuses=(RunStatus.WAITING_FOR_APPROVAL,),
        )
        session.reload_approvals(tx)
        session.refresh(tx, step.id)

    await session.write(tx_expire)
