"""Attack campaign (tp): the argument check's cost against small hostile arguments.

The argument check runs on the event loop before the tool and before any timeout
(decision 0016 made patterns linear for exactly this reason: the schema is the
developer's, the argument is the model's). These arguments are a few hundred bytes
to a few dozen kilobytes; today they keep the loop busy for seconds to days.
"""

from __future__ import annotations

import time
from typing import Literal, Union

import pydantic
import pytest

import agentrt
from agentrt import Decision, SideEffect
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


@agentrt.tool(side_effect="read_only", timeout=5)
def evaluate(expr: Expr) -> int:
    """Evaluate a boolean/arithmetic expression tree."""
    return 0


def _nested(depth: int) -> dict[str, object]:
    expr: dict[str, object] = {"op": "lit", "value": 1}
    for _ in range(depth):
        expr = {"op": "not", "arg": expr}
    return expr


@pytest.mark.timeout(300)
def test_a_recursive_union_argument_a_few_hundred_bytes_long_is_checked_at_once(
    store: agentrt.Store,
) -> None:
    """A `@tool` takes a recursive union of pydantic models (an expression or filter tree,
    pydantic's `anyOf` of `$ref`s). jsonschema's `anyOf` collects every error of every
    branch, descending the whole subtree under each, so the check's time doubles with each
    level: a 360-byte argument nested 15 deep keeps the event loop busy for about ten
    seconds, 30 deep for days. The check should take time about linear in the argument."""
    driver = agentrt.Driver(
        store=store,
        agent=ScriptedAgent(
            [Decision.tool_call("evaluate", {"expr": _nested(15)}), Decision.complete()]
        ),
        policy=agentrt.default_policy(),
        tools=[evaluate],
        now=FakeClock(),
        new_id=Ids(),
    )
    began = time.monotonic()
    run = driver.start_sync("evaluate it")
    elapsed = time.monotonic() - began
    assert run.status == "COMPLETED"
    assert elapsed < 3, f"checking a 15-deep, 360-byte argument took {elapsed:.1f}s"


@pytest.mark.timeout(300)
def test_unique_items_over_objects_is_checked_in_about_linear_time(
    store: agentrt.Store,
) -> None:
    """A tool's schema says an array of objects has `uniqueItems` (as pydantic writes for
    `set[FrozenModel]`, and as hand-written schemas do). jsonschema compares every pair of
    unhashable items: 2,000 small distinct objects (about 20 KB from the model) keep the
    event loop busy for seconds, 10,000 for minutes. The check should be about linear."""
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
    began = time.monotonic()
    run = driver.start_sync("tag them")
    elapsed = time.monotonic() - began
    assert run.status == "COMPLETED"
    assert len(tool.calls) == 1
    assert elapsed < 3, f"checking 2,000 distinct objects for uniqueness took {elapsed:.1f}s"
