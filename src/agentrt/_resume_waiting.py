"""Resuming a WAITING run after a person decided.

Only the step's latest approval counts. Pending → refused (nothing changes,
however often); expired by `approval_ttl` → the run is cancelled
`approval_expired`; approved → its stored fields are re-verified against the
hash, the request is rebuilt from the tool as registered *now* (a tool gone or
args failing the current schema fail the step `invalid_decision`), a grant
older than `grant_ttl` cancels the run, and the policy is asked again while the
run still waits; its answer is settled by `_settle.settle` from the waiting
state: the call is allowed only on `allow` or on a `require_approval` the grant
satisfies, otherwise the run pauses again. An approved run is judged under
its lease: the attach holds it first by compare-and-set (`hold_waiting`: a lease
at the run's next epoch, decision 0204; the run stays WAITING, nothing else is
written), so a second attach or resume, in
this process or another, is refused with `RunLeasedError` as for a RUNNING run
(decision 0032). An allowed call writes nothing more here: `execute` judges the
grant and leaves WAITING (`run.resumed`, `step.policy`, `step.tool_started`) in
one compare-and-set transaction on the status and the hold, owner and epoch
(`_settle.start_resumed`).

Races (decision 0161): the hold refuses, holding nothing, a run whose step no
longer awaits the approval read (another program resumed it meanwhile); a
pending approval found past its expiry whose expiry write is refused because a
person approved it meanwhile is resumed as approved (their decision is first on
record); a run that ended first refuses as "ended", never "resumed elsewhere".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime

from . import _commit_plan as plan
from ._approval import verify_stored
from ._continuation import Continuer, Refusal, RunFacts, approval_state, judge, moved_on
from ._decisions import call_args
from ._errors import NotFoundError, RunStateError
from ._lease import holder_json
from ._records import (
    Approval,
    ApprovalStatus,
    Observation,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
)
from ._session import (
    LoopConfig,
    RunMoved,
    RunSession,
    load,
    release_lease,
    run_io,
    write_through,
)
from ._settle import (
    FromWaiting,
    Now,
    expire_if_lapsed,
    expire_waiting,
    fail_and_go_on,
    settle,
)
from ._store import Tx

NO_MARK = datetime(1970, 1, 1, tzinfo=UTC)


async def resume_waiting(
    config: LoopConfig, run: Run, steps: Sequence[Step], approvals: Sequence[Approval]
) -> RunSession:
    """Settle a WAITING run's latest approval. The session's run says what became of it.

    The clock is read once, when first needed (`_settle.Now`), which marks the
    start of the resumed run's active segment. An allowed call is held for
    `execute` (`session.take_allowed`): nothing is written for it here.
    """
    # The mark is set by the first reading of the clock (`Now`), before any use.
    session = RunSession(config, run, steps, approvals, epoch=0, mark=NO_MARK)
    if not steps or steps[-1].status != StepStatus.AWAITING_APPROVAL:
        raise RunStateError(f"run {run.id} is waiting but has no step awaiting approval")
    step = steps[-1]
    if run.decode_error or step.decode_error:
        await _fail_undecodable(session, step, run.decode_error or step.decode_error)
        return session
    mine = [a for a in approvals if a.step_id == step.id]
    if not mine:
        raise RunStateError(f"run {run.id} is waiting but step {step.id} has no approval")
    latest = mine[-1]
    if latest.status == ApprovalStatus.PENDING:
        now = config.clock()
        session.set_mark(now)
        # The continuation's judgement of the approval: expired, or still pending.
        judged = judge(
            RunFacts(run.id, run.status, run.origin),
            Continuer(config.owner),
            lease_now=lambda: config.store.lease_now(config.wall),
            now=lambda: now,
            approval=lambda: approval_state(latest),
        )
        if isinstance(judged, Refusal):
            raise judged.error
        try:
            await expire_waiting(
                session, step, latest, now, "approval expired before it was decided"
            )
        except RunStateError:
            # Approved between this read and the expiry's write: the person's decision is
            # on record first and stands; the resume goes on from it.
            approved = await _approved_meanwhile(config, session, step, latest)
            if approved is None:
                raise
            return approved
        return session
    if latest.status != ApprovalStatus.APPROVED:
        raise RunStateError(f"the latest approval {latest.id} of run {run.id} is {latest.status}")
    verify_stored(latest)
    # The hold is a lease of its own, at the next epoch: the one this session was granted,
    # its release names (decision 0187) and `leave_waiting` keeps (decision 0204).
    session.epoch = await _hold(config, run, latest)
    # The hold is renewed from here, while the policy (consumer code, maybe slow) judges
    # the request again: a hold that lapsed meanwhile would let a second attach hold the
    # run and be told the same call is allowed (decision 0137).
    session.start_heartbeat()
    try:
        await _judge(session, step, latest)
    except RunMoved as moved:  # ended meanwhile (an operator's cancel): nothing was written
        session.stop_heartbeat()
        session.run = moved.run
        return session
    except BaseException:
        # Whatever was not written, the run still waits: let the next attach judge it
        # at once rather than after the lease lapses.
        session.stop_heartbeat()
        with contextlib.suppress(Exception):  # a closed store: the lease then lapses
            await asyncio.shield(run_io(lambda: release_lease(config, run.id, session.epoch)))
        raise
    if not session.has_allowed_call() and session.run.status != RunStatus.RUNNING:
        session.stop_heartbeat()  # paused again or ended: nothing of it is held any more
    return session


async def _approved_meanwhile(
    config: LoopConfig, session: RunSession, step: Step, read: Approval
) -> RunSession | None:
    """After the expiry of `read` (pending when read) was refused: when a person approved
    it meanwhile (in time, by the clock of whoever decided, and first on record), the
    resume of the approved request, as any approved one is resumed; else None.

    A run that ended meanwhile (rejected, cancelled, expired by another resume) has
    nothing to resume: the refusal stands, nothing written by this resume.
    """
    run, steps, approvals = await run_io(lambda: load(config, session.run_id))
    mine = [a for a in approvals if a.step_id == step.id]
    if (
        run.status != RunStatus.WAITING_FOR_APPROVAL
        or not mine
        or mine[-1].id != read.id
        or mine[-1].status != ApprovalStatus.APPROVED
    ):
        return None
    return await resume_waiting(config, run, steps, approvals)


async def _fail_undecodable(session: RunSession, step: Step, why: str) -> None:
    """store.md: a run whose record will not decode is failed, never continued.

    Its awaiting step fails `invalid_decision`, the run ends FAILED
    `internal_error`, through `end_waiting` like every other ending from waiting.
    """
    now = session.config.clock()
    session.set_mark(now)
    detail = f"the run's record cannot be read back ({why}); it is not continued"
    mine = [a for a in session.approvals if a.step_id == step.id]
    latest = mine[-1].id if mine else ""

    def tx_fail(tx: Tx) -> None:
        settled = tx.end_waiting(
            session.run_id,
            step.id,
            Observation.invalid_decision(detail),
            status=RunStatus.FAILED,
            reason=TerminalReason.INTERNAL_ERROR,
            detail=detail,
            expire=latest,  # nobody can decide it any more (decision 0137)
            now=now,
        )
        session.run = settled.run
        session.put_step(settled.step)
        if latest:
            expired = tx.approval_of_run(latest, session.run_id)
            if expired is not None:
                session.put_approval(expired)

    await session.write(plan.WAIT_ENDED, tx_fail)


async def _hold(config: LoopConfig, run: Run, approved: Approval) -> int:
    """Hold the waiting run's lease, or refuse as a RUNNING run's lease refuses.

    A lease another live attach holds refuses with `RunLeasedError` (as for a
    RUNNING run: only one session per run, across processes); none, an expired
    one, this gate's own or a provably dead holder's is taken, by compare-and-set
    on exactly that lease (decision 0032). Returns the hold's epoch: the run's next one
    (decision 0204).
    """

    def tx_hold(tx: Tx) -> int:
        guarded = tx.lock_run(run.id)
        if guarded is None:
            raise NotFoundError(f"no run {run.id}")
        lease = guarded.lease
        if lease.status != RunStatus.WAITING_FOR_APPROVAL:
            raise moved_on(run.id, lease.status, "holding its approved request")
        if _moved_since_read(tx, approved):
            # Another program resumed the run since this one read it, and it waits again
            # (on the next step's approval, or this step's new one): holding it now would
            # leave a lease on a run nothing of this resume will run.
            raise RunStateError(
                f"run {run.id} moved on since this resume read it: approval {approved.id} "
                "is no longer what it waits on (another program resumed it); nothing was "
                "held or run"
            )
        lease_now = tx.lease_now(config.wall)
        judged = judge(
            RunFacts(run.id, lease.status, guarded.run.origin, lease),
            Continuer(config.owner),
            lease_now=lambda: lease_now,
            now=config.clock,
            approval=lambda: approval_state(approved),
        )
        if isinstance(judged, Refusal):
            raise judged.error
        return tx.hold_waiting(
            run.id,
            owner=config.owner,
            expires_at=lease_now + config.lease_ttl,
            holder=holder_json(),
            previous=lease,
        ).epoch

    return await write_through(config, plan.HELD, tx_hold)


def _moved_since_read(tx: Tx, approved: Approval) -> bool:
    """Whether the step `approved` was read on no longer awaits it: the step settled, or
    its latest approval is another one or no longer approved."""
    if tx.step_record(approved.step_id).status != StepStatus.AWAITING_APPROVAL:
        return True
    latest = tx.latest_approval_of_step(approved.step_id)
    return latest is None or (latest.id, latest.status) != (approved.id, approved.status)


async def _judge(session: RunSession, step: Step, latest: Approval) -> None:
    """The approved request judged again: the tool as registered now, its schema, the policy."""
    config = session.config
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
        if not await expire_if_lapsed(session, origin, step):
            await fail_and_go_on(
                session, origin, step, Observation.invalid_decision(unusable or ""), None
            )
        return
    check = await session.ask_policy(step, spec, args)
    await settle(session, origin, step, spec, args, check)
