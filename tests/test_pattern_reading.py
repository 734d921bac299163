"""A tool schema's patterns are found and read as validation reads them (decision 0016).

Every pattern the argument check may apply is compiled at registration, wherever
it stands: under a property named like a data keyword, or in data a `#/...`
reference makes a schema. What RE2 would read differently from ECMA-262 (a class
escape beside a range '-', `\\B` between a character's bytes) is refused, and a
subschema naming its own dialect is checked by the same linear-time matcher.
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


_BACKTRACKING_WHERE_DATA_KEYWORDS_STAND = {
    # A property that happens to be called `default`: a schema, not data.
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
    # Data made a schema by a `#/...` reference (decision 0004: any part can be).
    "data-reached-by-ref": {
        "type": "object",
        "default": {"patternProperties": {"^(a+)+$": {}}, "unevaluatedProperties": False},
        "$ref": "#/default",
    },
}


@pytest.mark.parametrize(
    "schema",
    _BACKTRACKING_WHERE_DATA_KEYWORDS_STAND.values(),
    ids=_BACKTRACKING_WHERE_DATA_KEYWORDS_STAND,
)
def test_unevaluated_beside_pattern_properties_is_refused_under_a_property_named_default_or_a_ref(
    store: agentrt.Store, schema: dict[str, Any]
) -> None:
    """A developer registers a tool whose schema holds `patternProperties` and
    `unevaluatedProperties` under a property named `default`, or in a `default` a `$ref`
    points at. jsonschema would evaluate `unevaluatedProperties` with Python's `re`
    (hours for `^(a+)+$` against a model's "aaaa…a!"), so `Driver(...)` refuses the tool
    with UnsafePatternError, as it does wherever else the two keywords stand."""
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


def test_a_data_keyword_keeps_its_data_unread_as_patterns() -> None:
    """Data in `default`, `examples`, `enum` or `const` that happens to hold a "pattern"
    key is not a pattern: a schema with such data registers."""
    schema = {
        "type": "object",
        "properties": {"s": {"type": "object", "default": {"pattern": r"\p{L}"}}},
        "examples": [{"pattern": r"(a)\1"}],
    }
    assert compile_tool(_spec(schema)).check({"s": {}}) == []


def test_a_tool_parameter_named_default_gets_its_pattern_checked_at_decoration() -> None:
    """`@tool` over a function whose parameter is named `default` and carries a pattern
    agentrt refuses (`\\p{L}`) is refused at decoration with UnsafePatternError naming the
    place, as for any other parameter name."""

    def configure(default: Annotated[str, pydantic.Field(pattern=r"^\p{L}+$")]) -> str:
        """Set the default name."""
        return default

    with pytest.raises(UnsafePatternError, match=r"\$\.properties\.default\.pattern"):
        agentrt.tool(side_effect="read_only", timeout=1)(configure)


@pytest.mark.parametrize("pattern", [r"^[\s-\uFFFF]$", r"[a-\d]", r"[\w-.]", r"[\--\d]"])
def test_a_class_escape_beside_a_range_dash_is_refused(pattern: str) -> None:
    """`[\\s-\\uFFFF]` is a SyntaxError in ECMA-262 with the `u` flag and a union without
    it; spliced into RE2 it would be a range from `\\x{feff}`. A schema with such a pattern
    is refused with UnsafePatternError saying to write `\\-` for a literal '-'."""
    with pytest.raises(UnsafePatternError, match=r"beside '-'.*write \\- for a literal"):
        compile_tool(_string_with(pattern))


@pytest.mark.parametrize("pattern", [r"^[\w-]+$", r"^[-\d]+$", r"^[\d\-x]+$"])
def test_a_class_escape_beside_a_literal_dash_is_read_as_ecma_262(pattern: str) -> None:
    """A '-' first or last in a class, or escaped, is itself beside a class escape."""
    compiled = compile_tool(_string_with(pattern))
    assert compiled.check({"s": "-"}) == []
    assert compiled.check({"s": "?"}) != []


def test_a_non_word_boundary_is_refused() -> None:
    """RE2 searches UTF-8 bytes, so `\\B` would match between the two bytes of "é",
    a position ECMA-262 does not have: a schema with `\\B` is refused with
    UnsafePatternError. `\\b` (which never matches there) is kept."""
    with pytest.raises(UnsafePatternError, match=r"\\B cannot be matched as ECMA-262"):
        compile_tool(_string_with(r"\B"))
    compiled = compile_tool(_string_with(r"^a\b"))
    assert compiled.check({"s": "a\u00e9"}) == []
    assert compiled.check({"s": "ab"}) != []


def test_a_nested_dialect_keeps_the_linear_time_ecma_262_pattern_check() -> None:
    """A subschema naming its own bundled dialect (`"$schema": draft-07`, allowed by
    decision 0004) is checked by agentrt's validator for that dialect, not jsonschema's
    stock one: its pattern is ECMA-262 (`$` is the end of the text) matched in linear
    time (`^(a+)+$` against "aaaa…a!" at once)."""
    schema = {
        "type": "object",
        "properties": {
            "s": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "string",
                "pattern": "^(a+)+$",
            },
            "n": {"$schema": "http://json-schema.org/draft-07/schema#", "multipleOf": 0.1},
        },
    }
    compiled = compile_tool(_spec(schema))
    assert compiled.check({"s": "aaa", "n": 0.3}) == []
    assert compiled.check({"s": "a\n"}) != []
    began = time.process_time()  # CPU, not the clock: a loaded machine stretches only the clock
    assert compiled.check({"s": "a" * 40 + "!"}) != []
    assert time.process_time() - began < 1
