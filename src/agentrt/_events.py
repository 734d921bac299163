"""The event catalogue: every audit event type and the shape of its payload.

Events are written in the same transaction as the change they describe, never
read for control flow, and delivered to observers after commit in commit order.
Keeping the names and payload builders in one place is what lets a test pin a
full run's event sequence.

`step.policy` carries `decision`, `policy_id`, `spec_hash`, `view` (the
counters the policy saw) and, for a policy's own answer, `input`: what the
policy was given, by reference and by hash (`_policy_input`, decision 0072).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._records import Event, Observation

RUN_CREATED = "run.created"
RUN_STARTED = "run.started"
RUN_RESUMED = "run.resumed"
RUN_FINISHED = "run.finished"
STEP_STARTED = "step.started"
STEP_DECIDED = "step.decided"
STEP_POLICY = "step.policy"
STEP_TOOL_STARTED = "step.tool_started"
STEP_TOOL_FINISHED = "step.tool_finished"
STEP_FAILED = "step.failed"
STEP_INTERRUPTED = "step.interrupted"
STEP_RECONCILED = "step.reconciled"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_DECIDED = "approval.decided"
LIMIT_EXCEEDED = "limit.exceeded"
LOOP_DETECTED = "loop.detected"
LEASE_TAKEN_OVER = "lease.taken_over"
MODEL_DISPATCHED = "model.dispatched"
MODEL_COMPLETED = "model.completed"
MODEL_FAILED = "model.failed"

ALL = (
    RUN_CREATED,
    RUN_STARTED,
    RUN_RESUMED,
    RUN_FINISHED,
    STEP_STARTED,
    STEP_DECIDED,
    STEP_POLICY,
    STEP_TOOL_STARTED,
    STEP_TOOL_FINISHED,
    STEP_FAILED,
    STEP_INTERRUPTED,
    STEP_RECONCILED,
    APPROVAL_REQUESTED,
    APPROVAL_DECIDED,
    LIMIT_EXCEEDED,
    LOOP_DETECTED,
    LEASE_TAKEN_OVER,
    MODEL_DISPATCHED,
    MODEL_COMPLETED,
    MODEL_FAILED,
)

Observer = Callable[[Event], Any]


def observation_payload(observation: Observation) -> dict[str, Any]:
    """Payload of `step.failed`: the observation the step failed with."""
    return observation.to_json()


def deliver(observer: Observer | None, events: Iterable[Event]) -> None:
    """Hand committed events to an observer in commit order.

    An observer is a consumer's code running after the fact: its exception must
    not undo or interrupt a run whose record is already durable, so it is
    reported through the `logging` module and otherwise ignored.
    """
    if observer is None:
        return
    for event in events:
        try:
            observer(event)
        except BaseException as exc:
            # Nothing is awaited here: a CancelledError is the observer's own, never a
            # cancel of the loop, and like its other exceptions it stops nothing.
            if not isinstance(exc, Exception) and not _cancelled_error(exc):
                raise
            import logging

            logging.getLogger("agentrt").exception(
                "observer raised on event %s %s; the run goes on", event.seq, event.type
            )


def _cancelled_error(exc: BaseException) -> bool:
    import asyncio  # not at import: a command's help imports no event loop (0061)

    return isinstance(exc, asyncio.CancelledError)
