"""Settling a policy check: one function, whatever the step came from.

A step reaches its policy from one of two places: the lease holder's loop (a
step `deciding`, or one found `interrupted` at a takeover), or a run WAITING on
an approval, which the attach judging it holds (`hold_waiting`, decision 0032;
the step `awaiting_approval`). `settle` maps the check to the same four answers
either way, and each answer is one transaction of named writes
(the store's `Tx`, which append the events and return the records the
session keeps), built once here:

- allowed: from the loop, nothing is written until `execute` starts the tool;
  from a waiting run, `execute` leaves waiting (`leave_waiting`: the hold's lease
  and epoch, renewed; `run.resumed`) and starts the tool in that same transaction;
- denied (or a call that no longer fits its tool): the step fails and the loop
  goes on (`fail_and_go_on`; a waiting run leaves waiting first);
- ended (abort, or a policy that failed): the step fails and the run ends
  (`end_with_step` from the loop, `end_waiting` from a waiting run); the
  agent's own `complete`/`fail`, or an agent that raised, end here too;
- pending: a new approval, step `awaiting_approval`, run WAITING, lease released.

`FromRunning` and `FromWaiting` say how to enter the transaction (the lease
held, or the approval still the step's latest), which statuses the writes may
leave, and which crash point each write is.

Invariants: the policy is judged before anything is written; every write is a
compare-and-set on the statuses named by the origin, so a concurrent resume,
decision or cancel makes it raise instead of overwriting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from . import _commit_plan as plan
from ._approval import approval_hash, approval_request
from ._canonical import copy_json
from ._commit_plan import (
    POINT_ALLOWED,
    POINT_ATTACH_ALLOWED,
    POINT_RESUMED,
    Commit,
)
from ._errors import LeaseLostError, RunStateError
from ._lease import holder_json
from ._records import (
    ENDED_STATUSES,
    JSON,
    Approval,
    Observation,
    PolicyDecision,
    PolicyOutcome,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
    ToolSpec,
)
from ._session import (
    AllowedCall,
    PolicyCheck,
    RunMoved,
    RunSession,
    VerdictOutcome,
)
from ._store import Tx
from ._store._records import ToolStart, tool_start

INTERRUPTED_KIND = "interrupted_side_effect"


@dataclass(frozen=True)
class FromRunning:
    """The step is the lease holder's: `deciding`, or `interrupted` at a takeover."""

    from_step: tuple[str, ...] = (StepStatus.DECIDING,)
    from_run: str = field(default=RunStatus.RUNNING, init=False)
    resume_point: str | None = field(default=None, init=False)
    failed: ClassVar[Commit] = plan.STEP_ENDED
    ended: ClassVar[Commit] = plan.STEP_ENDED
    paused: ClassVar[Commit] = plan.PAUSED

    def enter(self, session: RunSession, tx: Tx, step: Step) -> datetime:
        session.require_lease(tx)
        return session.config.clock()

    def fail(
        self,
        session: RunSession,
        tx: Tx,
        now: datetime,
        step: Step,
        observation: Observation,
        payload: dict[str, Any] | None,
    ) -> None:
        """The step fails and the loop goes on (the session's copy: what was written)."""
        session.put_step(
            tx.fail_and_go_on(
                session.run_id,
                step.id,
                observation,
                policy=payload,
                from_step=self.from_step[0],
                now=now,
            )
        )

    def active_ms(self, session: RunSession, now: datetime) -> int:
        return session.active_ms_until(now)


class Now:
    """One reading of the clock for a waiting run's resume, taken when first needed.

    A resume reads the clock once: for the write that settles the approval at
    attach (denied, ended, paused again), or, for an allowed call, in
    `execute`, when the grant is judged and the tool started. The first
    reading also marks the start of the run's active segment.
    """

    def __init__(self, session: RunSession) -> None:
        self._session = session
        self._at: datetime | None = None

    def __call__(self) -> datetime:
        if self._at is None:
            self._at = self._session.config.clock()
            self._session.set_mark(self._at)
        return self._at


GRANT_EXPIRED = "the grant expired before the run resumed"


@dataclass(frozen=True)
class FromWaiting:
    """The step awaits `approval`, the latest of a WAITING run; `when` reads the clock once."""

    approval: Approval
    when: Now
    from_step: tuple[str, ...] = field(default=(StepStatus.AWAITING_APPROVAL,), init=False)
    from_run: str = field(default=RunStatus.WAITING_FOR_APPROVAL, init=False)
    resume_point: str | None = field(default=POINT_RESUMED, init=False)
    failed: ClassVar[Commit] = plan.RESUME_FAILED
    ended: ClassVar[Commit] = plan.WAIT_ENDED
    paused: ClassVar[Commit] = plan.RE_PAUSED

    def enter(self, session: RunSession, tx: Tx, step: Step) -> datetime:
        guarded = tx.lock_run(session.run_id)
        if guarded is not None and guarded.lease.status in ENDED_STATUSES:
            # Ended while the request was judged again (an operator's cancel): the resume
            # finds it here, at its write, and returns the run as it ended (decision 0137).
            raise RunMoved(guarded.run)
        require_latest(tx, step.id, self.approval)
        return self.when()

    def grant_lapsed(self, session: RunSession) -> bool:
        """Whether the approval's grant is older than the run's `grant_ttl` now."""
        grant_ttl = session.run.limits.grant_ttl
        decided = self.approval.decided_at
        return grant_ttl is not None and decided is not None and self.when() >= decided + grant_ttl

    def take(
        self, session: RunSession, tx: Tx, now: datetime, *, side_effect: bool = False
    ) -> None:
        """Take the lease of the waiting run back to RUNNING; `run.resumed`. Before a side
        effect, a hold of this session's that lapsed (a stall past its lease, nobody having
        taken the run) starts nothing, as a RUNNING run's lapsed lease starts nothing."""
        config = session.config
        lease_now = tx.lease_now(config.wall)
        if side_effect:
            held = tx.lock_lease(session.run_id)
            if held is not None and held.held_by(config.owner) and not held.live_at(lease_now):
                raise LeaseLostError(
                    f"the hold on run {session.run_id} lapsed at {held.shown_expiry()}; "
                    "no side effect is started on a lapsed lease"
                )
        leased = tx.leave_waiting(
            session.run_id,
            self.approval.id,
            owner=config.owner,
            epoch=session.epoch,
            expires_at=lease_now + config.lease_ttl,
            holder=holder_json(),
            now=now,
        )
        session.epoch = leased.epoch
        session.run = leased.run

    def fail(
        self,
        session: RunSession,
        tx: Tx,
        now: datetime,
        step: Step,
        observation: Observation,
        payload: dict[str, Any] | None,
    ) -> None:
        """Leave waiting, then the step fails and the loop goes on."""
        self.take(session, tx, now)
        session.put_step(
            tx.fail_and_go_on(
                session.run_id,
                step.id,
                observation,
                policy=payload,
                from_step=StepStatus.AWAITING_APPROVAL,
                now=now,
            )
        )

    def satisfies(self, decision: PolicyDecision, request: JSON) -> bool:
        """Whether the granted approval answers the approval the policy asks for now.

        An interrupted_side_effect grant is the operator's answer to this very
        request with the stronger warning; a policy asking for its own approval
        kind is satisfied by it (decision 0006). Any changed request still
        differs in the hash of the interrupted approval itself.
        """
        granted = self.approval
        new_hash = approval_hash(decision.kind, decision.capability, decision.presentation, request)
        return new_hash == granted.hash or (
            granted.kind == INTERRUPTED_KIND
            and approval_hash(granted.kind, granted.capability, granted.presentation, request)
            == granted.hash
        )


Origin = FromRunning | FromWaiting


def require_latest(tx: Tx, step_id: str, approval: Approval) -> None:
    """Inside the transaction: `approval` is still the step's latest, in the status read.

    Only the step's latest approval counts. A concurrent resume may have paused
    the step again on a new approval since this one was read: acting on the
    older grant then would execute what nobody approved.
    """
    latest = tx.latest_approval_of_step(step_id)
    if latest is None or latest.id != approval.id or latest.status != approval.status:
        raise RunStateError(
            f"approval {approval.id} is no longer the step's latest {approval.status} approval; "
            "another resume or decision moved the run first"
        )


async def settle(
    session: RunSession,
    origin: Origin,
    step: Step,
    spec: ToolSpec,
    args: JSON,
    check: PolicyCheck,
) -> VerdictOutcome:
    """Act on one policy check: allowed, denied, ended or pending.

    From a waiting run, a grant older than `grant_ttl` cancels the run
    (`approval_expired`) before anything else is written; an allowed call's
    grant is judged by `execute`, when the tool would start.
    """
    decision = check.decision
    allowed = decision is not None and (
        decision.outcome == PolicyOutcome.ALLOW
        or (
            decision.outcome == PolicyOutcome.REQUIRE_APPROVAL
            and isinstance(origin, FromWaiting)
            and origin.satisfies(decision, approval_request(session.run_id, step.id, spec, args))
        )
    )
    if (
        not allowed
        and isinstance(origin, FromWaiting)
        and await expire_if_lapsed(session, origin, step)
    ):
        return VerdictOutcome.ENDED
    if decision is None:
        error = check.error or "policy failed"
        await end(
            session,
            origin,
            step,
            TerminalReason.INTERNAL_ERROR,
            error,
            Observation.denied(spec.name, error),
            None,
        )
        return VerdictOutcome.ENDED
    if decision.outcome == PolicyOutcome.DENY:
        await fail_and_go_on(
            session, origin, step, Observation.denied(spec.name, decision.reason), check.payload
        )
        return VerdictOutcome.DENIED
    if decision.outcome == PolicyOutcome.ABORT:
        await end(
            session,
            origin,
            step,
            TerminalReason.POLICY_ABORT,
            decision.reason,
            Observation.denied(spec.name, decision.reason),
            check.payload,
        )
        return VerdictOutcome.ENDED
    if not allowed:
        await pause(session, origin, step, spec, args, decision, check.payload)
        return VerdictOutcome.PENDING
    await allow(session, origin, step, spec, args, check.payload)
    return VerdictOutcome.ALLOWED


async def allow(
    session: RunSession,
    origin: Origin,
    step: Step,
    spec: ToolSpec,
    args: JSON,
    payload: dict[str, Any],
) -> None:
    """The call may run: it is held for `execute`, and nothing is written yet.

    From the loop, `execute` starts the tool on the lease held; from a waiting
    run, `execute` judges the grant and takes the run back in the transaction
    that starts the tool (`start_resumed`)."""
    if isinstance(origin, FromRunning):
        session.allow(AllowedCall(step, spec, copy_json(args), payload, from_step=origin.from_step))
        await session.probe(POINT_ALLOWED)
        return
    session.allow(
        AllowedCall(
            step, spec, copy_json(args), payload, approval_id=origin.approval.id, waiting=origin
        )
    )
    await session.probe(POINT_ATTACH_ALLOWED)


async def start_resumed(session: RunSession, call: AllowedCall) -> datetime | None:
    """Start a call a granted approval allowed: the run leaves WAITING as the tool starts.

    The grant is judged now (`grant_ttl`): one that lapsed cancels the run
    `approval_expired` and None is returned, nothing having run. Otherwise one
    compare-and-set transaction takes the lease, appends `run.resumed`, records
    the policy and `step.tool_started`, so of two resumes exactly one starts it.
    """
    origin: FromWaiting = call.waiting
    step = call.step
    if await expire_if_lapsed(session, origin, step):
        return None

    start = encoded_start(
        call.spec,
        call.args,
        call.payload,
        approval_id=origin.approval.id,
        from_step=origin.from_step,
    )

    def tx_resume(tx: Tx) -> None:
        now = origin.enter(session, tx, step)
        origin.take(session, tx, now, side_effect=True)
        start_tool_in(session, tx, now, step, start, from_step=origin.from_step)

    await session.write(plan.RESUMED, tx_resume)
    return origin.when()


def encoded_start(
    spec: ToolSpec,
    args: JSON,
    payload: dict[str, Any],
    *,
    approval_id: str = "",
    from_step: tuple[str, ...] = (StepStatus.DECIDING,),
) -> ToolStart:
    """What `start_tool_in` writes, encoded before its transaction (decision 0128). A
    start from `interrupted` without an approval is the re-run a tool's reconciliation
    vouched for (decision 0067)."""
    return tool_start(
        spec.name,
        args,
        payload,
        approval_id=approval_id,
        reconciled=not approval_id and StepStatus.INTERRUPTED in from_step,
    )


def start_tool_in(
    session: RunSession,
    tx: Tx,
    now: datetime,
    step: Step,
    start: ToolStart,
    *,
    from_step: tuple[str, ...] = (StepStatus.DECIDING,),
) -> Step:
    """The step `executing` with its policy (`start_tool`, as `encoded_start` made it), in
    the caller's transaction; the session keeps the step as written."""
    return session.put_step(
        tx.start_tool(session.current(step), start, from_statuses=from_step, now=now)
    )


async def expire_if_lapsed(session: RunSession, origin: FromWaiting, step: Step) -> bool:
    """The one judgement of a grant's age: a grant older than `grant_ttl` cancels the
    waiting run `approval_expired` (True); otherwise nothing is written (False)."""
    if not origin.grant_lapsed(session):
        return False
    await expire_waiting(session, step, origin.approval, origin.when(), GRANT_EXPIRED)
    return True


async def expire_waiting(
    session: RunSession, step: Step, approval: Approval, now: datetime, why: str
) -> None:
    """Cancel a waiting run `approval_expired`: its approval (or its grant) ran out."""

    def tx_expire(tx: Tx) -> None:
        require_latest(tx, step.id, approval)
        tool = step.decision.tool if step.decision is not None else ""
        settled, expired = tx.expire_waiting(
            session.run_id, step.id, approval, tool=tool, why=why, now=now
        )
        session.run = settled.run
        session.put_step(settled.step)
        session.put_approval(expired)

    await session.write(plan.WAIT_ENDED, tx_expire)


async def fail_and_go_on(
    session: RunSession,
    origin: Origin,
    step: Step,
    observation: Observation,
    payload: dict[str, Any] | None,
) -> None:
    """The step fails (denied, or a call that no longer fits its tool); the loop goes on."""

    def tx_fail(tx: Tx) -> None:
        now = origin.enter(session, tx, step)
        origin.fail(session, tx, now, step, observation, payload)

    await session.write(origin.failed, tx_fail, origin.resume_point)


async def end(
    session: RunSession,
    origin: Origin,
    step: Step,
    reason: str,
    detail: str,
    observation: Observation | None,
    payload: dict[str, Any] | None,
    *,
    status: str = RunStatus.FAILED,
    step_status: str = StepStatus.FAILED,
    result: JSON = None,
) -> None:
    """The step settles and the run ends (FAILED with `reason` unless `status` says
    otherwise), in one transaction: one named write from the loop, one from waiting.

    From the loop: an agent's `complete` or `fail` (the step `done`, no observation),
    an agent or loop that raised, a policy that aborted or failed. From waiting: a
    policy that aborted or failed at a resume.
    """

    def tx_end(tx: Tx) -> None:
        now = origin.enter(session, tx, step)
        if isinstance(origin, FromWaiting):
            assert observation is not None
            settled = tx.end_waiting(
                session.run_id,
                step.id,
                observation,
                status=status,
                reason=reason,
                detail=detail,
                policy=payload,
                now=now,
            )
        else:
            settled = tx.end_with_step(
                session.run_id,
                step.id,
                status=status,
                reason=reason,
                detail=detail,
                step_status=step_status,
                observation=observation,
                policy=payload,
                result=result,
                active_ms_add=origin.active_ms(session, now),
                from_step=origin.from_step[0],
                now=now,
            )
        session.run = settled.run
        session.put_step(settled.step)

    await session.write(origin.ended, tx_end, None)


async def pause(
    session: RunSession,
    origin: Origin,
    step: Step,
    spec: ToolSpec,
    args: JSON,
    decision: PolicyDecision,
    payload: dict[str, Any],
) -> None:
    """Wait for a person: a new approval, the step awaiting it, the run WAITING."""

    def tx_pause(tx: Tx) -> None:
        now = origin.enter(session, tx, step)
        pause_in(
            session, tx, now, step, spec, args, decision, payload, origin.from_step, origin.from_run
        )

    await session.write(origin.paused, tx_pause)


def pause_in(
    session: RunSession,
    tx: Tx,
    now: datetime,
    step: Step,
    spec: ToolSpec,
    args: JSON,
    decision: PolicyDecision,
    payload: dict[str, Any],
    from_step: tuple[str, ...],
    from_run: str,
) -> None:
    """The pause's named write (`pause_for_approval`) in the caller's transaction; the
    session keeps the run, step and approval as written."""
    request = approval_request(session.run_id, step.id, spec, args)
    digest = approval_hash(decision.kind, decision.capability, decision.presentation, request)
    ttl = session.run.limits.approval_ttl
    paused = tx.pause_for_approval(
        session.run_id,
        step.id,
        new_id=session.config.new_id,
        decision=decision,
        request=request,
        digest=digest,
        expires_at=now + ttl if ttl is not None else None,
        payload=payload,
        active_ms=session.active_ms_until(now) if from_run == RunStatus.RUNNING else 0,
        from_step=from_step,
        from_run=from_run,
        now=now,
    )
    session.run = paused.run
    session.put_step(paused.step)
    session.put_approval(paused.approval)
