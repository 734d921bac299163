"""Taking over a RUNNING run whose owner died, and the interruption contract.

The run is taken in one transaction (`take_lease` with the expired lease as the
compare-and-set, `lease.taken_over`, unsettled model attempts charged, in-flight
steps `interrupted`). A lease live by the wall clock is taken only when its
holder is provably dead on this host (`_continuation.judge`, on a first look and
again on the run as locked). Then the contract
decides: the runtime never runs an interrupted side effect again by itself: a
non-read-only call that was executing pauses on an `interrupted_side_effect`
approval; a read-only one (as recorded and as registered now) or a deciding step
continues; a tool gone or args no longer valid end the run `reconcile_conflict`;
a consumer's `reconcile` may say what happened instead, and, without one, a
tool's own reconciliation may settle its interrupted call (`_tool_reconcile`).
When nothing is in doubt (no step was executing, no `reconcile` to ask: a lease
given back, or an owner gone while it decided), `run.resumed` commits with the
take, one commit where there were two (decision 0152).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from . import _commit_plan as plan
from ._canonical import check_json, copy_json, to_text
from ._continuation import Continuer, Refusal, RunFacts, judge, moved_on
from ._decisions import call_args
from ._errors import NotFoundError, RunStateError
from ._foreign import exception_text, plain_text, type_name
from ._lease import holder_json
from ._policy import INTERRUPTED_POLICY_ID, interrupted_side_effect_decision
from ._records import (
    PolicyDecision,
    PolicyOutcome,
    ReconcileAnswer,
    ReconcileOutcome,
    Reconciliation,
    Run,
    RunStatus,
    RunView,
    SideEffect,
    Step,
    StepStatus,
    TerminalReason,
    ToolCall,
    ToolSpec,
)
from ._session import (
    LoopConfig,
    RunSession,
    cancelled_by_caller,
    load,
    maybe_await,
    release_lease,
    run_io,
    validate_policy_decision,
)
from ._settle import FromRunning, pause, pause_in, settle
from ._shown import shown_view
from ._store import Tx
from ._store._records import LeaseState
from ._tool_reconcile import DECIDER, Answer, ask, notice, tool_reconcile_of

RECONCILE_POLICY_ID = "agentrt:reconcile"


TAKE_ATTEMPTS = 3
"""Loads a takeover makes of a run that changes between its load and its take."""


class _MovedSinceLoad(Exception):
    """The run changed between the takeover's load and its take: nothing was written."""


async def take_over(config: LoopConfig, run_id: str) -> RunSession:
    """Take a RUNNING run whose lease lapsed; apply the interruption contract."""
    for _ in range(TAKE_ATTEMPTS):
        try:
            session = await _take(config, run_id)
        except _MovedSinceLoad:
            continue
        break
    else:
        raise RunStateError(
            f"run {run_id} changed {TAKE_ATTEMPTS} times while it was being taken over "
            "(another process is working on it); nothing was taken"
        )
    # The lease is ours from here: keep it renewed while reconcile (consumer code,
    # maybe slow) decides, so nobody else takes the run over meanwhile.
    session.start_heartbeat()
    if session.gone_on:
        return session  # nothing was in doubt: `run.resumed` committed with the take
    try:
        await _after_interruption(session)
    except BaseException:
        # The caller never gets this session, so it cannot stop its heartbeat: stop
        # it here, or the lease would be renewed for as long as this process lives
        # and nobody could ever resume the run. A cancelled caller also gives the
        # lease back (nothing is executing): a resume need not wait it out.
        session.stop_heartbeat()
        await asyncio.shield(run_io(lambda: release_lease(config, run_id, session.epoch)))
        raise
    return session


async def _take(config: LoopConfig, run_id: str) -> RunSession:
    """Load the run, judge its lease, and take it in one transaction (`plan.TAKEN_OVER`),
    provided the run is still as loaded (the lease's epoch, the run row, its last step):
    the contract then acts on the run's steps as they are under the lease taken (decision
    0134)."""

    def read_lease() -> LeaseState:
        lease = config.store.lease_state(run_id)
        if lease is None:
            raise NotFoundError(f"no run {run_id}")
        return lease

    first = await run_io(read_lease)
    run, steps, approvals = await run_io(lambda: load(config, run_id))
    if first.status != RunStatus.RUNNING:
        raise RunStateError(f"run {run_id} is {first.status}; only a RUNNING run can be taken over")
    me = Continuer(config.owner)
    # Off the event loop: a shared store's clock is a round trip to its server.
    first_now = await run_io(partial(config.store.lease_now, config.wall))
    _judged(first, run.origin, me, lambda: first_now, config)
    now = config.clock()
    session = RunSession(config, run, steps, approvals, epoch=0, mark=now)
    # Nothing in doubt once taken (what `_after_interruption` would only go on from):
    # `run.resumed` then commits with the take (`plan.TAKEN_OVER_GOING_ON`, decision 0152).
    going_on = _nothing_in_doubt(config, run, steps)

    def tx_take(tx: Tx) -> None:
        guarded = tx.lock_run(run_id)
        if guarded is None:
            raise NotFoundError(f"no run {run_id}")
        lease = guarded.lease
        if lease.status != RunStatus.RUNNING:
            raise moved_on(run_id, lease.status, "taking it over")
        if lease.epoch != first.epoch or guarded.run != run or _last_moved(tx, steps):
            # Someone held the run (or wrote to it) since the lease was read before the
            # load: the steps loaded may be behind the record, and the contract must not
            # act on a step the run has gone on from. Load it again.
            raise _MovedSinceLoad
        lease_now = tx.lease_now(config.wall)
        proof = _judged(lease, guarded.run.origin, me, lambda: lease_now, config)
        taken = tx.take_over(
            run_id,
            owner=config.owner,
            expires_at=lease_now + config.lease_ttl,
            holder=holder_json(),
            previous=lease,
            proof=proof,
            now=now,
        )
        session.epoch = taken.epoch
        for step in taken.interrupted:
            session.put_step(step)
        session.run = taken.run
        if going_on:
            if _interrupted_executing(session.steps) is not None:
                raise _MovedSinceLoad  # cannot be (the last step is as loaded): load again
            # As the two commits it stands for: the take's crash point, then the going on.
            session.probe_in_tx(plan.POINT_INTERRUPTED)
            tx.go_on_after_interruption(run_id, {}, config.clock())
            session.probe_in_tx(plan.POINT_RESUMED)
            session.gone_on = True

    if not going_on:
        await session.write(plan.TAKEN_OVER, tx_take)
        return session
    await session.write(plan.TAKEN_OVER_GOING_ON, tx_take, None)
    await session.probe(plan.POINT_INTERRUPTED)
    await session.probe(plan.POINT_RESUMED)
    return session


def _nothing_in_doubt(config: LoopConfig, run: Run, steps: Sequence[Step]) -> bool:
    """Whether the interruption contract would only go on once the run is taken: no
    `reconcile` of the consumer's to ask, a run that decodes, and no step that was (or
    is) executing a tool. The take checks the last step is still as loaded."""
    if config.reconcile is not None or run.decode_error:
        return False
    if not steps:
        return True
    last = steps[-1]
    return last.status != StepStatus.EXECUTING and _interrupted_executing(steps) is None


def _last_moved(tx: Tx, steps: Sequence[Step]) -> bool:
    """Whether the last step loaded stands otherwise in the record now. A write a holder
    whose lease lapsed may still make to its own step (a policy's denial, a decision)
    changes no run row; the steps before the last are never written again."""
    return bool(steps) and tx.step_record(steps[-1].id) != steps[-1]


def _judged(
    lease: LeaseState,
    origin: str,
    me: Continuer,
    lease_now: Callable[[], datetime],
    config: LoopConfig,
) -> dict[str, Any]:
    """The continuation's judgement of a RUNNING run's lease: the proof, or its refusal raised."""
    judged = judge(
        RunFacts(lease.run_id, lease.status, origin, lease),
        me,
        lease_now=lease_now,
        now=config.clock,
    )
    if isinstance(judged, Refusal):
        raise judged.error
    return judged.proof or {}


def _interrupted_executing(steps: Sequence[Step]) -> Step | None:
    """The last step, when it was interrupted while executing its tool."""
    if not steps:
        return None
    last = steps[-1]
    if last.status != StepStatus.INTERRUPTED or last.observation is None:
        return None
    content = last.observation.content
    if isinstance(content, dict) and content.get("previous_status") == "executing":
        return last
    return None


async def _after_interruption(session: RunSession) -> None:
    """The decision table of the interruption contract."""
    config = session.config
    if session.run.decode_error:
        # store.md: the driver will not continue a run whose record will not decode.
        await _end_running(
            session,
            TerminalReason.INTERNAL_ERROR,
            f"the run's record cannot be read back ({session.run.decode_error}); "
            "it is not continued",
        )
        return
    step = _interrupted_executing(session.steps)
    if step is not None and (step.decision is None or step.decode_error):
        await _end_running(
            session,
            TerminalReason.RECONCILE_CONFLICT,
            f"the interrupted step's record cannot be read back ({step.decode_error}); "
            "what it was executing is unknown",
        )
        return
    if config.reconcile is not None:
        await _reconcile(session, step)
        return
    if step is None or step.decision is None:
        await _continue(session)
        return
    spec = config.specs.get(step.decision.tool)
    args = call_args(step.decision)
    conflict = _call_conflict(step, config)
    if conflict is not None or spec is None:
        await _end_running(session, TerminalReason.RECONCILE_CONFLICT, conflict or "")
        return
    if spec.side_effect == SideEffect.READ_ONLY and _recorded_read_only(session, step):
        await _continue(session)
        return
    if tool_reconcile_of(config.tools.get(spec.name)) is not None:
        await _settle_by_tool(session, step, spec, args)
        return
    decision = interrupted_side_effect_decision(spec, args)
    await _pause_interrupted(session, step, decision, INTERRUPTED_POLICY_ID)


async def _settle_by_tool(session: RunSession, step: Step, spec: ToolSpec, args: Any) -> None:
    """The tool's own reconciliation decides what its interrupted call did (decision 0067)."""
    config = session.config
    fn = tool_reconcile_of(config.tools.get(spec.name))
    assert fn is not None and step.decision is not None
    call = ToolCall(
        run_id=session.run_id, step_id=step.id, args=copy_json(args), lease_epoch=session.epoch
    )
    answer = await ask(fn, spec, call)
    payload = answer.payload(spec, call)
    if answer.answer == ReconcileAnswer.FOUND:
        await _complete_found(session, step, spec, answer, payload)
        return
    resumed = {"reconcile": DECIDER, "answer": answer.answer}
    if answer.answer == ReconcileAnswer.SAFE_TO_REPEAT:

        def tx_vouched(tx: Tx) -> None:
            session.require_lease(tx)
            now = config.clock()
            tx.record_reconciled(session.run_id, step.id, payload, now)
            tx.go_on_after_interruption(session.run_id, resumed, now)

        await session.write(plan.GONE_ON, tx_vouched)
        # The same request, on the same step, judged as any call is: the policy
        # allows it (held for execute), asks a person, or denies it.
        check = await session.ask_policy(step, spec, args)
        await settle(session, FromRunning((StepStatus.INTERRUPTED,)), step, spec, args, check)
        return

    # A person decides: the answer and the pause it leads to in one transaction,
    # so the record never holds an answer that nothing acted on.
    origin = FromRunning((StepStatus.INTERRUPTED,))
    decision = _reconciled_pause(spec, args, answer)
    policy = _interrupted_payload(config, spec, decision, INTERRUPTED_POLICY_ID)

    def tx_answered(tx: Tx) -> None:
        now = origin.enter(session, tx, step)
        tx.record_reconciled(session.run_id, step.id, payload, now)
        pause_in(
            session, tx, now, step, spec, args, decision, policy, origin.from_step, origin.from_run
        )

    await session.write(plan.ASKED, tx_answered)


async def _complete_found(
    session: RunSession, step: Step, spec: ToolSpec, answer: Answer, payload: dict[str, Any]
) -> None:
    """The effect happened: the step is done with the recovered result; the run goes on."""
    assert answer.observation is not None
    observation = answer.observation

    terminal = spec.terminal

    def tx_found(tx: Tx) -> None:
        session.require_lease(tx)
        now = session.config.clock()
        session.put_step(tx.complete_reconciled(session.current(step), observation, payload, now))
        if terminal:  # a terminal tool's success ends the run, as when it returns
            session.end_in(
                tx,
                now,
                RunStatus.COMPLETED,
                TerminalReason.GOAL_COMPLETED,
                "",
                result=observation.content,
            )
            return
        tx.go_on_after_interruption(
            session.run_id, {"reconcile": DECIDER, "answer": answer.answer}, now
        )

    await session.write(plan.RECONCILED, tx_found)


def _reconciled_pause(spec: ToolSpec, args: Any, answer: Answer) -> PolicyDecision:
    """The contract's pause, its notice saying what the tool's reconciliation answered."""
    base = interrupted_side_effect_decision(spec, args)
    presentation = dict(base.presentation) if isinstance(base.presentation, dict) else {}
    presentation["notice"] = notice(answer)
    presentation["reconciliation"] = {
        "answer": answer.answer,
        "detail": answer.detail,
        **({"error": answer.error} if answer.error else {}),
    }
    return replace(base, presentation=presentation)


def _recorded_read_only(session: RunSession, step: Step) -> bool:
    """Was the tool read-only *as recorded* when the step started it?

    The exemption must not follow a tool re-declared read-only after the fact:
    an interrupted call continues only if it was read-only then and is now.
    """
    if not step.spec_hash:
        return False
    try:
        recorded = session.config.store.tool_spec(step.spec_hash)
    except Exception:
        return False
    return recorded is not None and recorded.side_effect == SideEffect.READ_ONLY


def _call_conflict(step: Step, config: LoopConfig) -> str | None:
    """Why the interrupted call cannot wait on an approval, or None if it can."""
    assert step.decision is not None
    tool = step.decision.tool
    spec = config.specs.get(tool)
    if spec is None:
        return f"the interrupted step's tool {tool!r} is no longer registered"
    if config.compiled[tool].check(call_args(step.decision)):
        return f"the interrupted step's args no longer match the schema of {tool!r}"
    return None


async def _end_running(
    session: RunSession,
    reason: str,
    detail: str,
    status: str = RunStatus.FAILED,
    result: Any = None,
) -> None:
    def tx_end(tx: Tx) -> None:
        session.require_lease(tx)
        now = session.config.clock()
        session.end_in(tx, now, status, reason, detail, result=result)

    await session.write(plan.RUN_ENDED, tx_end)


async def _pause_interrupted(
    session: RunSession, step: Step, decision: PolicyDecision, policy_id: str
) -> None:
    config = session.config
    assert step.decision is not None
    spec = config.specs[step.decision.tool]
    args = call_args(step.decision)
    payload = _interrupted_payload(config, spec, decision, policy_id)
    await pause(
        session, FromRunning((StepStatus.INTERRUPTED,)), step, spec, args, decision, payload
    )


def _interrupted_payload(
    config: LoopConfig, spec: ToolSpec, decision: PolicyDecision, policy_id: str
) -> dict[str, Any]:
    """The policy record of the contract's pause on an interrupted call."""
    return {
        "decision": decision.to_json(),
        "policy_id": policy_id,
        "spec_hash": config.spec_hashes[spec.name],
        "view": {},
    }


async def _reconcile(session: RunSession, step: Step | None) -> None:
    """The consumer's reconciliation decides what the interruption means."""
    config = session.config
    view = shown_view(
        RunView(run=session.run, steps=session.steps.view(), approvals=tuple(session.approvals))
    )
    try:
        verdict = await maybe_await(config.reconcile(view))
    except asyncio.CancelledError as exc:
        if cancelled_by_caller():
            raise
        # Its own (it awaited something cancelled): its failure, as any exception of its.
        await _end_running(session, TerminalReason.INTERNAL_ERROR, _raised("reconcile", exc))
        return
    except Exception as exc:  # consumer code: its failure ends the run, loudly
        await _end_running(session, TerminalReason.INTERNAL_ERROR, _raised("reconcile", exc))
        return
    if not isinstance(verdict, Reconciliation):
        await _end_running(
            session,
            TerminalReason.INTERNAL_ERROR,
            f"reconcile returned {type_name(verdict)}, not a Reconciliation",
        )
        return
    read = _read_verdict(verdict)
    if isinstance(read, _Unreadable):
        await _end_running(session, TerminalReason.INTERNAL_ERROR, read.why)
        return
    outcome, detail = read
    if outcome == ReconcileOutcome.CONTINUE:
        await _continue(session, {"reconcile": "continue", "detail": detail})
    elif outcome == ReconcileOutcome.COMPLETED:
        try:
            result = verdict.result  # read once: what is checked is what is recorded
            check_json(result)
            to_text(result)
        except Exception as exc:  # JSONValueError, or whatever a hostile value raises
            await _end_running(
                session,
                TerminalReason.INTERNAL_ERROR,
                "reconcile completed with a result that is not usable JSON: "
                + exception_text(exc, named=False),
            )
            return
        await _end_running(
            session, TerminalReason.GOAL_COMPLETED, detail, RunStatus.COMPLETED, result
        )
    elif outcome == ReconcileOutcome.WAITING:
        if step is None or step.decision is None:
            await _end_running(
                session,
                TerminalReason.RECONCILE_CONFLICT,
                "reconcile asked to wait, but no call was executing when the run was interrupted",
            )
            return
        conflict = _call_conflict(step, config)
        if conflict is not None:
            await _end_running(session, TerminalReason.RECONCILE_CONFLICT, conflict)
            return
        pause = verdict.pause
        error = validate_policy_decision(pause)
        if error is None and pause is not None and pause.outcome != PolicyOutcome.REQUIRE_APPROVAL:
            error = f"reconcile's pause must require an approval, not {pause.outcome!r}"
        if error is not None or pause is None:
            await _end_running(
                session, TerminalReason.INTERNAL_ERROR, f"reconcile's pause is unusable: {error}"
            )
            return
        await _pause_interrupted(session, step, pause, RECONCILE_POLICY_ID)
    elif outcome == ReconcileOutcome.CONFLICT:
        await _end_running(session, TerminalReason.RECONCILE_CONFLICT, detail)
    else:
        await _end_running(
            session,
            TerminalReason.INTERNAL_ERROR,
            f"reconcile returned an unknown outcome {plain_text(repr(outcome), MAX_SHOWN)}",
        )


MAX_SHOWN = 200
"""Characters of an unknown outcome's repr kept in the run's reason detail."""


@dataclass(frozen=True)
class _Unreadable:
    """A reconciliation's verdict whose outcome or detail cannot be read: why."""

    why: str


def _raised(who: str, exc: BaseException) -> str:
    return f"{who} raised {exception_text(exc)}"


def _read_verdict(verdict: Reconciliation) -> tuple[str, str] | _Unreadable:
    """A verdict's outcome and its detail as storable text, each read once; never raises.

    The detail becomes the run's reason detail or part of `run.resumed`: a lone
    surrogate, which no UTF-8 record holds, is kept backslash-escaped (as a tool's
    reconciliation's detail is), and a detail that is not a str is its repr. An
    outcome that is not a str is unknown; one whose reading raises (a repr that
    raises, a hostile property) is unreadable: the run ends `internal_error`.
    """
    try:
        outcome: object = verdict.outcome
        raw: object = verdict.detail
        text = raw if isinstance(raw, str) else repr(raw)
        detail = plain_text(text, str.__len__(text)) if isinstance(text, str) else ""
        if not isinstance(outcome, str):
            shown = plain_text(repr(outcome), MAX_SHOWN)
            return _Unreadable(f"reconcile returned an unknown outcome {shown}")
        return str.__str__(outcome), detail
    except Exception as exc:
        return _Unreadable(
            f"reconcile's verdict could not be read: reading its outcome or detail raised "
            f"{exception_text(exc)}"
        )


async def _continue(session: RunSession, extra: dict[str, Any] | None = None) -> None:
    def tx_continue(tx: Tx) -> None:
        session.require_lease(tx)
        now = session.config.clock()
        tx.go_on_after_interruption(session.run_id, extra or {}, now)

    await session.write(plan.GONE_ON, tx_continue)
