"""One rule for usable JSON: the argument and schema checks of `tools` apply `canonical`'s.

Before, `tools` had its own walker and disagreed with the record (store.md,
"Usable JSON") on four kinds of input: a tuple (usable, refused by tools), a
negative integer of 10,000 digits (a 10,001-character literal: refused by the
record, accepted by tools), a `JSONFloat` such as `1e400` (a usable literal,
refused by tools as `inf`), and two str-subclass keys that are the same string
(refused by the record, silently merged by tools). See
docs/decisions/0031-one-usable-json-rule.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolSpec
from agentrt._canonical import JSONFloat, check_json, parse_json
from agentrt._errors import JSONValueError
from agentrt._tools import check_args, compile_tool
from conftest import FakeClock, Ids, RecordingTool


class SameText(str):
    """A str subclass whose instances are distinct dict keys even when their text is equal."""

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def spec(schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name="t",
        description="d",
        input_schema=schema,
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=5),
    )


ANY_OBJECT = spec({"type": "object"})


def deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


CASES = {
    # Where the two walkers used to disagree:
    "a tuple": {"xs": (1, 2)},
    "a negative integer of 10,000 digits": {"n": -(10**9999)},
    "a number literal 1e400": parse_json(b'{"x": 1e400}'),
    "two keys that are the same string": {SameText("a"): 1, SameText("a"): 2},
    # Where they agreed, kept agreeing:
    "a positive integer of 10,000 digits": {"n": 10**9999},
    "an integer of 10,001 digits": {"n": 10**10000},
    "a lone surrogate": {"s": "\ud800"},
    "a set": {"s": {1}},
    "an infinite float": {"x": float("inf")},
    "an int key": {1: "x"},
    "nesting 256 deep": {"d": deep(255)},
    "nesting 257 deep": {"d": deep(256)},
}


@pytest.mark.parametrize("value", CASES.values(), ids=list(CASES))
def test_the_argument_check_accepts_and_refuses_exactly_what_the_record_does(value: Any) -> None:
    errors = check_args(ANY_OBJECT, value)
    try:
        check_json(value)
    except JSONValueError as exc:
        reason = str(exc).rsplit(" at $", 1)[0]
        assert len(errors) == 1
        assert errors[0].split(": ", 1)[1] == reason
    else:
        assert errors == []


def test_the_four_former_disagreements_now_answer_as_the_record() -> None:
    assert check_args(ANY_OBJECT, {"xs": (1, 2)}) == []
    assert check_args(ANY_OBJECT, {"n": -(10**9999)}) == [
        "$.n: integer of more than 10000 characters"
    ]
    assert check_args(ANY_OBJECT, parse_json(b'{"x": 1e400}')) == []
    assert check_args(ANY_OBJECT, {SameText("a"): 1, SameText("a"): 2}) == [
        "$: two keys of this object are the same string"
    ]


def test_a_tuple_argument_is_checked_against_the_schema_as_the_list_it_is_stored_as() -> None:
    arrays = spec({"type": "object", "properties": {"xs": {"type": "array", "maxItems": 1}}})
    assert check_args(arrays, {"xs": (1,)}) == []
    assert check_args(arrays, {"xs": (1, 2)}) == ["$.xs: [1, 2] is too long"]


def test_a_number_written_1e400_is_checked_by_its_literal() -> None:
    bounded = spec({"type": "object", "properties": {"x": {"type": "number", "maximum": 10}}})
    value = parse_json(b'{"x": 1e400}')
    assert isinstance(value["x"], JSONFloat)
    assert check_args(bounded, value) == ["$.x: 1e400 is greater than the maximum of 10"]
    assert check_args(bounded, parse_json(b'{"x": 1e-400}')) == []


def test_a_schema_holding_a_tuple_compiles_as_the_list_it_is_registered_as() -> None:
    compiled = compile_tool(spec({"type": "object", "required": ("a",)}))
    assert compiled.check({}) == ["$: 'a' is a required property"]
    assert compiled.check({"a": 1}) == []


def test_a_schema_holding_a_negative_integer_of_10000_digits_is_refused() -> None:
    with pytest.raises(
        agentrt.ConfigError,
        match=r"input schema is not usable JSON: \$\.maximum: integer of more than 10000 "
        r"characters$",
    ):
        compile_tool(spec({"type": "object", "maximum": -(10**9999)}))


def test_a_model_argument_written_1e400_is_usable_and_reaches_the_tool(
    store: agentrt.Store,
) -> None:
    tool = RecordingTool("t", SideEffect.READ_ONLY, schema={"type": "object"})
    args = parse_json(b'{"x": 1e400}')
    replies = iter([Decision.tool_call("t", args), Decision.complete("done")])
    driver = agentrt.Driver(
        store=store,
        agent=lambda _: next(replies),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    run = driver.start_sync("goal")
    assert (run.status, run.reason) == ("COMPLETED", "goal_completed")
    first = store.list_steps(run.id)[0]
    assert first.status == "done"
    assert first.observation is not None
    assert first.observation.kind == "tool_result"
    assert [call.args for call in tool.calls] == [args]
    assert repr(tool.calls[0].args["x"]) == "1e400"
