"""Resuming a WAITING run after a person decided.

Only the step's latest approval counts. Pending → refused (nothing changes,
however often); expired by `approval_ttl` → the run is cancelled
`approval_expired`; approved → its stored fields are re-verified against the
hash, the request is rebuilt from the tool as registered *now* (a tool gone or
args failing the current schema fail the step `invalid_decision`), a grant
older than `grant_ttl` cancels the run, and the policy is asked again while the
run still waits; its answer is settled by `_settle.settle` from the waiting
state: the call is allowed only on `allow` or on a `require_approval` the grant
satisfies, otherwise the run pauses again. An allowed call writes nothing here:
`execute` judges the grant and leaves WAITING (`run.resumed`, `step.policy`,
`step.tool_started`) in one compare-and-set transaction, so of two concurrent
resumes exactly one executes (`_settle.start_resumed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ._approval import verify_stored
from ._decisions import call_args
from ._errors import RunStateError
from ._records import (
    Approval,
    ApprovalStatus,
    Observation,
    Run,
    Step,
    StepStatus,
)
from ._session import (
    LoopConfig,
    RunSession,
)
from ._settle import GRANT_EXPIRED, FromWaiting, Now, expire_waiting, fail_and_go_on, settle

NO_MARK = datetime(1970, 1, 1, tzinfo=UTC)


class Undecodable(Exception):
    """The WAITING run's record will not decode: the driver fails it, never continues it."""


async def resume_waiting(
    config: LoopConfig, run: Run, steps: Sequence[Step], approvals: Sequence[Approval]
) -> RunSession:
    """Settle a WAITING run's latest approval. The session's run says what became of it.

    The clock is read once, when first needed (`_settle.Now`), which marks the
    start of the resumed run's active segment. An allowed call is held for
    `execute` (`session.allowed_call()`): nothing is written for it here.
    """
    # The mark is set by the first reading of the clock (`Now`), before any use.
    session = RunSession(config, run, steps, approvals, epoch=0, mark=NO_MARK)
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
        now = config.clock()
        session.set_mark(now)
        if latest.expires_at is not None and now >= latest.expires_at:
            await expire_waiting(
                session, step, latest, now, "approval expired before it was decided"
            )
            return session
        raise RunStateError(
            f"run {run.id} is waiting for approval {latest.id}, which is still pending"
        )
    if latest.status != ApprovalStatus.APPROVED:
        raise RunStateError(f"the latest approval {latest.id} of run {run.id} is {latest.status}")
    verify_stored(latest)
    origin = FromWaiting(latest, Now(session))
    decision = step.decision
    tool = decision.tool if decision is not None else ""
    spec = config.specs.get(tool)
    args = call_args(decision) if decision is not None else {}
    unusable = None
    if spec is None:
        unusable = f"tool {tool!r} is no longer registered; nothing was executed"
    else:
        errors = config.compiled[tool].check(args)
        if errors:
            unusable = f"args no longer match the current input schema of {tool!r}: " + "; ".join(
                errors
            )
    if unusable is not None or spec is None:
        if origin.grant_lapsed(session):
            await expire_waiting(session, step, latest, origin.when(), GRANT_EXPIRED)
        else:
            await fail_and_go_on(
                session, origin, step, Observation.invalid_decision(unusable or ""), None
            )
        return session
    check = await session.ask_policy(step, spec, args)
    await settle(session, origin, step, spec, args, check)
    return session
