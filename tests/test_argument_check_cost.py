"""The argument check costs about what the argument's size allows.

It runs on the event loop before the tool and before any timeout; the schema is
the developer's, the argument the model's. A recursive union and `uniqueItems`
over objects are checked in time about linear in the argument (`_keywords`).

The bounds are on this process's CPU time, not the clock's: an exponential check would
take minutes of it, and a loaded machine stretches the clock, not the CPU a check takes.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Literal, Union

import pydantic
import pytest

import agentrt
from agentrt import Decision, SideEffect, ToolSpec
from agentrt._tools import compile_tool
from agentrt.scripted import ScriptedAgent
from conftest import FakeClock, Ids, RecordingTool


class Lit(pydantic.BaseModel):
    op: Literal["lit"]
    value: int


class Neg(pydantic.BaseModel):
    op: Literal["neg"]
    arg: Expr


class Not(pydantic.BaseModel):
    op: Literal["not"]
    arg: Expr


Expr = Union[Lit, Neg, Not]  # noqa: UP007  # a union of models, as pydantic users write it
Neg.model_rebuild()
Not.model_rebuild()


class Last(pydantic.BaseModel):
    # The discriminating field last: each branch's check descends the subtree first.
    arg: Tree | None
    op: Literal["last"]


class First(pydantic.BaseModel):
    op: Literal["first"]
    arg: Tree | None


Tree = Union[First, Last]  # noqa: UP007
Last.model_rebuild()
First.model_rebuild()


@agentrt.tool(side_effect="read_only", timeout=5)
def evaluate(expr: Expr) -> int:
    """Evaluate a boolean/arithmetic expression tree."""
    return 0


def _nested(depth: int, leaf: dict[str, object]) -> dict[str, object]:
    expr = leaf
    for level in range(depth):
        expr = {"op": "not" if level % 2 else "neg", "arg": expr}
    return expr


@pytest.mark.timeout(120)
def test_a_recursive_union_argument_is_checked_in_about_linear_time(
    store: agentrt.Store,
) -> None:
    """A `@tool` takes a recursive union of pydantic models (an expression tree: an
    `anyOf` of `$ref`s). A tree 12 deep runs (pydantic's own binding of the arguments,
    in the tool's call, still doubles per level: decision 0151); the argument check
    refuses one 40 deep with a bad leaf at once, naming the union."""
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [
                Decision.tool_call("evaluate", {"expr": _nested(12, {"op": "lit", "value": 1})}),
                Decision.complete(),
            ]
        ),
        policy=agentrt.default_policy(),
        tools=[evaluate],
        now=FakeClock(),
        new_id=Ids(),
    )
    began = time.process_time()
    run = driver.start_sync("evaluate it")
    assert run.status == "COMPLETED"
    assert time.process_time() - began < 3
    compiled = compile_tool(evaluate.spec)
    began = time.process_time()
    errors = compiled.check({"expr": _nested(40, {"op": "lit", "value": "x"})})
    assert time.process_time() - began < 1
    assert len(errors) == 1
    assert errors[0].startswith("$.expr: {'op': 'not', 'arg': ")  # the message, clipped


def _tree(depth: int, leaf: object) -> object:
    tree = leaf
    for level in range(depth):
        tree = {"op": "last" if level % 2 else "first", "arg": tree}
    return tree


def test_a_union_whose_branches_descend_before_they_fail_is_checked_at_once() -> None:
    """A recursive union whose models name their discriminating field last: a branch that
    does not hold still checks the whole subtree before its `op` fails. Each branch is
    judged once per value, so 60 levels are checked at once, holding or not."""

    def build(tree: Tree) -> str:
        """Build the tree."""
        return ""

    compiled = compile_tool(agentrt.tool(side_effect="read_only", timeout=5)(build).spec)
    began = time.process_time()
    assert compiled.check({"tree": _tree(60, None)}) == []
    errors = compiled.check({"tree": _tree(60, 7)})
    assert time.process_time() - began < 1
    assert len(errors) == 1
    assert errors[0].startswith("$.tree: {'op': 'last', 'arg': ")  # the message, clipped


def _array_spec(schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name="t",
        description="a tool",
        input_schema={"type": "object", "properties": {"items": schema}},
        side_effect=SideEffect.READ_ONLY,
        timeout=timedelta(seconds=1),
    )


@pytest.mark.timeout(120)
def test_unique_items_over_objects_is_checked_in_about_linear_time(
    store: agentrt.Store,
) -> None:
    """A tool's schema says an array of objects has `uniqueItems` (as pydantic writes for
    `set[FrozenModel]`). 2,000 small distinct objects from the model are checked at once
    and the tool runs."""
    tool = RecordingTool(
        "tag",
        SideEffect.READ_ONLY,
        schema={
            "type": "object",
            "properties": {
                "items": {"type": "array", "uniqueItems": True, "items": {"type": "object"}}
            },
        },
    )
    items = [{"a": i} for i in range(2000)]
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent([Decision.tool_call("tag", {"items": items}), Decision.complete()]),
        policy=agentrt.default_policy(),
        tools=[tool],
        now=FakeClock(),
        new_id=Ids(),
    )
    began = time.process_time()
    run = driver.start_sync("tag them")
    assert run.status == "COMPLETED"
    assert len(tool.calls) == 1
    assert time.process_time() - began < 3


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([True, 1], True),
        ([[True], [1]], True),
        ([{"a": [1]}, {"a": [1.0]}], False),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([{"a": 1}, {"a": 1, "b": None}], True),
        (["1", 1, None, False, 0], True),
    ],
)
def test_unique_items_calls_equal_what_json_schema_calls_equal(
    items: list[Any], unique: bool
) -> None:
    """`1` and `1.0` are equal, `true` and `1` are not, objects regardless of key order."""
    errors = compile_tool(_array_spec({"type": "array", "uniqueItems": True})).check(
        {"items": items}
    )
    assert (errors == []) is unique
    if not unique:
        assert errors == [f"$.items: {items!r} has non-unique elements"]


def test_one_of_says_which_branches_hold_as_jsonschema_does() -> None:
    """`oneOf` with no branch holding, or more than one, gives jsonschema's messages."""
    compiled = compile_tool(
        _array_spec({"oneOf": [{"type": "integer"}, {"type": "number"}, {"minimum": 0}]})
    )
    assert compiled.check({"items": -1.5}) == []
    assert compiled.check({"items": 1}) == [
        "$.items: 1 is valid under each of {'type': 'number'}, {'minimum': 0}, {'type': 'integer'}"
    ]
    assert compiled.check({"items": "x"}) == []  # `minimum` applies to numbers only
    strict = compile_tool(_array_spec({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}))
    assert strict.check({"items": "x"}) == [
        "$.items: 'x' is not valid under any of the given schemas"
    ]
