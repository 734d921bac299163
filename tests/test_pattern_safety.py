"""Tool-schema patterns are ECMA-262, checked in linear time; what cannot be is refused.

Arguments are checked before any timeout, on the event loop: a pattern that
backtracks (`^(a+)+$`) must not be able to freeze the process. Patterns are
translated to RE2 and compiled at registration (decision 0016).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Annotated, Any

import pydantic
import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolSpec
from agentrt._errors import ConfigError, UnsafePatternError
from agentrt._tools import compile_tool
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool

EVIL = "^(a+)+$"
HOSTILE = "a" * 40 + "!"  # hours for a backtracking engine


def spec(schema: dict[str, Any], name: str = "t") -> ToolSpec:
    return ToolSpec(
        name=name,
        description="a tool",
        input_schema=schema,
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=1),
    )


def string_with(pattern: str) -> ToolSpec:
    return spec({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}})


def matches(pattern: str, text: str) -> bool:
    return compile_tool(string_with(pattern)).check({"s": text}) == []


# -- bounded time ------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_run_whose_tool_has_a_backtracking_pattern_checks_a_hostile_argument_at_once(
    store: agentrt.Store,
) -> None:
    tool = RecordingTool(
        "t",
        SideEffect.READ_ONLY,
        schema={"type": "object", "properties": {"s": {"type": "string", "pattern": EVIL}}},
    )
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [
                Decision.tool_call("t", {"s": HOSTILE}),
                Decision.tool_call("t", {"s": "aaaa"}),
                Decision.complete(),
            ]
        ),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    began = time.monotonic()
    run = driver.start_sync("goal")
    assert time.monotonic() - began < 10
    assert run.status == "COMPLETED"
    refused, accepted, _ = store.list_steps(run.id)
    assert refused.status == "failed"
    assert refused.observation is not None
    assert refused.observation.kind == "invalid_decision"
    assert f"$.s: {HOSTILE!r} does not match {EVIL!r}" in str(refused.observation.content)
    assert accepted.status == "done"
    assert [call.args for call in tool.calls] == [{"s": "aaaa"}]


KEY = HOSTILE * 100


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}},
            ["$.aaa: 'y' is not of type 'integer'"],
            id="pattern-properties",
        ),
        pytest.param(
            {
                "type": "object",
                "patternProperties": {EVIL: {"type": "string"}},
                "additionalProperties": False,
            },
            [f"$: {KEY!r} does not match any of the regexes: {EVIL!r}"],
            id="additional-properties",
        ),
        pytest.param(
            {"type": "object", "propertyNames": {"pattern": EVIL}},
            [f"$: {KEY!r} does not match {EVIL!r}"],
            id="property-names",
        ),
        pytest.param(
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "object",
                "patternProperties": {EVIL: {"type": "string"}},
                "additionalProperties": {"type": "integer"},
            },
            [f"$[{KEY!r}]: 'x' is not of type 'integer'"],
            id="draft-04",
        ),
    ],
)
def test_hostile_property_names_are_checked_against_patterns_in_bounded_time(
    schema: dict[str, Any], expected: list[str]
) -> None:
    compiled = compile_tool(spec(schema))
    began = time.monotonic()
    errors = compiled.check({KEY: "x", "aaa": "y"})
    assert time.monotonic() - began < 5
    assert [error[:300] for error in errors] == [error[:300] for error in expected]


@pytest.mark.timeout(30)
def test_a_megabyte_against_a_backtracking_pattern_is_checked_in_linear_time() -> None:
    compiled = compile_tool(string_with(EVIL))
    began = time.monotonic()
    assert compiled.check({"s": "a" * 1_000_000 + "!"}) != []
    assert compiled.check({"s": "a" * 1_000_000}) == []
    assert time.monotonic() - began < 5


def test_additional_properties_messages_are_jsonschemas() -> None:
    compiled = compile_tool(
        spec(
            {
                "type": "object",
                "properties": {"a": {}},
                "patternProperties": {"^x_": {"type": "integer"}},
                "additionalProperties": False,
            }
        )
    )
    assert compiled.check({"a": 1, "x_1": 2}) == []
    assert compiled.check({"x_1": "no"}) == ["$.x_1: 'no' is not of type 'integer'"]
    assert compiled.check({"b": 1, "c": 2}) == [
        "$: 'b', 'c' do not match any of the regexes: '^x_'"
    ]
    plain = compile_tool(spec({"type": "object", "additionalProperties": False}, name="p"))
    assert plain.check({"b": 1}) == [
        "$: Additional properties are not allowed ('b' was unexpected)"
    ]


def test_format_is_an_annotation_and_never_runs_a_regular_expression() -> None:
    compiled = compile_tool(
        spec({"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}})
    )
    assert compiled.check({"r": "("}) == []
    assert compiled.check({"r": EVIL}) == []


# -- refused at registration ---------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "because"),
    [
        (r"(a)\1", "backreferences cannot be matched in linear time"),
        (r"(?<x>a)\k<x>", "backreferences cannot be matched in linear time"),
        (r"a(?=b)", "lookahead and lookbehind cannot be matched in linear time"),
        (r"a(?!b)", "lookahead and lookbehind cannot be matched in linear time"),
        (r"(?<=a)b", "lookahead and lookbehind cannot be matched in linear time"),
        (r"(?<!a)b", "lookahead and lookbehind cannot be matched in linear time"),
        (r"[]a]", "[] is an empty class in ECMA-262"),
        (r"[^]", "[^] is an empty class in ECMA-262"),
        (r"a{,3}", "a '{' that does not start a quantifier"),
        (r"a{", "a '{' that does not start a quantifier"),
        (r"\p{L}", "Unicode property escapes (\\p, \\P) are not supported"),
        (r"\Aa", "\\A is not an ECMA-262 escape"),
        (r"a\z", "\\z is not an ECMA-262 escape"),
        (r"\012", "octal escapes like \\01 are not ECMA-262"),
        (r"\ud800", "it names the lone surrogate U+D800"),
        (r"\u{110000}", "it names U+110000, beyond the last Unicode code point"),
        (r"\x4", "\\x must be followed by exactly two hex digits"),
        (r"\c1", "\\c must be followed by an ASCII letter"),
        (r"(?i)a", "'(?i' is not ECMA-262 group syntax"),
        (r"(?P<n>a)", "'(?P' is not ECMA-262 group syntax"),
        (r"[\B]", "\\B inside a character class has no meaning"),
        (r"[a", "a character class is not closed"),
        ("a\\", "it ends with a lone backslash"),
        (r"a{1001}", "cannot be compiled to a linear-time matcher: invalid repetition size"),
        (r"((a{100}){100}){100}", "cannot be compiled to a linear-time matcher"),
        (r"a**", "cannot be compiled to a linear-time matcher: bad repetition operator"),
    ],
)
def test_a_pattern_that_cannot_be_checked_safely_as_ecma_262_is_refused_at_registration(
    pattern: str, because: str
) -> None:
    with pytest.raises(UnsafePatternError) as caught:
        compile_tool(string_with(pattern))
    message = str(caught.value)
    assert message.startswith(
        f"tool 't': the pattern {pattern!r} at $.properties.s.pattern is refused because "
    )
    assert because in message
    assert isinstance(caught.value, ConfigError)


def test_a_pattern_property_key_that_cannot_be_checked_is_refused_naming_its_place() -> None:
    with pytest.raises(
        UnsafePatternError,
        match=r"^tool 't': the pattern '\(a\)\\\\1' at \$\.properties\.o\.patternProperties "
        r"is refused because backreferences cannot be matched in linear time$",
    ):
        compile_tool(
            spec(
                {
                    "type": "object",
                    "properties": {"o": {"type": "object", "patternProperties": {r"(a)\1": {}}}},
                }
            )
        )


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    with pytest.raises(
        UnsafePatternError,
        match="unevaluatedProperties together with patternProperties is refused",
    ):
        compile_tool(
            spec(
                {
                    "type": "object",
                    "allOf": [{"patternProperties": {"^a": {}}}],
                    "unevaluatedProperties": False,
                }
            )
        )
    # Alone, unevaluatedProperties is fine: nothing in it searches with a pattern.
    alone = compile_tool(
        spec({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}, "u")
    )
    assert alone.check({"a": 1}) == []
    assert alone.check({"b": 1}) != []


def test_a_pattern_inside_data_keywords_is_data_not_a_pattern() -> None:
    compiled = compile_tool(
        spec({"type": "object", "const": {"pattern": r"(a)\1"}, "default": {"pattern": "(?="}})
    )
    assert compiled.check({"pattern": r"(a)\1"}) == []


# -- read as ECMA-262 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        # `$` is the end of the text, not before a final newline (as Python's `$` is).
        ("^a$", "a\n", False),
        ("^a$", "a", True),
        # `.` excludes ECMA's four line terminators, and matches a whole code point.
        ("^.$", "\r", False),
        ("^.$", "\n", False),
        ("^.$", "\u2028", False),
        ("^.$", "\u2029", False),
        ("^.$", "\u0085", True),
        ("^.$", "😀", True),
        # `\s` is ECMA's Unicode white space; `\S` its complement, in and out of a class.
        (r"^\s$", "\u00a0", True),
        (r"^\s$", "\ufeff", True),
        (r"^\s$", "\v", True),
        (r"^\s$", "\u3000", True),
        (r"^\s$", "\u0085", False),
        (r"^\S$", "\u00a0", False),
        (r"^\S$", "x", True),
        (r"^[\s\S]+$", "any\nthing\r\u2028", True),
        (r"^[^\S]$", " ", True),
        (r"^[^\S]$", "x", False),
        # `\d`, `\w`, `\b` are ASCII (Python's `re` would take Unicode digits and letters).
        (r"^\d$", "٣", False),
        (r"^\d$", "3", True),
        (r"^\w$", "é", False),
        (r"\bé", " é", False),
        # Escapes become code points.
        (r"^\u0041$", "A", True),
        (r"^\uD83D\uDE00$", "😀", True),
        (r"^\u{1F600}$", "😀", True),
        (r"^\x41$", "A", True),
        (r"^\cJ$", "\n", True),
        (r"^\0$", "\x00", True),
        (r"^[\b]$", "\x08", True),
        (r"^\/\-\.$", "/-.", True),
        # Named groups, quantifiers and braces.
        (r"^(?<year>\d{4})-\d{2}$", "2026-12", True),
        (r"^a{2,}$", "aaa", True),
        (r"^a{2}$", "aaa", False),
        (r"^\{x\}$", "{x}", True),
        (r"^x}$", "x}", True),
        # `[[:alpha:]]` is a class of `[`, `:`, `a`, `l`, `p`, `h` then `]`, not a POSIX class.
        (r"^[[:alpha:]]$", "a]", True),
        (r"^[[:alpha:]]$", "a", False),
        # A search, not a full match, as JSON Schema says.
        ("b", "abc", True),
    ],
)
def test_patterns_match_as_ecma_262_reads_them(pattern: str, text: str, expected: bool) -> None:
    assert matches(pattern, text) is expected


def test_a_pydantic_pattern_from_the_tool_decorator_is_checked_the_same_way() -> None:
    @agentrt.tool(side_effect="read_only", timeout=1)
    def lookup(code: Annotated[str, pydantic.Field(pattern=r"^[A-Z]{3}$")]) -> str:
        """Look a code up."""
        return code

    compiled = compile_tool(lookup.spec)
    assert compiled.check({"code": "ABC"}) == []
    assert compiled.check({"code": "ABCD"}) == ["$.code: 'ABCD' does not match '^[A-Z]{3}$'"]
