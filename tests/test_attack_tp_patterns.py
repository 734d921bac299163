"""Attack campaign (tp): tool-schema patterns read as ECMA-262 and checked in linear time.

Decision 0016: every pattern of a schema is translated to RE2 and compiled at
registration; what cannot be checked safely as ECMA-262 reads it is refused with
`UnsafePatternError`; `unevaluatedProperties` beside `patternProperties` is refused
because jsonschema evaluates it with Python's backtracking `re`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Annotated, Any

import pydantic
import pytest

import agentrt
from agentrt import SideEffect, ToolSpec
from agentrt._errors import UnsafePatternError
from agentrt._tools import compile_tool
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


def _spec(schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name="t",
        description="a tool",
        input_schema=schema,
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=1),
    )


def _string_with(pattern: str) -> ToolSpec:
    return _spec({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}})


_BACKTRACKING_HIDDEN = {
    # A property that happens to be called `default`: the walk skips it by its name.
    "property-named-default": {
        "type": "object",
        "properties": {
            "default": {
                "type": "object",
                "patternProperties": {"^(a+)+$": {"type": "integer"}},
                "unevaluatedProperties": False,
            }
        },
    },
    # Data made a schema by a `#/...` reference (decision 0004 says any part can be).
    "data-reached-by-ref": {
        "type": "object",
        "default": {"patternProperties": {"^(a+)+$": {}}, "unevaluatedProperties": False},
        "$ref": "#/default",
    },
}


@pytest.mark.parametrize("schema", _BACKTRACKING_HIDDEN.values(), ids=_BACKTRACKING_HIDDEN)
def test_unevaluated_beside_pattern_properties_is_refused_wherever_it_stands(
    store: agentrt.Store, schema: dict[str, Any]
) -> None:
    """A schema holding `patternProperties` and `unevaluatedProperties` under a property
    named `default` (or `enum`, `const`, `examples`), or in a `default` that a `$ref`
    makes a schema, registers today: the registration walk skips every key with a data
    keyword's name wherever it stands. The argument check then runs jsonschema's
    `unevaluatedProperties`, which searches with Python's `re`, so a model's key
    "aaaa…a!" freezes the process for hours (`^(a+)+$`). `Driver(...)` should refuse the
    tool with UnsafePatternError, as it does when the keywords stand elsewhere."""
    tool = RecordingTool("configure", SideEffect.READ_ONLY, schema=schema)
    with pytest.raises(UnsafePatternError, match="unevaluatedProperties"):
        agentrt.Driver(
            store=store,
            agent=ScriptedAgent([agentrt.Decision.complete()]),
            policy=agentrt.default_policy(),
            tools=[tool],
            now=FakeClock(),
            new_id=Ids(),
        )


def test_a_tool_parameter_named_default_gets_its_pattern_checked_at_registration() -> None:
    """`@tool` over a function whose parameter is named `default` (or `examples`, `enum`,
    `const`) and carries a pattern agentrt refuses (`\\p{L}`) is accepted at decoration,
    while the same parameter named `name` is refused; every call of the tool is then
    refused with "cannot be applied". The refusal should come at decoration, as for any
    other parameter name."""

    def configure(default: Annotated[str, pydantic.Field(pattern=r"^\p{L}+$")]) -> str:
        """Set the default name."""
        return default

    with pytest.raises(UnsafePatternError, match=r"\$\.properties\.default\.pattern"):
        agentrt.tool(side_effect="read_only", timeout=1)(configure)


def test_a_class_escape_as_a_range_end_is_refused_or_read_as_ecma_262() -> None:
    """`[\\s-\\uFFFF]` is a SyntaxError in ECMA-262 with the `u` flag and, without it, the
    white space, `-` and U+FFFF. agentrt splices its list of white-space ranges into the
    class, so its last item `\\x{feff}` becomes the start of a range to U+FFFF: U+FFF0
    is accepted and `-` refused, the opposite of ECMA-262. The pattern should be refused
    (UnsafePatternError) or read as ECMA-262 reads it."""
    try:
        compiled = compile_tool(_string_with(r"^[\s-\uFFFF]$"))
    except UnsafePatternError:
        return
    assert compiled.check({"s": "\ufff0"}) != []
    assert compiled.check({"s": "-"}) == []


def test_non_word_boundary_never_matches_inside_a_character() -> None:
    """In ECMA-262, `\\B` is a position between two code points that are both word or
    both non-word characters: in "aéa" every position is a boundary, so `\\B` matches
    nowhere. RE2 searches UTF-8 bytes, and the position between the two bytes of "é"
    passes `\\B`: the schema accepts "aéa". It should be refused (or `\\B` refused at
    registration)."""
    try:
        compiled = compile_tool(_string_with(r"\B"))
    except UnsafePatternError:
        return
    assert compiled.check({"s": "aa"}) == []
    assert compiled.check({"s": "a\u00e9a"}) != []


def test_a_nested_dialect_keeps_the_linear_time_ecma_262_pattern_check() -> None:
    """A subschema that names its own bundled dialect (`"$schema": draft-07`, allowed by
    decision 0004) is validated by jsonschema's stock validator class for that dialect,
    because `descend` re-reads `$schema`: its `pattern` is matched with Python's
    backtracking `re` (`^(a+)+$` against "aaaa…a!" takes hours at 40 characters) and
    read as Python reads it (`$` before a final newline). It should be matched by the
    same linear-time ECMA-262 check as everywhere else (or refused at registration)."""
    schema = {
        "type": "object",
        "properties": {
            "s": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "string",
                "pattern": "^(a+)+$",
            }
        },
    }
    try:
        compiled = compile_tool(_spec(schema))
    except UnsafePatternError:
        return
    assert compiled.check({"s": "aaa"}) == []
    assert compiled.check({"s": "a\n"}) != [], "ECMA-262's $ is the end of the text"
    began = time.monotonic()
    assert compiled.check({"s": "a" * 26 + "!"}) != []
    assert time.monotonic() - began < 1
