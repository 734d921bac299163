"""Tools: schemas derived by `@tool`, registration refusals, and the argument check."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import hashlib
import inspect
import io
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from enum import IntEnum
from typing import Annotated, Any, Literal, Optional

import pytest
import referencing.exceptions
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from agentrt._canonical import json_problem
from agentrt._errors import ConfigError
from agentrt._records import SideEffect, ToolCall, ToolResult, ToolSpec
from agentrt._tools import (
    AsyncFunctionTool,
    FunctionTool,
    Tool,
    ToolArgumentsError,
    check_args,
    compile_tool,
    spec_hash,
    tool,
    validate_tool,
    validate_tools,
)

SECOND = timedelta(seconds=1)


class Address(BaseModel):
    street: str
    number: int = 1


class Reply(BaseModel):
    sent: bool
    to: list[str]


@dataclass
class Receipt:
    amount_micros: int
    currency: str


def make_spec(schema: Any, **changes: Any) -> ToolSpec:
    fields: dict[str, Any] = {
        "name": "t",
        "description": "a test tool",
        "input_schema": schema,
        "side_effect": SideEffect.READ_ONLY,
        "timeout": SECOND,
    }
    fields.update(changes)
    return ToolSpec(**fields)


class SpecTool:
    """A hand-written tool around a given spec."""

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult(content=call.args)


def tool_call(args: Any, epoch: int = 1) -> ToolCall:
    return ToolCall(run_id="r" * 32, step_id="s" * 32, args=args, lease_epoch=epoch)


# ---------------------------------------------------------------------------
# @tool: schema, description, name


@tool(side_effect="read_only", timeout=30)
def search(
    query: str,
    limit: int,
    tags: list[str],
    address: Address,
    cursor: Optional[str] = None,  # noqa: UP045 - Optional is one of the spellings under test
    order: Literal["asc", "desc"] = "asc",
    page: int = 1,
) -> dict[str, Any]:
    """Search the catalogue.

    Results come back newest first:
        most recent, then older.
    """
    return {
        "query": query,
        "limit": limit,
        "tags": tags,
        "address": address,
        "cursor": cursor,
        "order": order,
        "page": page,
    }


def test_schema_derived_from_type_hints() -> None:
    assert search.spec.input_schema == {
        "$defs": {
            "Address": {
                "properties": {
                    "street": {"title": "Street", "type": "string"},
                    "number": {"default": 1, "title": "Number", "type": "integer"},
                },
                "required": ["street"],
                "title": "Address",
                "type": "object",
            }
        },
        "additionalProperties": False,
        "properties": {
            "query": {"title": "Query", "type": "string"},
            "limit": {"title": "Limit", "type": "integer"},
            "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"},
            "address": {"$ref": "#/$defs/Address"},
            "cursor": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "title": "Cursor",
            },
            "order": {
                "default": "asc",
                "enum": ["asc", "desc"],
                "title": "Order",
                "type": "string",
            },
            "page": {"default": 1, "title": "Page", "type": "integer"},
        },
        "required": ["query", "limit", "tags", "address"],
        "title": "search",
        "type": "object",
    }


def test_spec_fields_from_the_function_and_the_decorator() -> None:
    assert search.spec.name == "search"
    assert search.spec.description == (
        "Search the catalogue.\n\nResults come back newest first:\n    most recent, then older."
    )
    assert search.spec.side_effect == SideEffect.READ_ONLY
    assert search.spec.timeout == timedelta(seconds=30)
    assert search.spec.terminal is False
    assert isinstance(search, Tool)
    assert isinstance(search, FunctionTool)
    assert search.__name__ == "search"
    assert search.__doc__ is not None and search.__doc__.startswith("Search the catalogue.")


def test_explicit_name_description_and_terminal() -> None:
    @tool(
        side_effect=SideEffect.LOCAL_MUTATION,
        timeout=timedelta(milliseconds=250),
        name="write_note",
        description="Write a note.",
        terminal=True,
    )
    def note(text: str) -> str:
        """Docstring that the explicit description replaces."""
        return text

    assert note.spec == ToolSpec(
        name="write_note",
        description="Write a note.",
        input_schema={
            "additionalProperties": False,
            "properties": {"text": {"title": "Text", "type": "string"}},
            "required": ["text"],
            "title": "write_note",
            "type": "object",
        },
        side_effect="local_mutation",
        timeout=timedelta(milliseconds=250),
        terminal=True,
    )


def test_pydantic_field_metadata_reaches_the_schema() -> None:
    @tool(side_effect="read_only", timeout=1)
    def pick(n: Annotated[int, Field(ge=0, le=9, description="which one")] = 3) -> int:
        """Pick one."""
        return n

    assert pick.spec.input_schema["properties"] == {
        "n": {
            "default": 3,
            "description": "which one",
            "maximum": 9,
            "minimum": 0,
            "title": "N",
            "type": "integer",
        }
    }
    assert "required" not in pick.spec.input_schema


def test_parameter_names_pydantic_reserves_still_work() -> None:
    @tool(side_effect="read_only", timeout=1)
    def odd(model_config: int, schema: str) -> list[Any]:
        """Parameters named like pydantic's own attributes."""
        return [model_config, schema]

    assert sorted(odd.spec.input_schema["properties"]) == ["model_config", "schema"]
    assert odd.call(tool_call({"model_config": 4, "schema": "s"})) == ToolResult(content=[4, "s"])


def test_missing_docstring_is_refused_but_explicit_empty_description_is_allowed() -> None:
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="tool 'undocumented' has no description"):
        tool(side_effect="read_only", timeout=1)(undocumented)

    made = tool(side_effect="read_only", timeout=1, description="")(undocumented)
    assert made.spec.description == ""


def test_side_effect_and_timeout_are_required_at_decoration() -> None:
    decorator: Any = tool
    with pytest.raises(TypeError, match="side_effect"):
        decorator(timeout=1)
    with pytest.raises(TypeError, match="timeout"):
        decorator(side_effect="read_only")
    with pytest.raises(TypeError):
        decorator(search)  # bare @tool without arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"side_effect": "teleport", "timeout": 1}, "side_effect must be one of read_only, "),
        ({"side_effect": None, "timeout": 1}, "side_effect must be one of"),
        ({"side_effect": "read_only", "timeout": 0}, "timeout must be a positive timedelta"),
        ({"side_effect": "read_only", "timeout": -1.5}, "timeout must be a positive timedelta"),
        ({"side_effect": "read_only", "timeout": timedelta(0)}, "must be a positive timedelta"),
        ({"side_effect": "read_only", "timeout": float("nan")}, "finite number of seconds"),
        ({"side_effect": "read_only", "timeout": float("inf")}, "finite number of seconds"),
        ({"side_effect": "read_only", "timeout": True}, "timeout must be a timedelta or"),
        ({"side_effect": "read_only", "timeout": "5"}, "timeout must be a timedelta or"),
        ({"side_effect": "read_only", "timeout": 1e300}, "too long"),
        ({"side_effect": "read_only", "timeout": 1, "terminal": 1}, "terminal must be a bool"),
        ({"side_effect": "read_only", "timeout": 1, "name": ""}, "cannot name a tool"),
    ],
)
def test_decorator_refusals(kwargs: dict[str, Any], message: str) -> None:
    def documented(x: int) -> int:
        """Documented."""
        return x

    decorator: Any = tool
    with pytest.raises(ConfigError, match=message):
        decorator(**kwargs)(documented)


def test_signatures_a_schema_cannot_describe_are_refused() -> None:
    def star_args(*values: int) -> int:
        """Doc."""
        return 0

    def star_kwargs(**values: int) -> int:
        """Doc."""
        return 0

    def positional_only(x: int, /) -> int:
        """Doc."""
        return x

    def untyped(x) -> int:  # type: ignore[no-untyped-def]
        """Doc."""
        return 0

    def two_calls(a: ToolCall, b: ToolCall) -> int:
        """Doc."""
        return 0

    def call_in_a_list(a: list[ToolCall]) -> int:
        """Doc."""
        return 0

    decorate = tool(side_effect="read_only", timeout=1)
    with pytest.raises(ConfigError, match=r"\*args and \*\*kwargs"):
        decorate(star_args)
    with pytest.raises(ConfigError, match=r"\*args and \*\*kwargs"):
        decorate(star_kwargs)
    with pytest.raises(ConfigError, match="'x' is positional-only"):
        decorate(positional_only)
    with pytest.raises(ConfigError, match="'x' has no type annotation"):
        decorate(untyped)
    with pytest.raises(ConfigError, match="more than one parameter takes the ToolCall"):
        decorate(two_calls)
    with pytest.raises(ConfigError, match="must be annotated exactly ToolCall"):
        decorate(call_in_a_list)


# ---------------------------------------------------------------------------
# @tool: calling


def test_call_delivers_typed_arguments_and_defaults() -> None:
    result = search.call(
        tool_call({"query": "q", "limit": 5, "tags": ["a", "b"], "address": {"street": "Main"}})
    )
    content = result.content
    assert result.summary == ""
    # The Address instance the function received was dumped back to JSON.
    assert content == {
        "query": "q",
        "limit": 5,
        "tags": ["a", "b"],
        "address": {"street": "Main", "number": 1},
        "cursor": None,
        "order": "asc",
        "page": 1,
    }


def test_the_function_sees_python_types() -> None:
    seen: dict[str, Any] = {}

    @tool(side_effect="read_only", timeout=1)
    def inspect_types(count: int, address: Address, ratio: float = 0.5) -> None:
        """Record what arrived."""
        seen.update(count=count, address=address, ratio=ratio)

    assert inspect_types.call(tool_call({"count": 3, "address": {"street": "x", "number": 9}}))
    assert type(seen["count"]) is int and seen["count"] == 3
    assert seen["address"] == Address(street="x", number=9)
    assert seen["ratio"] == 0.5


def test_none_args_mean_an_empty_object() -> None:
    @tool(side_effect="read_only", timeout=1)
    def ping(word: str = "pong") -> str:
        """Answer."""
        return word

    assert ping.call(tool_call(None)) == ToolResult(content="pong")
    assert check_args(ping.spec, None) == []


def test_tool_call_parameter_receives_the_call_and_stays_out_of_the_schema() -> None:
    @tool(side_effect="remote_mutation", timeout=1)
    def charge(amount_micros: int, call: ToolCall) -> dict[str, int]:
        """Charge a card, fenced by the lease epoch."""
        return {"amount_micros": amount_micros, "epoch": call.lease_epoch}

    assert charge.spec.input_schema["properties"] == {
        "amount_micros": {"title": "Amount Micros", "type": "integer"}
    }
    assert charge.spec.input_schema["required"] == ["amount_micros"]
    assert charge.call(tool_call({"amount_micros": 500}, epoch=7)) == ToolResult(
        content={"amount_micros": 500, "epoch": 7}
    )


def test_optional_tool_call_parameter_allows_direct_calls_without_one() -> None:
    @tool(side_effect="read_only", timeout=1)
    def epoch(call: ToolCall | None = None) -> int:
        """The epoch, or -1 when called directly."""
        return -1 if call is None else call.lease_epoch

    assert epoch.spec.input_schema["properties"] == {}
    assert epoch() == -1
    assert epoch.call(tool_call({}, epoch=4)) == ToolResult(content=4)


def test_tool_result_passes_through_and_values_are_dumped_to_json() -> None:
    @tool(side_effect="read_only", timeout=1)
    def passthrough() -> ToolResult:
        """Already a result."""
        return ToolResult(content={"k": 1}, summary="one")

    @tool(side_effect="read_only", timeout=1)
    def models() -> dict[str, Any]:
        """Models and dataclasses inside containers."""
        return {
            "reply": Reply(sent=True, to=["a"]),
            "receipts": (Receipt(5, "USD"),),
            "plain": [1, "two", None],
        }

    assert passthrough.call(tool_call({})) == ToolResult(content={"k": 1}, summary="one")
    assert models.call(tool_call({})) == ToolResult(
        content={
            "reply": {"sent": True, "to": ["a"]},
            "receipts": [{"amount_micros": 5, "currency": "USD"}],
            "plain": [1, "two", None],
        }
    )


def test_content_that_is_not_json_is_left_for_the_driver_to_refuse() -> None:
    marker = object()

    @tool(side_effect="read_only", timeout=1)
    def odd() -> dict[str, Any]:
        """Returns something that is not JSON."""
        return {"x": marker}

    assert odd.call(tool_call({})).content == {"x": marker}


def test_invalid_arguments_raise_a_clear_error() -> None:
    with pytest.raises(ToolArgumentsError) as raised:
        search.call(tool_call({"query": "q", "limit": "many", "tags": [], "address": {}}))
    message = str(raised.value)
    assert message.startswith("tool 'search': invalid arguments: ")
    assert "limit: Input should be a valid integer" in message
    assert "address.street: Field required" in message
    assert isinstance(raised.value, ValueError)

    with pytest.raises(ToolArgumentsError, match="Extra inputs are not permitted"):
        search.call(
            tool_call({"query": "q", "limit": 1, "tags": [], "address": {"street": "s"}, "x": 1})
        )
    with pytest.raises(ToolArgumentsError, match="arguments must be a JSON object, got list"):
        search.call(tool_call([1, 2]))


def test_decorated_function_is_still_callable_directly() -> None:
    address = Address(street="Main")
    assert search("q", 2, ["t"], address, order="desc") == {
        "query": "q",
        "limit": 2,
        "tags": ["t"],
        "address": address,
        "cursor": None,
        "order": "desc",
        "page": 1,
    }


def test_async_function_gives_an_async_call() -> None:
    @tool(side_effect="destructive", timeout=2)
    async def delete(path: str, call: ToolCall) -> dict[str, Any]:
        """Delete a path."""
        await asyncio.sleep(0)
        return {"deleted": path, "epoch": call.lease_epoch}

    assert isinstance(delete, AsyncFunctionTool)
    assert isinstance(delete, Tool)
    assert inspect.iscoroutinefunction(delete.call)
    assert not inspect.iscoroutinefunction(search.call)
    result = asyncio.run(delete.call(tool_call({"path": "/tmp/x"}, epoch=3)))
    assert result == ToolResult(content={"deleted": "/tmp/x", "epoch": 3})
    direct = asyncio.run(delete("/a", tool_call({})))
    assert direct == {"deleted": "/a", "epoch": 1}


def test_async_call_validates_arguments_when_awaited() -> None:
    @tool(side_effect="read_only", timeout=2)
    async def wait(seconds: int) -> int:
        """Wait."""
        return seconds

    with pytest.raises(ToolArgumentsError, match="seconds: Input should be a valid integer"):
        asyncio.run(wait.call(tool_call({"seconds": "x"})))


# ---------------------------------------------------------------------------
# validate_tool / validate_tools


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (make_spec({"type": "object"}, name=""), "tool name must not be empty"),
        (make_spec({"type": "object"}, name=7), "tool name must be a string, got int"),
        (
            make_spec({"type": "object"}, side_effect="teleport"),
            "tool 't': side effect 'teleport' is not one of read_only, local_mutation, "
            "remote_mutation, destructive",
        ),
        (
            make_spec({"type": "object"}, timeout=timedelta(0)),
            "tool 't': timeout must be a positive timedelta, got datetime.timedelta(0)",
        ),
        (
            make_spec({"type": "object"}, timeout=timedelta(seconds=-1)),
            "timeout must be a positive timedelta",
        ),
        (make_spec({"type": "object"}, timeout=5), "timeout must be a positive timedelta, got 5"),
        (
            make_spec({"type": "object"}, timeout=timedelta(days=200_000)),
            "is longer than a tool can wait",
        ),
        (make_spec({"type": "object"}, description=None), "description must be a string"),
        (make_spec({"type": "object"}, terminal="yes"), "terminal must be a bool"),
        (
            make_spec([{"type": "object"}]),
            "tool 't': input schema must be a JSON object (a dict), got list",
        ),
        (
            make_spec({"type": "array"}),
            'tool \'t\': input schema must have "type": "object" at the top '
            "(tool arguments are always an object)",
        ),
        (make_spec({}), 'input schema must have "type": "object" at the top'),
        (make_spec({"type": ["object"]}), 'input schema must have "type": "object" at the top'),
        (
            make_spec({"type": "object", "properties": {"a": {"type": "bogus"}}}),
            "tool 't': input schema does not compile against "
            "https://json-schema.org/draft/2020-12/schema: $.properties.a.type: ",
        ),
        (
            make_spec({"type": "object", "properties": {"a": {"pattern": "("}}}),
            "tool 't': the pattern '(' at $.properties.a.pattern is refused because it "
            "cannot be compiled to a linear-time matcher: missing ): (",
        ),
        (
            make_spec({"type": "object", "minProperties": -1}),
            "$.minProperties: -1 is less than the minimum of 0",
        ),
        (
            make_spec({"type": "object", "enum": {1, 2}}),
            "tool 't': input schema is not usable JSON: $.enum: builtins.set is not a JSON value",
        ),
        (
            make_spec({"type": "object", "maximum": float("inf")}),
            "input schema is not usable JSON: $.maximum: inf is not a JSON number",
        ),
        (
            make_spec({"type": "object", 1: "x"}),
            "input schema is not usable JSON: $: an object key must be a str, not int",
        ),
        (
            make_spec({"type": "object", "$schema": "https://example.com/meta"}),
            "input schema names a $schema this library does not bundle: 'https://example.com/meta'",
        ),
        (
            make_spec({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
            "tool 't': input schema reference '#/$defs/missing' does not resolve inside the schema",
        ),
    ],
)
def test_validate_tool_refusals(spec: ToolSpec, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate_tool(SpecTool(spec))
    assert message in str(raised.value)


def test_validate_tool_refuses_objects_that_are_not_tools() -> None:
    class NoCall:
        spec = make_spec({"type": "object"})

    with pytest.raises(ConfigError, match="it has no `spec` attribute holding a ToolSpec"):
        validate_tool(object())
    with pytest.raises(ConfigError, match="tool 't' has no callable `call` method"):
        validate_tool(NoCall())


def nested(levels: int) -> dict[str, Any]:
    """A schema whose objects nest `levels` deep (the top object is level 1)."""
    node: dict[str, Any] = {"type": "object"}
    for _ in range(levels - 1):
        node = {"type": "object", "x-nested": node}
    return node


def test_schema_nesting_limit_is_256() -> None:
    assert validate_tool(SpecTool(make_spec(nested(256)))).input_schema == nested(256)
    with pytest.raises(
        ConfigError, match=r"is not usable JSON: \$(\.x-nested)+: nesting deeper than 256"
    ):
        validate_tool(SpecTool(make_spec(nested(257))))


def test_hugely_nested_schema_is_refused_without_recursing_through_it() -> None:
    node: Any = {"type": "object"}
    for _ in range(100_000):
        node = [node]
    with pytest.raises(ConfigError, match="nesting deeper than 256"):
        validate_tool(SpecTool(make_spec({"type": "object", "default": node})))


@contextmanager
def no_io() -> Iterator[list[str]]:
    """Fail on any file or network access; also list attempts, in case one is swallowed."""
    attempts: list[str] = []

    def refuse(what: str) -> Any:
        def refuser(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}{args!r}")
            raise AssertionError(f"I/O attempted: {what}{args!r}")

        return refuser

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse("socket.connect"))
        patch.setattr(socket, "create_connection", refuse("socket.create_connection"))
        patch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
        patch.setattr(urllib.request, "urlopen", refuse("urlopen"))
        patch.setattr(builtins, "open", refuse("open"))
        patch.setattr(io, "open", refuse("io.open"))
        yield attempts


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/x.json"}}},
            "tool 't': input schema refers outside itself at $.properties.a: "
            "$ref 'https://example.com/x.json' (only '#...' references are allowed; "
            "nothing is ever fetched)",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "other.json"}}},
            "refers outside itself at $.properties.a: $ref 'other.json'",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}},
            "refers outside itself at $.properties.a: $ref 'file:///etc/passwd'",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "other.json#/$defs/x"}}},
            "$ref 'other.json#/$defs/x'",
        ),
        (
            {"type": "object", "items": {"$dynamicRef": "https://example.com/meta#items"}},
            "refers outside itself at $.items: $dynamicRef 'https://example.com/meta#items'",
        ),
        (
            {
                "$schema": "https://json-schema.org/draft/2019-09/schema",
                "type": "object",
                "additionalProperties": {"$recursiveRef": "https://example.com/r"},
            },
            "$recursiveRef 'https://example.com/r'",
        ),
        (
            {
                "$id": "https://example.com/schemas/tool.json",
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/x"}},
                "$defs": {"x": {"type": "string"}},
            },
            "tool 't': input schema sets a base URI at $: "
            "$id 'https://example.com/schemas/tool.json' "
            "(an id would let references resolve elsewhere)",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"$id": "sub/", "$ref": "#/$defs/x"}},
                "$defs": {"x": {"type": "string"}},
            },
            "sets a base URI at $.properties.a: $id 'sub/'",
        ),
        (
            # A pointer can make any part of the document a schema, so the walk
            # looks everywhere, not only where a dialect reads subschemas.
            {"type": "object", "$ref": "#/x-hidden", "x-hidden": {"$ref": "https://evil.test/"}},
            "refers outside itself at $.x-hidden: $ref 'https://evil.test/'",
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "id": "http://example.com/root.json",
                "type": "object",
            },
            "sets a base URI at $: id 'http://example.com/root.json'",
        ),
        (
            {"type": "object", "$defs": {"x": {"$schema": "https://example.com/other-meta"}}},
            "names an unknown dialect at $.$defs.x: $schema 'https://example.com/other-meta'",
        ),
    ],
)
def test_references_outside_the_schema_are_refused_without_io(
    schema: dict[str, Any], message: str
) -> None:
    spec = make_spec(schema)
    with no_io() as attempts, pytest.raises(ConfigError) as raised:
        validate_tool(SpecTool(spec))
    assert attempts == []
    assert message in str(raised.value)


def test_the_registry_never_fetches_even_if_a_reference_got_past_the_walk() -> None:
    compiled = compile_tool(make_spec({"type": "object"}))
    escaped = compiled.validator.evolve(schema={"$ref": "https://example.com/x.json"})
    with no_io() as attempts, pytest.raises(referencing.exceptions.Unresolvable):
        list(escaped.iter_errors({}))
    assert attempts == []


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"$ref": "#"}},
            "$defs": {"x": {"type": "string", "$anchor": "ex"}},
        },
        {
            "type": "object",
            "properties": {"a": {"$ref": "#ex"}},
            "$defs": {"x": {"type": "integer", "$anchor": "ex"}},
        },
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"a": {"$ref": "#/definitions/x"}},
            "definitions": {"x": {"$id": "#plain", "type": "string"}},
        },
        {
            "$schema": "http://json-schema.org/draft-04/schema",
            "type": "object",
            "properties": {"id": {"type": "string"}, "b": {"$ref": "#/definitions/b"}},
            "definitions": {"b": {"type": "boolean"}},
        },
        # A property named "$ref" is not a reference.
        {"type": "object", "properties": {"$ref": {"type": "string"}}},
    ],
)
def test_local_references_are_accepted(schema: dict[str, Any]) -> None:
    with no_io() as attempts:
        assert validate_tool(SpecTool(make_spec(schema))).input_schema == schema
    assert attempts == []


def test_local_references_are_applied() -> None:
    spec = make_spec(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"$ref": "#ex"}},
            "$defs": {"x": {"type": "string"}, "y": {"$anchor": "ex", "type": "integer"}},
        }
    )
    assert check_args(spec, {"a": "s", "b": 1}) == []
    assert check_args(spec, {"a": 1, "b": "s"}) == [
        "$.a: 1 is not of type 'string'",
        "$.b: 's' is not of type 'integer'",
    ]


def test_validate_tools_refuses_duplicates_and_sorts_by_name() -> None:
    b = SpecTool(make_spec({"type": "object"}, name="b"))
    a = SpecTool(make_spec({"type": "object"}, name="a"))
    c = SpecTool(make_spec({"type": "object"}, name="c"))
    assert validate_tools([b, c, a]) == [a, b, c]
    assert validate_tools([]) == []
    with pytest.raises(ConfigError, match="duplicate tool name 'b': tool names must be unique"):
        validate_tools([b, a, SpecTool(make_spec({"type": "object"}, name="b"))])
    with pytest.raises(ConfigError, match="tool name must not be empty"):
        validate_tools([a, SpecTool(make_spec({"type": "object"}, name=""))])


# ---------------------------------------------------------------------------
# spec_hash, compile_tool


def test_spec_hash_is_sha256_of_the_sorted_compact_json() -> None:
    spec = make_spec({"type": "object"})
    encoded = (
        b'{"description":"a test tool","input_schema":{"type":"object"},"name":"t",'
        b'"side_effect":"read_only","timeout":1000000000}'
    )
    assert spec_hash(spec) == hashlib.sha256(encoded).hexdigest()
    assert spec_hash(make_spec({"type": "object"}, terminal=True)) != spec_hash(spec)


def test_compile_tool_is_cached_by_content() -> None:
    first = compile_tool(make_spec({"type": "object", "x-cache-test": 1}))
    again = compile_tool(make_spec({"type": "object", "x-cache-test": 1}))
    other = compile_tool(make_spec({"type": "object", "x-cache-test": 2}))
    assert again is first
    assert other is not first
    assert first.hash == spec_hash(first.spec)
    assert first.dialect == "https://json-schema.org/draft/2020-12/schema"


def test_an_older_dialect_is_honoured() -> None:
    spec = make_spec(
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object",
            "properties": {"n": {"type": "number", "maximum": 5, "exclusiveMaximum": True}},
        }
    )
    assert compile_tool(spec).dialect == "http://json-schema.org/draft-04/schema"
    assert check_args(spec, {"n": 5}) == ["$.n: 5 is greater than or equal to the maximum of 5"]
    assert check_args(spec, {"n": 4}) == []


# ---------------------------------------------------------------------------
# check_args

BOUNDED = make_spec(
    {
        "type": "object",
        "properties": {
            "n": {"type": "number", "maximum": 1000, "multipleOf": 0.5},
            "m": {"type": "integer", "multipleOf": 7},
            "x": {"type": "number", "exclusiveMaximum": 1.5, "minimum": -1e308},
            "s": {"type": "string"},
        },
        "additionalProperties": False,
    },
    name="bounded",
)


class OddFloat(float):
    def __repr__(self) -> str:
        raise RuntimeError("a consumer's repr must not be called")


def test_huge_int_against_maximum_is_an_error_string() -> None:
    assert check_args(BOUNDED, {"n": 10**5000}) == [
        "$.n: <integer of 5001 digits> is greater than the maximum of 1000"
    ]
    assert check_args(BOUNDED, {"x": 10**5000}) == [
        "$.x: <integer of 5001 digits> is greater than or equal to the maximum of 1.5"
    ]
    assert check_args(BOUNDED, {"x": -(10**5000)}) == [
        "$.x: <integer of 5001 digits> is less than the minimum of -1e+308"
    ]


def test_huge_int_against_multiple_of_does_not_overflow() -> None:
    assert check_args(BOUNDED, {"m": 7 * 10**4999}) == []
    assert check_args(BOUNDED, {"m": 7 * 10**4999 + 1}) == [
        "$.m: <integer of 5000 digits> is not a multiple of 7"
    ]
    assert check_args(BOUNDED, {"n": -(10**5000)}) == []


def test_infinite_and_nan_floats_are_error_strings() -> None:
    assert check_args(BOUNDED, {"n": OddFloat("inf")}) == ["$.n: inf is not a JSON number"]
    assert check_args(BOUNDED, {"m": float("-inf")}) == ["$.m: -inf is not a JSON number"]
    assert check_args(BOUNDED, {"x": float("nan")}) == ["$.x: nan is not a JSON number"]


def test_float_subclasses_are_checked_as_plain_floats() -> None:
    assert check_args(BOUNDED, {"n": OddFloat(2.5)}) == []
    assert check_args(BOUNDED, {"n": OddFloat(2.25)}) == ["$.n: 2.25 is not a multiple of 0.5"]


def test_multiple_of_is_decided_on_decimal_values() -> None:
    spec = make_spec({"type": "object", "properties": {"p": {"multipleOf": 0.1}}})
    assert check_args(spec, {"p": 0.3}) == []
    assert check_args(spec, {"p": 1e308}) == []
    assert check_args(spec, {"p": 0.35}) == ["$.p: 0.35 is not a multiple of 0.1"]


def test_a_reference_back_to_the_root_keeps_the_safe_checks() -> None:
    spec = make_spec(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"n": {"multipleOf": 0.1}, "again": {"$ref": "#"}},
        }
    )
    assert check_args(spec, {"again": {"n": 0.3, "again": {"n": 7 * 10**4999}}}) == []
    assert check_args(spec, {"again": {"n": 0.35}}) == ["$.again.n: 0.35 is not a multiple of 0.1"]


def test_integers_beyond_ten_thousand_digits_are_not_usable() -> None:
    assert check_args(BOUNDED, {"m": 10**10000}) == ["$.m: integer of more than 10000 characters"]
    assert check_args(BOUNDED, {"m": 10**10000 - 1}) == [
        "$.m: <integer of 10000 digits> is not a multiple of 7"
    ]


def test_non_object_arguments_are_error_strings() -> None:
    assert check_args(BOUNDED, [1, 2]) == ["$: arguments must be a JSON object, got array"]
    assert check_args(BOUNDED, "x") == ["$: arguments must be a JSON object, got string"]
    assert check_args(BOUNDED, 3) == ["$: arguments must be a JSON object, got number"]
    assert check_args(BOUNDED, True) == ["$: arguments must be a JSON object, got boolean"]


def test_values_that_are_not_json_are_error_strings() -> None:
    assert check_args(BOUNDED, {"s": {1, 2}}) == ["$.s: builtins.set is not a JSON value"]
    # A tuple is usable JSON (a list), as the record has it: checked against the schema.
    assert check_args(BOUNDED, {"s": (1, 2)}) == ["$.s: [1, 2] is not of type 'string'"]
    assert check_args(BOUNDED, {1: "x"}) == ["$: an object key must be a str, not int"]
    assert check_args(BOUNDED, {"s": "\ud800"}) == ["$.s: lone surrogate U+D800 in a string"]
    assert check_args(BOUNDED, object()) == ["$: builtins.object is not a JSON value"]


def test_subclassed_json_values_are_accepted_as_their_plain_values() -> None:
    class Small(IntEnum):
        SEVEN = 7

    assert check_args(BOUNDED, {"m": Small.SEVEN}) == []


def test_errors_are_sorted_by_path_then_message() -> None:
    errors = check_args(BOUNDED, {"s": 1, "n": "x", "m": 1.5, "zz": 0, "aa": 0})
    assert errors == [
        "$: Additional properties are not allowed ('aa', 'zz' were unexpected)",
        "$.m: 1.5 is not a multiple of 7",
        "$.m: 1.5 is not of type 'integer'",
        "$.n: 'x' is not of type 'number'",
        "$.s: 1 is not of type 'string'",
    ]


def test_arguments_nested_deeper_than_256_are_refused() -> None:
    spec = make_spec({"type": "object"})
    value: Any = "leaf"
    for _ in range(255):
        value = [value]
    assert check_args(spec, {"deep": value}) == []
    assert check_args(spec, {"deep": [value]}) == [
        "$.deep" + "[0]" * 255 + ": nesting deeper than 256"
    ]


def test_deep_arguments_against_a_recursive_schema_never_raise() -> None:
    spec = make_spec(
        {
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/node"}},
            "$defs": {
                "node": {
                    "anyOf": [
                        {"type": "integer"},
                        {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    ]
                }
            },
        }
    )
    shallow: Any = 1
    for _ in range(10):
        shallow = [shallow]
    assert check_args(spec, {"tree": shallow}) == []
    deep: Any = 1
    for _ in range(254):
        deep = [deep]
    # Python's recursion limit may be reached before the arguments' depth limit.
    assert check_args(spec, {"tree": deep}) in (
        [],
        ["$: the arguments nest too deeply to be checked against this schema"],
    )


def test_formats_are_annotations_not_assertions() -> None:
    spec = make_spec({"type": "object", "properties": {"e": {"type": "string", "format": "email"}}})
    assert check_args(spec, {"e": "not an email"}) == []


def test_long_messages_are_clipped() -> None:
    errors = check_args(BOUNDED, {"n": "y" * 10_000})
    assert len(errors) == 1
    assert errors[0].startswith("$.n: 'yyyy")
    assert errors[0].endswith("…")
    assert len(errors[0]) == len("$.n: ") + 500


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**4000, max_value=10**4500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["n", "m", "x", "s", "other"]), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(args=JSON_VALUES)
def test_check_args_never_raises(args: Any) -> None:
    errors = check_args(BOUNDED, args)
    assert all(isinstance(error, str) and error.startswith("$") for error in errors)
    assert errors == sorted(errors, key=lambda e: tuple(e.partition(": ")[::2]))


SIMPLE_SCHEMAS = [
    {
        "type": "object",
        "title": "t",
        "properties": {
            "n": {"type": "integer", "title": "N"},
            "m": {"type": "number"},
            "s": {"type": "string", "description": "d", "default": "x"},
            "x": {"type": "boolean"},
            "other": {},
        },
        "required": ["n"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"n": {"type": "null"}}, "$comment": "c"},
    {"type": "object", "required": ["n", "m"], "additionalProperties": True},
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "integer"}, "m": {"type": "string"}},
        "additionalProperties": False,
    },
]
NOT_SIMPLE_SCHEMAS = [
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
    {"type": "object", "minProperties": 1},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"n": {"type": "array"}}},
    {
        "$schema": "http://json-schema.org/draft-03/schema#",
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    },
]


def _simple(schema: dict[str, Any]) -> Any:
    return compile_tool(make_spec(schema))


def test_only_simple_schemas_get_the_quick_acceptance() -> None:
    # Decision 0114: a simple schema's valid arguments skip the validator; any other
    # schema, and any argument the quick check is not sure of, go to the validator.
    assert all(_simple(schema).accepts is not None for schema in SIMPLE_SCHEMAS)
    assert all(_simple(schema).accepts is None for schema in NOT_SIMPLE_SCHEMAS)
    assert compile_tool(BOUNDED).accepts is None

    @tool(side_effect="read_only", timeout=30)
    def read_page(page: int, text: str = "", size: float = 1.0, more: bool = False) -> str:
        """Read one page."""
        return text

    assert compile_tool(read_page.spec).accepts is not None


@settings(max_examples=400, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=len(SIMPLE_SCHEMAS) - 1),
    args=st.dictionaries(st.sampled_from(["n", "m", "x", "s", "other"]), JSON_VALUES, max_size=5),
)
def test_the_quick_acceptance_accepts_only_what_the_validator_accepts(
    index: int, args: dict[str, Any]
) -> None:
    compiled = _simple(SIMPLE_SCHEMAS[index])
    slow = dataclasses.replace(compiled, accepts=None)
    assert compiled.check(args) == slow.check(args)
    assert compiled.accepts is not None
    if json_problem(args) is None and compiled.accepts(args):  # `check` asks it of usable JSON
        assert slow.check(args) == [], args
