"""A tool's own reconciliation of its interrupted call (decision 0067).

After a takeover, a step that was executing a tool that is not read-only waits
for a person, unless a run-level `reconcile` decides, or the tool has its own
reconciliation (`@tool(..., reconcile=fn)`, a `reconcile` method on a
ToolSpec-based tool, or an adapter's `Classification(..., reconcile=fn)`,
decision 0091, which the adapter's tool carries). That is consumer
code: it receives the `ToolCall` as recorded (same run, step, args and
`operation_id`; the new owner's `lease_epoch`) and answers with a `Reconciled`:

- `found(result)`: the step completes with the recovered result; the run goes on;
- `not_found(safe_to_repeat=True)`: the same request runs again on the same
  step with the same operation id, after the schema check and the policy;
- `not_found()`: a person decides, the answer shown in the approval's notice;
- `unknown()`: a person decides.

An exception, an answer later than the tool's own timeout, or an unusable
answer (not a `Reconciled`, an unknown answer, a found result that is not
usable JSON) is `unknown`, with the failure recorded. Every answer is one
`step.reconciled` event naming the tool's reconciliation as the decider.

This module asks and checks; `_takeover` acts on the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from ._execute import _awaitable, _awaited, _cancel, _guarded, result_observation
from ._foreign import exception_text, plain_text, type_name
from ._records import (
    Observation,
    ObservationKind,
    ReconcileAnswer,
    Reconciled,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from ._tools import Tool

DECIDER = "tool_reconcile"
"""How `step.reconciled` names a tool's own reconciliation as the decider."""

MAX_DETAIL = 2000
"""Characters of a reconciliation's detail (or failure) kept in the record."""

ToolReconcile = Callable[[ToolCall], "Reconciled | Awaitable[Reconciled]"]

_ANSWERS = {str(a) for a in ReconcileAnswer}


def tool_reconcile_of(tool: object) -> ToolReconcile | None:
    """The tool's own reconciliation, or None. Never raises (a hostile attribute is none)."""
    if tool is None:
        return None
    try:
        fn = getattr(tool, "reconcile", None)
    except Exception:
        return None
    return cast(ToolReconcile, fn) if callable(fn) else None


@dataclass(frozen=True)
class Answer:
    """A reconciliation's answer as the runtime takes it.

    `answer` one of `ReconcileAnswer`; `detail` the reconciliation's own words
    (plain text, capped); `error` why its answer was taken as `unknown` ("" when
    it answered itself); `observation` the recovered result for `found`.
    """

    answer: str
    detail: str
    error: str = ""
    observation: Observation | None = None

    def payload(self, spec: ToolSpec, call: ToolCall) -> dict[str, Any]:
        """The `step.reconciled` event's payload."""
        out: dict[str, Any] = {
            "decider": DECIDER,
            "tool": spec.name,
            "operation_id": call.operation_id,
            "answer": self.answer,
            "detail": self.detail,
        }
        if self.error:
            out["error"] = self.error
        if self.observation is not None:
            out["summary"] = self.observation.summary
            out["content_hash"] = self.observation.content_hash
        return out


class _AsTool:
    """The reconciliation called the way a tool is (own thread or coroutine)."""

    def __init__(self, fn: ToolReconcile) -> None:
        self.call = fn


async def ask(fn: ToolReconcile, spec: ToolSpec, call: ToolCall) -> Answer:
    """Ask the tool's reconciliation about `call`, bounded by the tool's own timeout.

    Never raises but for the caller's cancellation: whatever goes wrong is `unknown`,
    a `CancelledError`, `KeyboardInterrupt` or `SystemExit` the reconciliation (or
    an awaitable it returned) raised too. A plain function runs on a daemon thread
    of its own, an `async def` one is awaited, and an awaitable it returns is
    awaited within the same bound; past the timeout either is left behind (its
    late answer discarded). As for a tool (`_execute.invoke`), it runs in a task
    of its own, so its own `CancelledError` (that task ends, ours was not
    cancelled) is told apart from the caller's (our `await` raises).
    """
    task = asyncio.ensure_future(_answer(fn, call))
    timeout = spec.timeout.total_seconds()
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        await _cancel(task, None)
        raise
    if task not in done:
        await _cancel(task, None)
        return _unknown(f"the reconciliation did not answer within {timeout:g}s")
    ok, value = task.result()
    if not ok:
        return _unknown(f"the reconciliation raised {_raised_text(value)}")
    return check(spec, value)


async def _answer(fn: ToolReconcile, call: ToolCall) -> tuple[bool, Any]:
    """(True, answer) or (False, what was raised); never ends raising (`_guarded`)."""
    shim = cast(Tool, _AsTool(fn))
    # A callable object whose __call__ is a coroutine function is awaited too.
    ok, value = await _guarded(shim, call, None)
    if ok and _awaitable(value):  # an `async def` that returned an awaitable (one that
        # cannot be inspected is not: `check` says what it is); its own cancel or exit
        # is its answer: unknown
        return await _awaited(value)
    return ok, value


def check(spec: ToolSpec, value: object) -> Answer:
    """What the runtime takes `value` to answer; anything unusable is `unknown`."""
    if not issubclass(type(value), Reconciled):  # never `isinstance`: it may be hostile
        return _unknown(f"the reconciliation returned {type_name(value)}, not a Reconciled")
    reconciled = cast(Reconciled, value)
    try:
        answer = reconciled.answer
        detail_value: object = reconciled.detail
        if not isinstance(answer, str) or answer not in _ANSWERS:
            return _unknown(f"the reconciliation answered {plain_text(repr(answer), 200)}")
        detail = _text(detail_value)
        if answer != ReconcileAnswer.FOUND:
            return Answer(str(ReconcileAnswer(answer)), detail)
        observation = result_observation(spec, ToolResult(reconciled.result, reconciled.summary))
    except BaseException as exc:  # a hostile subclass: its answer cannot be read. Nothing
        # is awaited here, so even a CancelledError (or an exit) is the object's own.
        return _unknown(f"the reconciliation's answer could not be read: {_raised_text(exc)}")
    if observation.kind != ObservationKind.TOOL_RESULT:
        content = observation.content if isinstance(observation.content, dict) else {}
        why = plain_text(str(content.get("error", "")), MAX_DETAIL)
        return Answer(
            str(ReconcileAnswer.UNKNOWN),
            detail,
            error=f"the reconciliation found a result that is not usable: {why}",
        )
    return Answer(str(ReconcileAnswer.FOUND), detail, observation=observation)


def _unknown(error: str) -> Answer:
    return Answer(str(ReconcileAnswer.UNKNOWN), "", error=plain_text(error, MAX_DETAIL))


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return plain_text(value, MAX_DETAIL)
    return plain_text(repr(value), MAX_DETAIL)


def _raised_text(exc: BaseException) -> str:
    return exception_text(exc, limit=MAX_DETAIL)


def notice(answer: Answer) -> str:
    """The approval's notice when a person decides after the tool's reconciliation."""
    start = "This call started, and the process stopped before its outcome was recorded. "
    if answer.answer == ReconcileAnswer.NOT_FOUND:
        said = "The tool's reconciliation looked for its effect and did not find it"
    else:
        said = "The tool's reconciliation could not tell whether it took effect"
    why = answer.error or answer.detail
    if why:
        said += f": {why.rstrip('.')}"
    return (
        f"{start}{said}. Approving runs it again with these arguments (the same "
        "operation id); rejecting ends the run."
    )
