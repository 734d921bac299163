"""One step of a run, as its lease holder takes it: begin, propose, execute.

- `begin_step`: checks the limits in their fixed order on the session's copy
  of the run (ending the run in one commit when one is reached) and claims the
  next step in memory; the claim (`claim_step`: the step `deciding`,
  `step.started`) joins the step's next commit.
- `propose`: records the decision verbatim (`step.decided`, joining the next
  commit too, which every path makes before any tool starts), validates it,
  ends the run for `complete`/`fail`, and otherwise asks the policy and settles
  its answer (`_settle.settle`, shared with a waiting run's resume).
- `run_tool` (the Gate step's `execute`): `step.tool_started` under a lease
  held and unexpired by the wall clock, the tool under its timeout, then `step.tool_finished` in one
  transaction, recorded even if the caller is cancelled (and not recorded if
  another owner took the run meanwhile). A start the store refuses with nothing
  written (`StoreBusyError`, or a `StoreError` whose commit is not of unknown outcome:
  a connection lost before it was sent) hands the allowed call back for a retry
  (`_hand_back`, decision 0179).

Each function works on a `RunSession` (`_session.py`): its writes, its lease
guard and its in-memory copy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from . import _commit_plan as plan
from . import _limits as limits_mod
from ._canonical import copy_json
from ._clock import as_stored, duration_to_ms
from ._commit_plan import POINT_TOOL_EFFECT
from ._decisions import RecordedDecision, call_args, record, validate
from ._errors import (
    LeaseLostError,
    LimitExceeded,
    ModelUnavailableError,
    RunStateError,
    StoreError,
)
from ._execute import invoke
from ._foreign import exception_text
from ._policy import INTERRUPTED_POLICY_ID, outcome_unknown_decision
from ._records import (
    JSON,
    DecisionKind,
    Observation,
    ObservationKind,
    Run,
    RunStatus,
    Step,
    StepStatus,
    TerminalReason,
    ToolCall,
    ToolSpec,
    evolve,
)
from ._session import (
    EXECUTING,
    AllowedCall,
    RunMoved,
    RunSession,
    VerdictOutcome,
    run_io,
    through_cancels,
)
from ._settle import (
    FromRunning,
    Now,
    encoded_start,
    end,
    fail_and_go_on,
    pause_in,
    settle,
    start_resumed,
    start_tool_in,
)
from ._store import Tx
from ._store._records import GuardedRun, written_observation


async def begin_step(session: RunSession, *, read_first: bool = True) -> Step | None:
    """Check the limits and claim the next step; None when the run is no longer RUNNING.

    The claim is made in memory and deferred (`plan.STEP_STARTED` joins the step's next
    commit): the limits are judged on the session's copy of the run, which is the run as
    last committed by this lease holder. A limit reached ends the run in a commit of its
    own. A cancel or a lost lease since the last commit is found by that next commit.
    `read_first` reads the run's lease and status before claiming (`_moved_since`), so
    that a cancel made since the last commit returns None at once; the Driver, which
    claims right after its own commit, skips it (decision 0101).
    """
    config = session.config
    if read_first:
        moved = await run_io(partial(_moved_since, session))
        if moved is not None:
            session.run = moved
    run = session.run
    if run.status != RunStatus.RUNNING:
        return None
    now = config.clock()
    hit = (
        None
        if run.decode_error
        else limits_mod.check(
            run, session.steps, now, session.active_time_at(now), session.args_hash
        )
    )
    if run.decode_error or hit is not None:

        def tx_end(tx: Tx) -> None:
            session.run = session.require_lease(tx)
            if run.decode_error:
                # store.md: a run whose record will not decode is not continued.
                detail = f"the run's record cannot be read back ({run.decode_error})"
                session.end_in(tx, now, RunStatus.FAILED, TerminalReason.INTERNAL_ERROR, detail)
                return
            assert hit is not None
            session.run = tx.fail_at_limit(
                session.run_id,
                reason=hit.reason,
                detail=hit.detail,
                loop=hit.loop,
                active_ms_add=session.active_ms_until(now),
                now=now,
            )

        try:
            await session.write(plan.LIMIT_REACHED, tx_end)
        except RunMoved as moved:
            session.run = moved.run
        return None
    step_id = config.new_id()
    step = Step(
        id=step_id,
        run_id=run.id,
        index=run.step_count,
        status=StepStatus.DECIDING,
        decision=None,
        policy=None,
        observation=None,
        started_at=as_stored(now),
        finished_at=None,
    )

    def tx_claim(tx: Tx, locked: GuardedRun) -> Callable[[], None]:
        # The compare-and-set is on the session's copy of the step count.
        claimed = tx.claim_step(
            run.id, step.index, config.owner, lambda: step_id, now, epoch=session.epoch
        )
        if claimed != step:  # what the claim writes is the copy kept, by construction
            raise RunStateError(f"step {step.index} of run {run.id} moved before it was claimed")

        def learn() -> None:
            # The run as the lock read it (another process's late charge, say), decoded
            # once the commit is durable rather than while it holds the write turn, unless
            # the commit's own writes replaced the session's copy since (decision 0128).
            if session.run is claimed_copy:
                fresh = locked.run
                session.run = evolve(fresh, step_count=fresh.step_count + 1)

        return learn

    session.run = claimed_copy = evolve(run, step_count=run.step_count + 1)
    session.steps.append(step)  # a new id: nothing to replace
    session.defer(plan.STEP_STARTED, tx_claim)
    return step


def _moved_since(session: RunSession) -> Run | None:
    """The run as it stands if it left RUNNING since this holder's last commit (an operator
    cancelled it); `LeaseLostError` if another owner holds it. A read, no commit: the
    step's first commit checks the lease again, under the run's lock."""
    store, run_id = session.config.store, session.run_id
    lease = store.lease_state(run_id)
    if lease is None:
        raise RunStateError(f"run {run_id} disappeared")
    if lease.status != RunStatus.RUNNING:
        with store.snapshot() as view:
            return view.run_record(run_id)
    if not lease.held_by(session.config.owner):
        raise LeaseLostError(
            f"run {run_id} is now leased by {lease.owner!r}; "
            "this loop stopped before its next side effect"
        )
    return None


async def propose(session: RunSession, step: Step, decision: Any) -> VerdictOutcome:
    """Record, validate and judge one decision for the step `begin_step` returned."""
    try:
        recorded = await _record_decision(session, step, decision)
        error = validate(recorded, session.config.compiled)
        if error is not None:
            await fail_and_go_on(
                session, FromRunning(), step, Observation.invalid_decision(error), None
            )
            return VerdictOutcome.DENIED
        chosen = recorded.decision
        if chosen.kind == DecisionKind.COMPLETE:
            await end(
                session,
                FromRunning(),
                step,
                TerminalReason.GOAL_COMPLETED,
                "",
                None,
                None,
                status=RunStatus.COMPLETED,
                step_status=StepStatus.DONE,
                result=chosen.result,
            )
            return VerdictOutcome.ENDED
        if chosen.kind == DecisionKind.FAIL:
            await end(
                session,
                FromRunning(),
                step,
                TerminalReason.GOAL_FAILED,
                chosen.message,
                None,
                None,
                step_status=StepStatus.DONE,
            )
            return VerdictOutcome.ENDED
        spec = session.config.specs[chosen.tool]
        args = call_args(chosen)
        check = await session.ask_policy(step, spec, args)
        return await settle(session, FromRunning(), step, spec, args, check)
    except RunMoved as moved:
        session.run = moved.run
        return VerdictOutcome.ENDED


async def _record_decision(session: RunSession, step: Step, decision: Any) -> RecordedDecision:
    """The decision recorded verbatim (`record_decision`, `step.decided`), deferred to the
    step's next commit (`plan.DECIDED` joins it), the clock read now."""
    recorded = record(decision)
    now = session.config.clock()
    kept = session.current(step)

    def tx_decided(tx: Tx, _: GuardedRun) -> None:
        # `record` never raises and its text is known to encode: whatever the
        # agent returned, this write records it (or what could be kept of it).
        tx.record_decision(kept, recorded.text, recorded.decision, now)

    session.put_step(evolve(kept, decision=recorded.decision))
    session.defer(plan.DECIDED, tx_decided)
    return recorded


async def _start_tool(
    session: RunSession,
    step: Step,
    spec: ToolSpec,
    args: JSON,
    payload: dict[str, Any],
    from_step: tuple[str, ...],
) -> datetime:
    start = encoded_start(spec, args, payload, from_step=from_step)

    def tx_started(tx: Tx) -> datetime:
        session.check_lease(tx, side_effect=True)
        now = session.config.clock()
        start_tool_in(session, tx, now, step, start, from_step=from_step)
        return now

    return await session.write(plan.TOOL_STARTED, tx_started)


async def run_tool(session: RunSession, step: Step) -> None:
    """Start, run and record the allowed call of `step` exactly once."""
    allowed = session.take_allowed(step)
    spec, args = allowed.spec, allowed.args
    if allowed.waiting is not None:
        try:
            resumed_at = await start_resumed(session, allowed)
        except RunMoved as moved:
            session.run = moved.run
            return
        except StoreError as refused:
            _hand_back(session, allowed, refused)
            raise
        if resumed_at is None:  # the grant lapsed: the run was cancelled, nothing ran
            return
        # The run is leased from here: keep the lease renewed while the tool runs.
        session.start_heartbeat()
        started_at = resumed_at
    else:
        try:
            started_at = await _start_tool(
                session, step, spec, args, allowed.payload, allowed.from_step
            )
        except RunMoved as moved:
            session.run = moved.run
            return
        except StoreError as refused:
            _hand_back(session, allowed, refused)
            raise
    session.start_recorded = step.id
    tool = session.config.tools[spec.name]
    call = ToolCall(
        run_id=session.run_id, step_id=step.id, args=copy_json(args), lease_epoch=session.epoch
    )
    threads: list[concurrent.futures.Future[Any]] = []
    executing = EXECUTING.get()
    if executing is not None:
        executing.threads = threads  # a close judging the execute abandoned looks at them
    try:
        outcome = await invoke(tool, spec, call, threads)
    except asyncio.CancelledError:
        # The caller cancelled us mid-call: the effect may have happened, so
        # its (unknown) outcome is recorded before the cancellation goes on.
        # A plain-function tool cannot be stopped: while its thread runs, the
        # lease stays ours (and renewed), or another process could take the
        # run over and start the same call beside it.
        running = next((f for f in threads if not f.done()), None)
        # An earlier call's thread still running (cancelled mid-call too) keeps it as well.
        kept = session.lingering_tool
        observation = Observation.cancelled_mid_call()
        try:
            await through_cancels(
                _finish_tool(
                    session,
                    step,
                    spec,
                    started_at,
                    observation,
                    None,
                    cancelled=True,
                    keep_lease=running is not None,  # and any kept before (`_finish_tool`)
                )
            )
        finally:
            # Whatever became of the outcome's commit (written, or failed: the step is
            # left `executing` for the next owner to judge), the thread still runs: kept
            # beside any earlier one (`keep_lease_while`).
            if running is not None:
                session.keep_lease_while(running)
            elif kept is not None and kept.done():
                session.lingering_tool = None  # nothing of the session's calls runs any more
        raise
    except BaseException as stopped:
        # Anything else (a signal's KeyboardInterrupt landing in the loop's coroutine, or
        # the execute's coroutine closed from outside): the step is left `executing` for the
        # next owner to judge; the lease is kept while the tool's thread (or a task left
        # running, `invoke`) runs, or, with no thread to wait for, until it lapses. A
        # coroutine closed from outside left in `threads` whatever may still run: an async
        # tool's task whose loop is closed never runs again (decision 0198).
        running = next((f for f in threads if not f.done()), None)
        if running is not None:
            session.keep_lease_while(running)
        if not threads and not isinstance(stopped, GeneratorExit):
            session.tool_may_run = True
        raise
    await session.probe(POINT_TOOL_EFFECT)
    await _finish_tool(
        session,
        step,
        spec,
        started_at,
        outcome.observation,
        outcome.abort,
        unknown=None if outcome.unknown is None else (args, outcome.unknown),
    )


def _hand_back(session: RunSession, allowed: AllowedCall, refused: StoreError) -> None:
    """The commit that starts the tool was refused with nothing written, the tool certainly
    not started: `StoreBusyError` (rolled back whole before any of its work was written),
    or another `StoreError` whose commit is not of unknown outcome (a PostgreSQL
    connection lost before the transaction was sent, say; the store's contract: nothing
    was written). The call is held again for a retry of `execute`, which makes the same
    commit (the step's kept claim and decision, put back by `RunSession.write`, its policy
    and `step.tool_started`). Not when the session's copy moved in the transaction (it is
    then `broken`) or the commit may have been made (`commit_unknown`): the call is then
    never run again by this session. A waiting run's call gets a fresh clock reading, so
    the retry judges its grant and records `run.resumed` at its own time (decision 0179)."""
    if session.broken is not None or refused.commit_unknown:
        return
    if allowed.waiting is not None:
        allowed = replace(allowed, waiting=replace(allowed.waiting, when=Now(session)))
    session.allow(allowed)


async def _finish_tool(
    session: RunSession,
    step: Step,
    spec: ToolSpec,
    started_at: datetime,
    observation: Observation,
    abort: str | None,
    *,
    cancelled: bool = False,
    keep_lease: bool = False,
    unknown: tuple[JSON, str] | None = None,
) -> None:
    """Record the call's outcome. `unknown` (the call's args, what happened) is a side
    effect whose tool raised `OutcomeUnknown`: the step is `interrupted` and the run
    pauses on an `interrupted_side_effect` approval in the same transaction, as after a
    crash (decision 0054)."""
    config = session.config
    written = written_observation(observation)  # before the transaction (decision 0128)
    # The run left RUNNING with the lease given back in this commit: a loop cancelled
    # meanwhile, or a caller that closes the session next (decision 0131). Not while a tool
    # of the session may still run: this call's thread (`keep_lease`), or an earlier call's
    # kept thread or task (cancelled mid-call), which the close then waits for (`_detach`).
    kept = session.lingering_tool
    keep_lease = keep_lease or (kept is not None and not kept.done())
    give_back = (cancelled or session.give_back_with_outcome) and not keep_lease
    gave_back = False

    def tx_finished(tx: Tx) -> None:
        nonlocal gave_back
        gave_back = False  # a retried transaction says it again
        lease = tx.lock_lease(session.run_id)
        if lease is None:
            raise RunStateError(f"run {session.run_id} disappeared")
        now = config.clock()
        duration_ms = max(0, duration_to_ms(now - started_at))
        finished: dict[str, Any] = {"tool": spec.name, "duration_ms": duration_ms}
        failed = observation.kind != ObservationKind.TOOL_RESULT
        if failed:
            content = observation.content if isinstance(observation.content, dict) else {}
            finished["error"] = str(content.get("error", content.get("failure", "")))
        else:
            finished["summary"] = observation.summary
            finished["content_hash"] = observation.content_hash
        # This session's lease: the owner and the epoch it was granted. The same owner's
        # lease granted again since (this session let go, its write left waiting with its
        # closed loop) is another session's, whose step this may be again (decision 0204).
        held = (
            lease.status == RunStatus.RUNNING
            and lease.held_by(config.owner)
            and lease.epoch == session.epoch
        )
        if not held:
            if lease.status == RunStatus.CANCELLED and lease.epoch == session.epoch:
                # Cancelled while we held the lease: the effect happened after the
                # cancel was recorded, so it is appended, changing neither row.
                late = tx.record_late_outcome(session.run_id, step.id, finished, now)
                session.run = late.run
                session.put_step(late.step)
                return
            # Someone else owns the run now: the next owner decides what this
            # step did; our late result is not recorded.
            if lease.held_by(config.owner) and lease.epoch != session.epoch:
                raise LeaseLostError(
                    f"run {session.run_id} was leased again by {lease.owner!r} at epoch "
                    f"{lease.epoch} while its tool ran (this session's lease: epoch "
                    f"{session.epoch}); the outcome is left for the current session"
                )
            raise LeaseLostError(
                f"run {session.run_id} changed owner while its tool ran; "
                "the outcome is left for the current owner"
            )
        if unknown is not None:
            session.put_step(
                tx.finish_tool(
                    session.current(step),
                    StepStatus.INTERRUPTED,
                    written,
                    finished,
                    failed_event=False,
                    now=now,
                )
            )
            args, what_happened = unknown
            decision = outcome_unknown_decision(spec, args, what_happened)
            payload = {
                "decision": decision.to_json(),
                "policy_id": INTERRUPTED_POLICY_ID,
                "spec_hash": config.spec_hashes[spec.name],
                "view": {},
            }
            from_step, from_run = (StepStatus.INTERRUPTED,), RunStatus.RUNNING
            pause_in(session, tx, now, step, spec, args, decision, payload, from_step, from_run)
            return
        if cancelled:
            status = StepStatus.INTERRUPTED
        elif failed:
            status = StepStatus.FAILED
        else:
            status = StepStatus.DONE
        active = session.active_ms_until(now)
        session.put_step(
            tx.finish_tool(
                session.current(step),
                status,
                written,
                finished,
                failed_event=failed and not cancelled,
                now=now,
            )
        )
        if abort is not None:
            session.run = tx.end_run(
                session.run_id,
                RunStatus.FAILED,
                TerminalReason.TOOL_ABORT,
                abort,
                active_ms_add=active,
                now=now,
            )
        elif spec.terminal and not failed:
            session.run = tx.end_run(
                session.run_id,
                RunStatus.COMPLETED,
                TerminalReason.GOAL_COMPLETED,
                "",
                result=observation.content,
                active_ms_add=active,
                now=now,
            )
        elif give_back:
            # Leave the run RUNNING for a later resume, but give up the lease now:
            # nobody should have to wait it out for a loop that has stopped.
            session.run = tx.leave_running(
                session.run_id, session.config.owner, epoch=session.epoch, active_ms_add=active
            )
            gave_back = True
        else:
            session.run = tx.add_active_time(
                session.run, session.config.owner, active, epoch=session.epoch
            )

    await session.write_outcome(plan.TOOL_FINISHED, tx_finished)
    if gave_back:
        session.lease_given_back = True
        session.stop_heartbeat()  # nothing left to renew


_MODEL_LIMITS = frozenset(
    {
        TerminalReason.LIMIT_MODEL_CALLS,
        TerminalReason.LIMIT_TOKENS,
        TerminalReason.LIMIT_COST,
        # A model request is an action: none starts past a time limit (decision 0139).
        TerminalReason.LIMIT_ACTIVE_TIME,
        TerminalReason.LIMIT_ELAPSED_TIME,
    }
)


def failure_reason(exc: BaseException) -> tuple[str, str]:
    """The reason and detail a run ends with when its agent (or loop) raised `exc`.

    A `LimitExceeded` naming a model limit ends it with that limit's reason,
    `ModelUnavailableError` with `model_unavailable`, anything else with
    `agent_error`.
    """
    if isinstance(exc, LimitExceeded):
        return _limit_reason(exc)
    if isinstance(exc, ModelUnavailableError):
        return TerminalReason.MODEL_UNAVAILABLE, exception_text(exc, named=False)
    return TerminalReason.AGENT_ERROR, exception_text(exc)


def _limit_reason(exc: LimitExceeded) -> tuple[str, str]:
    """A model limit's reason and detail; a `LimitExceeded` naming no model limit is the agent's."""
    try:  # an agent may raise its own LimitExceeded (subclass): read it defensively
        reason, detail = exc.reason, exc.detail
        if isinstance(reason, str) and isinstance(detail, str):
            plain = str.__str__(reason)
            if plain in _MODEL_LIMITS:
                return plain, str.__str__(detail)
    except Exception:
        pass
    return TerminalReason.AGENT_ERROR, exception_text(exc)


async def fail_step(session: RunSession, step: Step, exc: BaseException) -> None:
    """The agent could not decide `step`: it fails and the run ends (`failure_reason`)."""
    reason, detail = failure_reason(exc)
    await end(
        session, FromRunning(), step, reason, detail, Observation.invalid_decision(detail), None
    )
