"""One step of a run, as its lease holder takes it: propose a decision.

`propose` records the decision verbatim, validates it, ends the run for
`complete`/`fail`, and otherwise asks the policy and settles its answer
(`_settle.settle`, shared with a waiting run's resume). Beginning a step
(`RunSession.begin_step`) and executing the allowed call
(`RunSession.execute`) are the session's, since they hold its lease guard and
in-memory copy.
"""

from __future__ import annotations

from typing import Any

from ._session import RunMoved, RunSession, Verdict
from ._settle import FromRunning, settle
from .decisions import call_args, validate
from .records import DecisionKind, Observation, RunStatus, Step, StepStatus, TerminalReason


async def propose(session: RunSession, step: Step, decision: Any) -> Verdict:
    """Record, validate and judge one decision for the step `begin_step` returned."""
    try:
        recorded = await session.record_decision(step, decision)
        error = validate(recorded, session.config.compiled)
        if error is not None:
            await session.fail_current(step, Observation.invalid_decision(error))
            return Verdict.DENIED
        chosen = recorded.decision
        if chosen.kind == DecisionKind.COMPLETE:
            await session.end_with_step(
                step,
                RunStatus.COMPLETED,
                TerminalReason.GOAL_COMPLETED,
                "",
                step_status=StepStatus.DONE,
                result=chosen.result,
            )
            return Verdict.ENDED
        if chosen.kind == DecisionKind.FAIL:
            await session.end_with_step(
                step,
                RunStatus.FAILED,
                TerminalReason.GOAL_FAILED,
                chosen.message,
                step_status=StepStatus.DONE,
            )
            return Verdict.ENDED
        spec = session.config.specs[chosen.tool]
        args = call_args(chosen)
        check = await session.ask_policy(step, spec, args)
        return await settle(session, FromRunning(), step, spec, args, check)
    except RunMoved as moved:
        session.run = moved.run
        return Verdict.ENDED
