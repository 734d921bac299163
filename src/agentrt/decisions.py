"""Recording and validating what an agent decided.

The decision is recorded verbatim before it is validated, but never stored
looking valid when it is not: args or a result that are not usable JSON are
moved into `invalid_args` / `invalid_result` as text (base64 when the bytes are
not UTF-8), and text fields that cannot be stored are escaped and flagged.
Validation then decides whether the step may go on; an invalid decision becomes
an `invalid_decision` observation the model is shown, never an exception.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from .canonical import check_json, parse_json
from .errors import JSONValueError
from .records import Decision, DecisionKind, DecisionOrigin
from .tools import CompiledTool

_VALID_KINDS = (DecisionKind.TOOL_CALL, DecisionKind.COMPLETE, DecisionKind.FAIL)
_KNOWN_ORIGINS = {str(o) for o in DecisionOrigin}
_MAX_KEPT = 65_536


@dataclass(frozen=True)
class RecordedDecision:
    decision: Decision
    problems: tuple[str, ...]


def _kept_text(value: Any) -> str:
    """Unusable data kept for the record: text as is, bytes as UTF-8 or base64."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(bytes(value)).decode("ascii")
    text = value if isinstance(value, str) else repr(value)
    # A lone surrogate cannot be stored as UTF-8: keep its escape instead.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:_MAX_KEPT]


def _usable(value: Any) -> tuple[Any, str | None]:
    """(usable value, None) or (None, why): bytes are parsed as JSON text."""
    try:
        if isinstance(value, bytes | bytearray):
            return parse_json(bytes(value)), None
        check_json(value)
        return value, None
    except JSONValueError as exc:
        return None, str(exc)
    except (RecursionError, TypeError, ValueError) as exc:
        return None, f"not usable JSON: {exc}"


def _text_field(name: str, value: Any, problems: list[str]) -> str:
    if not isinstance(value, str):
        problems.append(f"decision.{name} must be a string, got {type(value).__name__}")
        return _kept_text(value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"decision.{name} is not valid UTF-8 text")
        return _kept_text(value)
    return value


def record(decision: Any) -> RecordedDecision:
    """The decision as it will be stored, and what makes it unusable, if anything."""
    problems: list[str] = []
    if not isinstance(decision, Decision):
        problems.append(f"the agent returned {type(decision).__name__}, not a Decision")
        return RecordedDecision(
            Decision(kind="", invalid_result=_kept_text(decision)), tuple(problems)
        )
    fields: dict[str, Any] = {}
    for name in ("kind", "tool", "reason", "message", "origin"):
        fields[name] = _text_field(name, getattr(decision, name), problems)
    args, result = decision.args, decision.result
    invalid_args, invalid_result = decision.invalid_args, decision.invalid_result
    if args is not None:
        args, why = _usable(args)
        if why is not None:
            problems.append(f"args are not usable JSON: {why}")
            invalid_args = _kept_text(decision.args)
    if result is not None:
        result, why = _usable(result)
        if why is not None:
            problems.append(f"result is not usable JSON: {why}")
            invalid_result = _kept_text(decision.result)
    # The fields are typed str, but an agent is consumer code: keep what it gave as text.
    if invalid_args is not None and not isinstance(cast(object, invalid_args), str):
        invalid_args = _kept_text(invalid_args)
    if invalid_result is not None and not isinstance(cast(object, invalid_result), str):
        invalid_result = _kept_text(invalid_result)
    if decision.invalid_args is not None and args is None and not problems:
        problems.append("args were not usable JSON")
    if decision.invalid_result is not None and result is None and not problems:
        problems.append("result was not usable JSON")
    recorded = replace(
        decision,
        args=args,
        result=result,
        invalid_args=invalid_args,
        invalid_result=invalid_result,
        **fields,
    )
    return RecordedDecision(recorded, tuple(problems))


def validate(recorded: RecordedDecision, tools: Mapping[str, CompiledTool]) -> str | None:
    """None when the decision may go on, else the error shown to the model.

    `tools` are the registered tools compiled once (`compile_tool`), by name.
    """
    if recorded.problems:
        return "; ".join(recorded.problems)
    decision = recorded.decision
    if decision.kind not in _VALID_KINDS:
        if decision.kind == DecisionKind.TRUNCATED:
            return "the reply was cut off before it finished (truncated); nothing was executed"
        if decision.kind == DecisionKind.NO_TOOL_CALL:
            return "the reply contained no tool call; call a tool, or complete or fail the goal"
        return f"unknown decision kind {decision.kind!r}: expected tool_call, complete or fail"
    if decision.origin not in _KNOWN_ORIGINS:
        return f"unknown decision origin {decision.origin!r}"
    if decision.kind == DecisionKind.TOOL_CALL:
        if not decision.tool:
            return "a tool_call must name a tool"
        compiled = tools.get(decision.tool)
        if compiled is None:
            names = ", ".join(sorted(tools)) or "none"
            return f"unknown tool {decision.tool!r}; registered tools: {names}"
        errors = compiled.check({} if decision.args is None else decision.args)
        if errors:
            return f"args do not match the input schema of {decision.tool!r}: " + "; ".join(errors)
    return None


def call_args(decision: Decision) -> Any:
    return {} if decision.args is None else decision.args
