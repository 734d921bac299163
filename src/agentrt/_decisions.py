"""Recording and validating what an agent decided.

The decision is recorded verbatim before it is validated, but never stored
looking valid when it is not: args or a result that are not usable JSON are
moved into `invalid_args` / `invalid_result` as text (base64 when the bytes are
not UTF-8), and text fields that cannot be stored are escaped and flagged.
Validation then decides whether the step may go on; an invalid decision becomes
an `invalid_decision` observation the model is shown, never an exception.

Invariant: an agent is consumer code, and so is every value it returns.
`record` and `validate` never raise, whatever the value does when it is read:
`None` or any other non-`Decision`, a `__repr__`, `__str__`, `__eq__` or
`__hash__` that raises, a str or dict subclass that misbehaves, nesting deeper
than Python's recursion limit, an int too long to print. What cannot be read is
kept as text where it can be (else a description of what failed) and the
decision is invalid. The recorded decision holds plain values only (what its
stored text reads back as), so validation, the policy, approvals and the tool
all see exactly what was recorded, and nothing the agent still holds.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._canonical import check_json, from_text, parse_json, to_text
from ._errors import JSONValueError
from ._foreign import exception_text, type_name
from ._records import Decision, DecisionKind, DecisionOrigin
from ._tools import CompiledTool

_VALID_KINDS = (DecisionKind.TOOL_CALL, DecisionKind.COMPLETE, DecisionKind.FAIL)
_KNOWN_ORIGINS = {str(o) for o in DecisionOrigin}
_MAX_KEPT = 65_536
_TEXT_FIELDS = ("kind", "tool", "reason", "message", "origin")

# How much of a container is shown when its own repr fails (too deep, for instance).
_SHORT_DEPTH = 8
_SHORT_ITEMS = 32
_SHORT_TEXT = 200


@dataclass(frozen=True)
class RecordedDecision:
    """The decision as stored (plain values), its stored text, and why it is unusable."""

    decision: Decision
    problems: tuple[str, ...]
    text: str = ""


def _shown(value: Any) -> str:
    """`repr(value)` when it works; else a bounded repr of a container, else a description."""
    try:
        return str.__str__(repr(value))
    except Exception as exc:
        failure = type_name(exc)
    if isinstance(value, dict | list | tuple):
        return f"{_bounded(value, 0)} (shortened: repr raised {failure})"
    return _described(value, failure)


def _described(value: Any, failure: str) -> str:
    if isinstance(value, int):
        # An int too long for the interpreter's int/str limit.
        return f"<int of {int.bit_length(value)} bits; repr raised {failure}>"
    return f"<{type_name(value)} object; repr raised {failure}>"


def _bounded(value: Any, depth: int) -> str:
    """A repr cut at `_SHORT_DEPTH` levels and `_SHORT_ITEMS` items, using only the base
    types' own methods for containers, so a subclass's overrides are never called."""
    if isinstance(value, dict):
        if depth >= _SHORT_DEPTH:
            return "{...}"
        pairs = list(dict.items(value))
        parts = [
            f"{_bounded(k, depth + 1)}: {_bounded(v, depth + 1)}" for k, v in pairs[:_SHORT_ITEMS]
        ]
        return "{" + ", ".join(parts + ["..."] * (len(pairs) > _SHORT_ITEMS)) + "}"
    if isinstance(value, list | tuple):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        if depth >= _SHORT_DEPTH:
            return f"{opening}...{closing}"
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        parts = []
        for item in items:
            if len(parts) == _SHORT_ITEMS:
                parts.append("...")
                break
            parts.append(_bounded(item, depth + 1))
        return opening + ", ".join(parts) + closing
    if isinstance(value, str):
        return str.__repr__(str.__str__(value)[:_SHORT_TEXT])
    try:
        return str.__str__(repr(value))[:_SHORT_TEXT]
    except Exception as exc:
        return _described(value, type_name(exc))


def _kept_text(value: Any) -> str:
    """Unusable data kept for the record: text as is, bytes as UTF-8 or base64.

    Never raises: whatever cannot be shown is described instead.
    """
    try:
        if isinstance(value, bytes | bytearray):
            try:
                return bytes(value).decode("utf-8")[:_MAX_KEPT]
            except UnicodeDecodeError:
                encoded = base64.b64encode(bytes(value)).decode("ascii")
                return ("base64:" + encoded)[:_MAX_KEPT]
        text = str.__str__(value) if isinstance(value, str) else _shown(value)
    except Exception as exc:
        text = f"<{type_name(value)} object; reading it raised {type_name(exc)}>"
    # A lone surrogate cannot be stored as UTF-8: keep its escape instead.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:_MAX_KEPT]


def _kept_whole(value: Any) -> str:
    """Text kept whole (a lone surrogate escaped); anything else as `_kept_text`."""
    if isinstance(value, str):
        return str.__str__(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return _kept_text(value)


def _usable(value: Any) -> tuple[Any, str | None]:
    """(usable value, None) or (None, why): bytes are parsed as JSON text."""
    try:
        if isinstance(value, bytes | bytearray):
            return parse_json(bytes(value)), None
        check_json(value)
        return value, None
    except JSONValueError as exc:
        return None, str(exc)
    except Exception as exc:  # RecursionError, or a value whose own methods raise
        return None, f"not usable JSON: {exception_text(exc)}"


def _text_field(name: str, value: Any, problems: list[str]) -> str:
    if not isinstance(value, str):
        problems.append(f"decision.{name} must be a string, got {type_name(value)}")
        return _kept_text(value)
    plain = str.__str__(value)  # a str subclass's own methods are never called again
    try:
        plain.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"decision.{name} is not valid UTF-8 text")
        return _kept_text(plain)
    return plain


def record(decision: Any) -> RecordedDecision:
    """The decision as it will be stored, and what makes it unusable, if anything.

    Never raises (see the module's invariant).
    """
    try:
        return _stored(*_read(decision))
    except Exception as exc:
        problem = f"the decision could not be recorded: {exception_text(exc)}"
        return _stored(Decision(kind="", invalid_result=_kept_text(decision)), [problem])


def _read(decision: Any) -> tuple[Decision, list[str]]:
    problems: list[str] = []
    if not isinstance(decision, Decision):
        problems.append(f"the agent returned {type_name(decision)}, not a Decision")
        return Decision(kind="", invalid_result=_kept_text(decision)), problems
    fields: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        fields[name] = _text_field(name, getattr(decision, name), problems)
    given_args, given_result = decision.args, decision.result
    given_invalid_args, given_invalid_result = decision.invalid_args, decision.invalid_result
    args, result = given_args, given_result
    invalid_args, invalid_result = given_invalid_args, given_invalid_result
    if args is not None:
        args, why = _usable(args)
        if why is not None:
            problems.append(f"args are not usable JSON: {why}")
            invalid_args = _kept_text(given_args)
    if result is not None:
        result, why = _usable(result)
        if why is not None:
            problems.append(f"result is not usable JSON: {why}")
            invalid_result = _kept_text(given_result)
    # The fields are typed str, but an agent is consumer code: keep what it gave as text.
    if invalid_args is not None:
        invalid_args = _kept_whole(invalid_args)
    if invalid_result is not None:
        invalid_result = _kept_whole(invalid_result)
    if given_invalid_args is not None and args is None and not problems:
        problems.append("args were not usable JSON")
    if given_invalid_result is not None and result is None and not problems:
        problems.append("result was not usable JSON")
    # A plain Decision, never the agent's (sub)class.
    recorded = Decision(
        args=args,
        result=result,
        invalid_args=invalid_args,
        invalid_result=invalid_result,
        **fields,
    )
    return recorded, problems


def _stored(decision: Decision, problems: list[str]) -> RecordedDecision:
    """Encode once; the recorded decision is what that text reads back as."""
    try:
        text = to_text(decision.to_json())
    except Exception as exc:  # a value that passed its check and changed since
        problems = [*problems, f"the decision could not be recorded: {exception_text(exc)}"]
        kept = Decision(kind="", invalid_result=_kept_text(decision.to_json()))
        text = to_text(kept.to_json())
    return RecordedDecision(Decision.from_json(from_text(text)), tuple(problems), text)


def validate(recorded: RecordedDecision, tools: Mapping[str, CompiledTool]) -> str | None:
    """None when the decision may go on, else the error shown to the model.

    `tools` are the registered tools compiled once (`compile_tool`), by name.
    Never raises: a check that fails unexpectedly makes the decision invalid.
    """
    try:
        return _invalid(recorded, tools)
    except Exception as exc:
        return f"the decision could not be validated: {exception_text(exc)}"


def _invalid(recorded: RecordedDecision, tools: Mapping[str, CompiledTool]) -> str | None:
    if recorded.problems:
        return "; ".join(recorded.problems)
    decision = recorded.decision
    if decision.kind not in _VALID_KINDS:
        if decision.kind == DecisionKind.TRUNCATED:
            return "the reply was cut off before it finished (truncated); nothing was executed"
        if decision.kind == DecisionKind.NO_TOOL_CALL:
            return "the reply contained no tool call; call a tool, or complete or fail the goal"
        kind = _named(decision.kind)
        return f"unknown decision kind {kind}: expected tool_call, complete or fail"
    if decision.origin not in _KNOWN_ORIGINS:
        return f"unknown decision origin {_named(decision.origin)}"
    if decision.kind == DecisionKind.TOOL_CALL:
        if not decision.tool:
            return "a tool_call must name a tool"
        compiled = tools.get(decision.tool)
        if compiled is None:
            names = ", ".join(sorted(tools)) or "none"
            return f"unknown tool {_named(decision.tool)}; registered tools: {names}"
        errors = compiled.check({} if decision.args is None else decision.args)
        if errors:
            return f"args do not match the input schema of {_named(decision.tool)}: " + _listed(
                errors
            )
    return None


_NAMED_MAX = 80
"""Characters of an agent's text (a tool name, a kind) echoed in an error it is shown."""

_ERRORS_SHOWN = 10
_ERROR_MAX = 300

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _named(text: str) -> str:
    """`text` quoted (control characters escaped, as `repr` does), cut to `_NAMED_MAX`."""
    return repr(text if len(text) <= _NAMED_MAX else text[:_NAMED_MAX] + "…")


def _listed(errors: Sequence[str]) -> str:
    """The first `_ERRORS_SHOWN` schema errors, each cut and its control characters
    escaped (a property name is the agent's text), and how many more there were."""
    shown = [
        _CONTROL.sub(
            lambda m: f"\\x{ord(m[0]):02x}", e if len(e) <= _ERROR_MAX else e[:_ERROR_MAX] + "…"
        )
        for e in errors[:_ERRORS_SHOWN]
    ]
    more = len(errors) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def call_args(decision: Decision) -> Any:
    return {} if decision.args is None else decision.args
