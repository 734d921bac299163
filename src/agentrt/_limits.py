"""The limits checked before each step starts, in their fixed order.

`step_count >= max_steps` → `limit_steps`; trailing failed observations
`>= max_consecutive_tool_failures` → `repeated_tool_failures`; active time
`>= max_active_time` → `limit_active_time`; `now - created_at >=
max_elapsed_time` → `limit_elapsed_time`; trailing identical outcomes `>=
loop_threshold` → `loop_detected`. Identical means same tool, same canonical
args and same observation content hash: a changing result is progress.
Model limits are enforced by the accounting caller before each dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ._records import DecisionKind, Run, Step, TerminalReason


@dataclass(frozen=True)
class LimitHit:
    reason: str
    detail: str
    loop: dict[str, Any] | None = None  # the loop.detected payload, for loop_detected


def trailing_failures(steps: Sequence[Step]) -> int:
    count = 0
    for step in reversed(steps):
        if step.observation is None or not step.observation.failed:
            break
        count += 1
    return count


def trailing_repeats(steps: Sequence[Step], args_hash: Callable[[Step], str]) -> int:
    """How many of the last steps share the last step's tool, args and outcome."""
    if not steps:
        return 0
    last = steps[-1]
    if (
        last.decision is None
        or last.decision.kind != DecisionKind.TOOL_CALL
        or last.observation is None
    ):
        return 0
    tool, outcome = last.decision.tool, last.observation.content_hash
    # The arguments' hashes are compared last, and only once an earlier step has the same
    # tool and outcome: in most runs none has, and the last step's is never computed.
    args: str | None = None
    count = 0
    for step in reversed(steps):
        if (
            step.decision is None
            or step.observation is None
            or step.decision.tool != tool
            or step.observation.content_hash != outcome
        ):
            break
        if count:  # the last step itself shares its own arguments
            if args is None:
                args = args_hash(last)
            if args_hash(step) != args:
                break
        count += 1
    return count


def time_limit_hit(run: Run, now: datetime, active_time: timedelta) -> LimitHit | None:
    """The run's active or elapsed time limit reached at `now`, or None: checked before a
    step is claimed and before each model request (an action each)."""
    limits = run.limits
    if limits.max_active_time is not None and active_time >= limits.max_active_time:
        return LimitHit(
            TerminalReason.LIMIT_ACTIVE_TIME,
            f"active time {active_time} reached max_active_time {limits.max_active_time}",
        )
    if limits.max_elapsed_time is not None and run.created_at is not None:
        elapsed = now - run.created_at
        if elapsed >= limits.max_elapsed_time:
            return LimitHit(
                TerminalReason.LIMIT_ELAPSED_TIME,
                f"elapsed time {elapsed} reached max_elapsed_time {limits.max_elapsed_time}",
            )
    return None


def check(
    run: Run,
    steps: Sequence[Step],
    now: datetime,
    active_time: timedelta,
    args_hash: Callable[[Step], str],
) -> LimitHit | None:
    limits = run.limits
    if run.step_count >= limits.max_steps:
        return LimitHit(
            TerminalReason.LIMIT_STEPS,
            f"{run.step_count} steps reached max_steps {limits.max_steps}",
        )
    failures = trailing_failures(steps)
    if failures >= limits.max_consecutive_tool_failures:
        return LimitHit(
            TerminalReason.REPEATED_TOOL_FAILURES,
            f"{failures} failed steps in a row reached max_consecutive_tool_failures "
            f"{limits.max_consecutive_tool_failures}",
        )
    timed = time_limit_hit(run, now, active_time)
    if timed is not None:
        return timed
    repeats = trailing_repeats(steps, args_hash)
    if repeats >= limits.loop_threshold:
        last = steps[-1]
        assert last.decision is not None and last.observation is not None
        return LimitHit(
            TerminalReason.LOOP_DETECTED,
            f"the same call of {last.decision.tool!r} had the same outcome {repeats} times",
            loop={
                "repeats": repeats,
                "tool": last.decision.tool,
                "args_hash": args_hash(last),
                "observation_hash": last.observation.content_hash,
            },
        )
    return None
