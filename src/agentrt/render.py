"""Steps to messages and back: the provider-neutral conversation of a run.

This module owns how a run's record becomes a model request and how a model's
reply becomes a `Decision` (models.md, "Rendering"):

- `messages(input, options)` renders the goal as the opening user message,
  then, for each step that has both a decision and an outcome, the assistant
  turn (the model's text and its tool call, under a tool-use id derived from
  the step id) and a user turn with the result. The most recent
  `options.full_results` results are shown in full (their JSON text capped at
  `options.content_cap` characters with a visible marker); older ones are shown
  by their summary. A denied, invalid or interrupted call is shown as an error
  result on its own call, followed by a nudge keyed on what happened.
- The render reads only what is recorded and stable (the goal, each step's id,
  decision and observation, the tool specs, the options), and a step's status
  only to tell whether its outcome is settled: never times, approvals,
  policies or counters. So the same run renders
  byte-identical requests every time, in any process, before and after a pause
  or a crash, and a step that has not settled yet (deciding, awaiting approval)
  renders nothing until it has, which keeps each request a prefix of the next
  while no result crosses the window.
- `decide(response)` maps a reply to a decision: one tool use → `tool_call`
  (extra ones named in the reason, never run); refusal or context overflow →
  `fail`; cut off at `max_tokens` → `truncated`, no tool use → `no_tool_call`,
  both deliberately invalid so the runtime records and refuses them and no
  partial call ever runs. Every text kept is capped.

See docs/decisions/0009-replay-and-render.md for the choices the spec leaves open.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._canonical import canonical_json, to_text
from ._errors import ConfigError
from ._model import (
    ContentBlock,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ._records import (
    Decision,
    DecisionKind,
    DecisionOrigin,
    ObservationKind,
    Run,
    Step,
    StepInput,
    StepStatus,
)

__all__ = [
    "DEFAULT_SYSTEM",
    "AssistantHook",
    "ObservationHook",
    "OpeningHook",
    "RenderOptions",
    "decide",
    "messages",
    "request_bytes",
    "same_renders",
    "tool_use_id",
]

DEFAULT_SYSTEM = (
    "You work toward the user's goal by calling the tools you are given, exactly one "
    "tool call per reply, with a short reason before it. Every call is checked by a "
    "policy and some wait for a person's approval. A result marked as an error says "
    "what happened and what to do next. When the goal is reached, call the tool that "
    "finishes it."
)

OpeningHook = Callable[[Run], Sequence[ContentBlock]]
"""Builds the opening user message from the run (default: its goal as text)."""

AssistantHook = Callable[[Step, Sequence[ContentBlock]], Sequence[ContentBlock]]
"""Given a step and the default assistant turn, returns the turn to send."""

ObservationHook = Callable[[Step, Sequence[ContentBlock]], Sequence[ContentBlock]]
"""Given a step and the default result turn, returns the turn to send."""

_MIN_CAP = 64  # room for the truncation marker and some text before it
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what every provider accepts as a tool name
_TOOL_USE_ID_PREFIX = "toolu_"
_PENDING_STATUSES = frozenset(
    {StepStatus.DECIDING, StepStatus.AWAITING_APPROVAL, StepStatus.EXECUTING}
)


@dataclass(frozen=True)
class RenderOptions:
    """How a run is rendered and a reply decoded.

    Hooks must depend only on recorded, stable fields (the goal, step ids,
    decisions, observations) for renders to stay byte-identical.
    """

    system: str = DEFAULT_SYSTEM
    max_output_tokens: int | None = 4096
    full_results: int = 8
    content_cap: int = 16_000
    max_reason: int = 2_000
    opening: OpeningHook | None = None
    assistant: AssistantHook | None = None
    observation: ObservationHook | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.system, str):
            raise ConfigError("RenderOptions.system must be a string")
        if self.max_output_tokens is not None and not _positive_int(self.max_output_tokens):
            raise ConfigError("RenderOptions.max_output_tokens must be None or a positive integer")
        if not _int(self.full_results) or self.full_results < 0:
            raise ConfigError("RenderOptions.full_results must be a non-negative integer")
        for name in ("content_cap", "max_reason"):
            value = getattr(self, name)
            if not _int(value) or value < _MIN_CAP:
                raise ConfigError(f"RenderOptions.{name} must be an integer of at least {_MIN_CAP}")
        for name in ("opening", "assistant", "observation"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise ConfigError(f"RenderOptions.{name} must be callable or None")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# --------------------------------------------------------------------------- steps → request


def tool_use_id(step: Step) -> str:
    """The id of a step's tool use: `toolu_` + the first 24 hex of sha256(step id).

    Derived from the step id alone, so it is the same in every render, every
    process, and is unique per step for all practical purposes.
    """
    digest = hashlib.sha256(step.id.encode("utf-8", "backslashreplace")).hexdigest()
    return _TOOL_USE_ID_PREFIX + digest[:24]


def messages(input: StepInput, options: RenderOptions | None = None) -> ModelRequest:
    """The request for the step being decided: system, conversation, tools, output cap."""
    options = options or RenderOptions()
    settled = sorted((s for s in input.steps if _settled(s)), key=lambda s: s.index)
    finishers = tuple(spec.name for spec in input.tools if spec.terminal)
    first_full = max(0, len(settled) - options.full_results)
    conversation = [Message("user", _opening(input.run, options))]
    for position, step in enumerate(settled):
        assistant, result = _turns(step, position >= first_full, options, finishers)
        conversation.append(Message("assistant", assistant))
        conversation.append(Message("user", result))
    return ModelRequest(
        system=options.system,
        messages=tuple(conversation),
        tools=tuple(input.tools),
        max_output_tokens=options.max_output_tokens,
    )


def request_bytes(request: ModelRequest) -> bytes:
    """The canonical bytes of a request: what "byte-identical renders" compares."""
    return canonical_json(request.to_json())


def same_renders(
    input_a: StepInput, input_b: StepInput, options: RenderOptions | None = None
) -> bool:
    """Whether two inputs render byte-identical requests under `options`."""
    return request_bytes(messages(input_a, options)) == request_bytes(messages(input_b, options))


def _settled(step: Step) -> bool:
    # A step renders once it has a decision and a settled outcome. The step being
    # decided (no decision yet), one awaiting approval or executing (its outcome
    # pending, even an interrupted call waiting on a person to re-run it), and a
    # `complete`/`fail` that ended the run (no outcome ever) render nothing.
    return (
        step.decision is not None
        and step.observation is not None
        and step.status not in _PENDING_STATUSES
    )


def _opening(run: Run, options: RenderOptions) -> tuple[ContentBlock, ...]:
    if options.opening is None:
        return (TextBlock(run.goal if run.goal.strip() else "(no goal was given)"),)
    blocks = _blocks(options.opening(run), "opening")
    if any(not isinstance(b, TextBlock) for b in blocks):
        raise ConfigError("RenderOptions.opening must return text blocks only")
    return blocks


def _turns(
    step: Step, full: bool, options: RenderOptions, finishers: tuple[str, ...]
) -> tuple[tuple[ContentBlock, ...], tuple[ContentBlock, ...]]:
    decision = step.decision
    assert decision is not None  # _settled
    result_text, is_error = _result_text(step, full, options, finishers)
    if decision.kind == DecisionKind.TOOL_CALL and _TOOL_NAME.fullmatch(decision.tool):
        use_id = tool_use_id(step)
        # Providers need an object as a call's input; args that are not one were
        # refused, and the error result says why.
        args = decision.args if isinstance(decision.args, Mapping) else {}
        said: tuple[ContentBlock, ...] = (TextBlock(decision.reason),) if decision.reason else ()
        assistant = (*said, ToolUseBlock(use_id, decision.tool, args))
        result: tuple[ContentBlock, ...] = (ToolResultBlock(use_id, result_text, is_error),)
        assistant = _hooked(options.assistant, step, assistant, "assistant")
        result = _hooked(options.observation, step, result, "observation")
        _check_call_turns(assistant, result, use_id)
        return assistant, result
    # No call a provider could be shown (another kind, or a name no provider
    # accepts): the reply as text, and what became of it as text.
    assistant = (TextBlock(_reply_text(decision)),)
    result = (TextBlock(result_text),)
    assistant = _hooked(options.assistant, step, assistant, "assistant")
    result = _hooked(options.observation, step, result, "observation")
    for blocks, name in ((assistant, "assistant"), (result, "observation")):
        if any(isinstance(b, ToolUseBlock | ToolResultBlock) for b in blocks):
            raise ConfigError(
                f"RenderOptions.{name} added a tool block to step {step.index}, which has no call"
            )
    return assistant, result


def _reply_text(decision: Decision) -> str:
    text = decision.reason or decision.message
    if text:
        return text
    if decision.kind == DecisionKind.TOOL_CALL:
        return f"(a call of tool {decision.tool!r})"
    return f"({decision.kind or 'empty'} reply with no text)"


def _result_text(
    step: Step, full: bool, options: RenderOptions, finishers: tuple[str, ...]
) -> tuple[str, bool]:
    observation = step.observation
    assert observation is not None  # _settled
    is_error = observation.kind != ObservationKind.TOOL_RESULT
    if not full:
        summary = observation.summary.strip()
        text = (
            f"[earlier result, summarized: {summary}]" if summary else "[earlier result, not shown]"
        )
        return _fit(text, options.content_cap), is_error
    body = _fit(to_text(observation.content), options.content_cap)
    nudge = _nudge(step, finishers)
    return (f"{body}\n\n{nudge}" if nudge else body), is_error


def _nudge(step: Step, finishers: tuple[str, ...]) -> str:
    """What the model should make of a result that is not a plain success."""
    observation = step.observation
    decision = step.decision
    assert observation is not None and decision is not None  # _settled
    content = observation.content if isinstance(observation.content, Mapping) else {}
    kind = observation.kind
    if kind == ObservationKind.TOOL_ERROR:
        if content.get("failure") == "timeout":
            return (
                "The tool timed out, so whether it took effect is unknown. Check the current "
                "state before calling it again."
            )
        return ""
    if kind == ObservationKind.POLICY_DENIED:
        return (
            "This call was denied, so it did not run. Do not repeat it; find another way to "
            "the goal, or finish."
        )
    if kind == ObservationKind.INVALID_DECISION:
        if decision.kind == DecisionKind.TRUNCATED:
            return (
                "Your reply was cut off at the output limit before it finished, so nothing "
                "ran. Reply again with one complete tool call and a shorter text."
            )
        if decision.kind == DecisionKind.NO_TOOL_CALL:
            finish = f"; to finish, call {_names(finishers)}" if finishers else ""
            return (
                f"Your reply called no tool, so nothing ran. Every reply must call exactly "
                f"one tool{finish}."
            )
        if decision.kind == DecisionKind.TOOL_CALL:
            return (
                "This call was refused before it ran (see the error). Correct it to match "
                "the tool's name and input schema, then call again."
            )
        return "This reply was refused before anything ran (see the error)."
    if kind == ObservationKind.INTERRUPTED:
        if content.get("previous_status") == "deciding":
            return (
                "The runtime stopped before this call started, so it did not run. Call it "
                "again if it is still needed."
            )
        # Never assume either way: the call may or may not have taken effect.
        return (
            "The runtime stopped while this call was running, so its outcome is unknown: it "
            "may or may not have taken effect. Check the current state before repeating it."
        )
    return ""


def _names(names: Sequence[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _hooked(
    hook: AssistantHook | ObservationHook | None,
    step: Step,
    default: tuple[ContentBlock, ...],
    name: str,
) -> tuple[ContentBlock, ...]:
    if hook is None:
        return default
    return _blocks(hook(step, default), name)


def _blocks(value: Any, name: str) -> tuple[ContentBlock, ...]:
    try:
        blocks = tuple(value)
    except TypeError:
        raise ConfigError(
            f"RenderOptions.{name} must return a sequence of content blocks"
        ) from None
    if not blocks:
        raise ConfigError(f"RenderOptions.{name} returned no content blocks")
    for block in blocks:
        if not isinstance(block, TextBlock | ToolUseBlock | ToolResultBlock):
            raise ConfigError(
                f"RenderOptions.{name} returned {type(block).__name__}, not a content block"
            )
    return blocks


def _check_call_turns(
    assistant: tuple[ContentBlock, ...], result: tuple[ContentBlock, ...], use_id: str
) -> None:
    # Providers refuse a tool use without its result, or a result for another
    # call: a hook that breaks the pairing is refused here, not by a 400.
    uses = [b for b in assistant if isinstance(b, ToolUseBlock)]
    if (
        len(uses) != 1
        or uses[0].id != use_id
        or any(isinstance(b, ToolResultBlock) for b in assistant)
    ):
        raise ConfigError(
            f"RenderOptions.assistant must keep exactly the one tool use {use_id} and add no result"
        )
    results = [b for b in result if isinstance(b, ToolResultBlock)]
    if (
        len(results) != 1
        or results[0].tool_use_id != use_id
        or any(isinstance(b, ToolUseBlock) for b in result)
    ):
        raise ConfigError(
            f"RenderOptions.observation must keep exactly the one result for {use_id} and add "
            "no tool use"
        )


# --------------------------------------------------------------------------- response → decision


def decide(response: ModelResponse, max_reason: int = 2_000) -> Decision:
    """The decision a reply makes; every text it keeps is at most `max_reason` characters."""
    if not _int(max_reason) or max_reason < _MIN_CAP:
        raise ConfigError(f"max_reason must be an integer of at least {_MIN_CAP}")
    text = _storable(response.text.strip())
    stop = response.stop_reason
    model = DecisionOrigin.MODEL.value
    if stop == "refusal":
        message = f"the model refused: {text}" if text else "the model refused"
        return replace(Decision.fail(_fit(message, max_reason)), origin=model)
    if stop == "model_context_window_exceeded":
        message = "the conversation no longer fits the model's context window"
        if text:
            message += f": {text}"
        return replace(Decision.fail(_fit(message, max_reason)), origin=model)
    uses = list(response.tool_uses)
    if stop == "max_tokens":
        note = f"\n[cut off while calling {_use_names(uses)}]" if uses else ""
        return Decision(
            kind=DecisionKind.TRUNCATED, reason=_with_note(text, note, max_reason), origin=model
        )
    if not uses:
        return Decision(kind=DecisionKind.NO_TOOL_CALL, reason=_fit(text, max_reason), origin=model)
    first, extra = uses[0], uses[1:]
    note = ""
    if extra:
        note = f"\n[only the first tool call of a reply runs; not run: {_use_names(extra)}]"
    return replace(
        Decision.tool_call(first.name, first.input, reason=_with_note(text, note, max_reason)),
        origin=model,
    )


def _storable(text: str) -> str:
    """`text` with lone surrogates escaped (`\\ud800`): a model's words are kept whatever
    its JSON escaped, where the record refuses text that is not valid UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _use_names(uses: Sequence[ToolUseBlock]) -> str:
    return _storable(_names([u.name for u in uses]))


def _with_note(text: str, note: str, limit: int) -> str:
    # The note is the runtime's, about what it will not run: it is kept whole
    # (up to a quarter of the limit) and the model's text gives way to it.
    note = _fit(note, limit // 4)
    return _fit(text, limit - len(note)) + note


def _fit(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its start and a visible marker."""
    if len(text) <= limit:
        return text
    # The marker's length grows with the count it states; the count is at most
    # len(text), so sizing it for that count always fits.
    keep = limit - len(_marker(len(text)))
    if keep < 0:
        return text[:limit]
    return text[:keep] + _marker(len(text) - keep)


def _marker(dropped: int) -> str:
    return f"…[truncated: {dropped} more characters]"
