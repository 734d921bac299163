"""Tools: the `Tool` protocol, the `@tool` decorator, and the checks every tool passes.

This module owns how a tool's JSON Schema is derived from a typed function
(pydantic), how a tool is refused at registration (`validate_tool`, with no I/O
ever: a schema may only refer to itself), how a schema is compiled once and
applied to arguments (`compile_tool`, `check_args`: the exact acceptance the
driver applies, which never raises on hostile arguments), and how a spec is
hashed (`spec_hash`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import re
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Never,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
    runtime_checkable,
)

from . import _keywords as keywords
from . import _patterns as patterns
from ._canonical import JSONFloat, content_hash, copy_json, json_problem
from ._clock import duration_to_ns
from ._errors import AgentrtError, ConfigError, ToolNameError
from ._fork import renewed_in_children
from ._records import SideEffect, ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    import jsonschema.exceptions
    import pydantic
    import referencing

# pydantic, jsonschema and referencing are imported where first used: `@tool` and
# `compile_tool` load them, `import agentrt` does not (decision 0061). A function
# that needs one imports it itself; nothing at module level touches them.

__all__ = [
    "AsyncFunctionTool",
    "CompiledTool",
    "FunctionTool",
    "Tool",
    "ToolArgumentsError",
    "ToolDecorator",
    "check_args",
    "compile_tool",
    "spec_hash",
    "tool",
    "validate_tool",
    "validate_tools",
]

P = ParamSpec("P")
R = TypeVar("R")

MAX_JSON_DEPTH = 256
# Integers this long are shown abbreviated in messages: Python refuses to turn an
# int of more than 4300 digits into text, and nobody reads 100 digits anyway.
_LONG_INT = 10**100
_MAX_MESSAGE_CHARS = 500
# A timeout must fit a 64-bit nanosecond count (how it is stored) and a thread wait.
_MAX_TIMEOUT_NS = min(2**63 - 1, int(threading.TIMEOUT_MAX) * 1_000_000_000)
_SIDE_EFFECTS = tuple(member.value for member in SideEffect)
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# What every provider accepts as a tool (function) name; `fullmatch`, so no newline slips by.
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}", re.ASCII)


@runtime_checkable
class Tool(Protocol):
    """Anything the driver can call: a spec, and `call` (a plain function or a coroutine).

    What `call` returns is the result; what it raises is a `tool_error`, except
    `AbortRun` (the run ends) and `OutcomeUnknown`, raised once the request has
    left and the tool cannot tell whether it took effect: a tool that is not
    read-only then waits for a person, as after a crash (decision 0054). A
    timeout is an ordinary `timeout` failure.
    """

    spec: ToolSpec

    def call(self, call: ToolCall) -> ToolResult | Awaitable[ToolResult]: ...


class ToolArgumentsError(AgentrtError, ValueError):
    """A `@tool` function was called with arguments its signature does not accept."""


# ---------------------------------------------------------------------------
# The @tool decorator


class _FunctionToolBase:
    """What sync and async function tools share: the spec and the argument binding."""

    spec: ToolSpec
    # Copied from the function by `functools.update_wrapper`.
    __name__: str
    __wrapped__: Callable[..., Any]

    def __init__(
        self,
        fn: Callable[..., Any],
        spec: ToolSpec,
        model: type[pydantic.BaseModel],
        params: Mapping[str, str],
        call_param: str | None,
        reconcile: Callable[[ToolCall], Any] | None = None,
    ) -> None:
        # Keep the function's name, docstring and `__wrapped__` for introspection and
        # docs. First, so that attributes copied from `fn` cannot replace ours.
        functools.update_wrapper(typing.cast(Any, self), fn)
        self.spec = spec
        self._fn = fn
        self._model = model
        # pydantic field name -> parameter name; fields are named p0, p1, ... so
        # that any parameter name works (pydantic reserves `model_*` and `_*`).
        self._params = dict(params)
        self._call_param = call_param
        # The tool's own reconciliation of an interrupted call (decision 0067).
        self.reconcile = reconcile

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec.name!r}>"

    def _bind(self, call: ToolCall) -> dict[str, Any]:
        """Validate `call.args` through the signature's model into typed keyword arguments."""
        args = {} if call.args is None else call.args
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(
                f"tool {self.spec.name!r}: arguments must be a JSON object, "
                f"got {type(args).__name__}"
            )
        import pydantic

        try:
            validated = self._model.model_validate(dict(args))
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or '$'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise ToolArgumentsError(
                f"tool {self.spec.name!r}: invalid arguments: {problems}"
            ) from exc
        kwargs = {param: getattr(validated, field) for field, param in self._params.items()}
        if self._call_param is not None:
            kwargs[self._call_param] = call
        return kwargs


class FunctionTool(_FunctionToolBase, Generic[P, R]):
    """A Tool made by `@tool` from a plain function.

    `call(tool_call)` validates the arguments and runs the function; calling the
    object itself runs the original function unchanged, for unit tests.
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._fn(*args, **kwargs)
        return result

    def call(self, call: ToolCall) -> ToolResult:
        return _as_result(self._fn(**self._bind(call)))


class AsyncFunctionTool(_FunctionToolBase, Generic[P, R]):
    """A Tool made by `@tool` from an `async def` function; `call` is a coroutine function.

    Calling the object itself returns the original function's coroutine, for unit tests.
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        coroutine: Coroutine[Any, Any, R] = self._fn(*args, **kwargs)
        return coroutine

    async def call(self, call: ToolCall) -> ToolResult:
        # A sync decorator over an `async def` (`functools.wraps`) returns its coroutine.
        value = self._fn(**self._bind(call))
        return _as_result(await value if inspect.isawaitable(value) else value)


class ToolDecorator:
    """What `tool(...)` returns: applied to a function, it builds the Tool."""

    def __init__(
        self,
        side_effect: SideEffect,
        timeout: timedelta,
        name: str | None,
        description: str | None,
        terminal: bool,
        reconcile: Callable[[ToolCall], Any] | None = None,
    ) -> None:
        self._reconcile = reconcile
        self._side_effect = side_effect
        self._timeout = timeout
        self._name = name
        self._description = description
        self._terminal = terminal

    @overload
    def __call__(  # type: ignore[overload-overlap]  # a coroutine function is also a Callable
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> AsyncFunctionTool[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> FunctionTool[P, R]: ...

    def __call__(
        self, fn: Callable[..., Any]
    ) -> FunctionTool[..., Any] | AsyncFunctionTool[..., Any]:
        name = self._name if self._name is not None else getattr(fn, "__name__", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"cannot name a tool made from {fn!r}: pass name=...")
        description = self._description
        if description is None:
            description = inspect.cleandoc(fn.__doc__ or "")
            if not description:
                raise ConfigError(
                    f"tool {name!r} has no description: write a docstring or pass description=..."
                )
        unwrapped = _unwrapped(fn)
        if inspect.isgeneratorfunction(unwrapped) or inspect.isasyncgenfunction(unwrapped):
            raise ConfigError(
                f"tool {name!r} is a generator function, whose body would never run: "
                "return the result instead of yielding it"
            )
        model, params, call_param = _signature_model(fn, name)
        import pydantic

        try:
            schema = model.model_json_schema()
        except pydantic.PydanticUserError as exc:
            raise ConfigError(f"tool {name!r}: no JSON Schema for its parameters: {exc}") from exc
        spec = ToolSpec(
            name=name,
            description=description,
            input_schema=schema,
            side_effect=self._side_effect,
            timeout=self._timeout,
            terminal=self._terminal,
        )
        compile_tool(spec)
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(unwrapped):
            return AsyncFunctionTool(fn, spec, model, params, call_param, self._reconcile)
        return FunctionTool(fn, spec, model, params, call_param, self._reconcile)


def _unwrapped(fn: Callable[..., Any]) -> Any:
    """The function under `functools.wraps` decorators, or `fn` when that cannot be told."""
    try:
        return inspect.unwrap(fn)
    except ValueError:  # a cycle of `__wrapped__`
        return fn


def _hinted(fn: Callable[..., Any]) -> Any:
    """What carries `fn`'s parameter hints: a callable instance's are its `__call__`'s,
    not its class's attribute annotations."""
    if inspect.isroutine(fn) or isinstance(fn, type | functools.partial):
        return fn
    return type(fn).__call__


def tool(
    *misplaced: Never,
    side_effect: SideEffect | str,
    timeout: timedelta | float,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    reconcile: Callable[[ToolCall], Any] | None = None,
) -> ToolDecorator:
    """Turn a typed function (plain or `async def`) into a Tool.

    The input schema comes from the parameters' type hints through pydantic
    (`additionalProperties: false`, parameters without defaults required,
    defaults kept); the description from the docstring; the name from the
    function. A parameter annotated `ToolCall` is not an argument: the function
    receives the ToolCall there (to read `lease_epoch`, say). `side_effect` and
    `timeout` (a timedelta or a number of seconds) are required: the author must
    say what the tool does to the world. Refusals raise ConfigError at decoration.

    `reconcile` is the tool's own reconciliation (decision 0067): after a crash
    interrupted one of its calls, it receives that `ToolCall` as recorded and
    returns a `Reconciled` (`found(result)`, `not_found(safe_to_repeat=...)`,
    `unknown()`), bounded by `timeout`; a run-level `reconcile=` takes precedence.

    The result is still callable as the original function, for unit tests;
    the driver uses `result.call(tool_call)`, which validates the arguments.
    """
    if misplaced:  # the function given to the decorator's own call
        what = getattr(misplaced[0], "__name__", "the function")
        raise ConfigError(
            f"agentrt.tool takes no positional argument: write @agentrt.tool(side_effect=...,"
            f" timeout=...) above {what}"
        )
    effect, duration, terminal = tool_class(side_effect, timeout, terminal)
    check_reconcile(reconcile)
    if description is not None and not isinstance(description, str):
        raise ConfigError(f"description must be a string, got {type(description).__name__}")
    return ToolDecorator(effect, duration, name, description, terminal, reconcile)


def check_reconcile(reconcile: object) -> None:
    """A tool's reconciliation is None or callable; ConfigError otherwise."""
    if reconcile is not None and not callable(reconcile):
        raise ConfigError(
            f"reconcile must be a function taking the ToolCall, got {type(reconcile).__name__}"
        )


def tool_class(
    side_effect: object, timeout: object, terminal: object = False
) -> tuple[SideEffect, timedelta, bool]:
    """What a tool's author says it does to the world, checked and normalised.

    `side_effect` one of the four classes; `timeout` a timedelta or a finite
    number of seconds (made a timedelta); `terminal` a bool. Refusals raise
    ConfigError in one sentence. `tool()` and the framework adapters'
    `Classification` both check through here.
    """
    if not isinstance(side_effect, str) or side_effect not in _SIDE_EFFECTS:
        raise ConfigError(
            f"side_effect must be one of {', '.join(_SIDE_EFFECTS)}, got {side_effect!r}"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, timedelta | int | float):
        raise ConfigError(
            f"timeout must be a timedelta or a number of seconds, got {type(timeout).__name__}"
        )
    if not isinstance(timeout, timedelta):
        if not math.isfinite(timeout):
            raise ConfigError(f"timeout must be a finite number of seconds, got {timeout!r}")
        try:
            timeout = timedelta(seconds=timeout)
        except OverflowError as exc:
            raise ConfigError(f"timeout of {timeout!r} seconds is too long") from exc
    if not isinstance(terminal, bool):
        raise ConfigError(f"terminal must be a bool, got {type(terminal).__name__}")
    return SideEffect(side_effect), timeout, terminal


def _signature_model(
    fn: Callable[..., Any], name: str
) -> tuple[type[pydantic.BaseModel], dict[str, str], str | None]:
    """A pydantic model of `fn`'s parameters, its field-to-parameter map, and the ToolCall slot."""
    import pydantic
    from pydantic.fields import FieldInfo

    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(_hinted(fn), include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ConfigError(f"tool {name!r}: cannot read the function's type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    params: dict[str, str] = {}
    call_param: str | None = None
    for index, (param_name, param) in enumerate(signature.parameters.items()):
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigError(f"tool {name!r}: *args and **kwargs cannot be described by a schema")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ConfigError(
                f"tool {name!r}: parameter {param_name!r} is positional-only; "
                "tool arguments are passed by name"
            )
        if param_name not in hints:
            raise ConfigError(f"tool {name!r}: parameter {param_name!r} has no type annotation")
        hint = hints[param_name]
        if _is_tool_call_hint(hint):
            if call_param is not None:
                raise ConfigError(f"tool {name!r}: more than one parameter takes the ToolCall")
            call_param = param_name
            continue
        if _mentions_tool_call(hint):
            raise ConfigError(
                f"tool {name!r}: parameter {param_name!r} must be annotated exactly ToolCall "
                "(or ToolCall | None) to receive the call"
            )
        field_name = f"p{index}"
        if param.default is inspect.Parameter.empty:
            fields[field_name] = (hint, pydantic.Field(alias=param_name))
        elif isinstance(param.default, FieldInfo):
            # `x: int = Field(3, ge=0)`: merge the author's field with our alias.
            fields[field_name] = (
                typing.Annotated[hint, param.default],
                pydantic.Field(alias=param_name),
            )
        else:
            fields[field_name] = (hint, pydantic.Field(default=param.default, alias=param_name))
        params[field_name] = param_name
    import pydantic_core

    try:
        model = pydantic.create_model(
            name, __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
    except (
        pydantic.PydanticUserError,
        pydantic.PydanticSchemaGenerationError,
        pydantic_core.SchemaError,
        TypeError,
    ) as exc:
        # pydantic_core's message is a nest of "Error building ..." lines: its last says why.
        schema_error = isinstance(exc, pydantic_core.SchemaError)
        reason = str(exc).splitlines()[-1].strip() if schema_error else exc
        raise ConfigError(
            f"tool {name!r}: cannot build a schema from its signature: {reason}"
        ) from exc
    _refuse_hidden_reads(model.__pydantic_core_schema__, name)
    return model, params, call_param


def _refuse_hidden_reads(core: Any, name: str) -> None:
    """Refuse a signature whose validation reads arguments the JSON Schema does not show:
    a field read through `AliasPath` or `AliasChoices`, or, in a model that also reads
    fields by name (`validate_by_name`, `populate_by_name`), a field with an alias. The
    function would receive what neither the schema check nor the policy saw."""
    stack: list[tuple[Any, bool]] = [(core, False)]
    while stack:
        node, by_name = stack.pop()
        if isinstance(node, list):
            stack.extend((item, by_name) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        config = node.get("config")
        if isinstance(config, dict):
            by_name = config.get("validate_by_name") is True
        fields = node.get("fields")
        named: list[tuple[Any, Any]] = []
        if isinstance(fields, dict):  # a model's or a TypedDict's
            named = list(fields.items())
        elif isinstance(fields, list):  # a dataclass's
            named = [(f.get("name"), f) for f in fields if isinstance(f, dict)]
        for field_name, field in named:
            alias = field.get("validation_alias") if isinstance(field, dict) else None
            if isinstance(alias, list) or (by_name and alias not in (None, field_name)):
                how = "a path or choices" if isinstance(alias, list) else "its name and its alias"
                raise ConfigError(
                    f"tool {name!r}: field {field_name!r} is read through {how}, so the "
                    "function would receive what the schema and the policy never saw"
                )
        for key, item in node.items():
            if key != "config":
                stack.append((item, by_name))


def _is_tool_call_hint(hint: Any) -> bool:
    if hint is ToolCall:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return set(typing.get_args(hint)) == {ToolCall, type(None)}
    return False


def _mentions_tool_call(hint: Any) -> bool:
    if hint is ToolCall:
        return True
    return any(_mentions_tool_call(arg) for arg in typing.get_args(hint))


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    return ToolResult(content=_json_ready(value, 0))


def _json_ready(value: Any, depth: int) -> Any:
    """Dump pydantic models and dataclasses inside `value` to plain JSON data.

    Anything else is left as it is, so that content which is not usable JSON
    reaches the driver's check (and is reported as such) instead of being hidden.
    """
    if depth > MAX_JSON_DEPTH:
        return value
    import pydantic  # loaded already: only a tool made by `@tool` returns through here

    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return pydantic.TypeAdapter(type(value)).dump_python(value, mode="json")
    if isinstance(value, dict):
        return {key: _json_ready(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item, depth + 1) for item in value]
    return value


# ---------------------------------------------------------------------------
# Plain JSON: the checks applied to schemas and to arguments


class _LongInt(int):
    """An int whose repr stays short, so messages never stringify thousands of digits."""

    def __repr__(self) -> str:
        return f"<integer of {_digit_count(self)} digits>"

    __str__ = __repr__


def _digit_count(value: int) -> int:
    magnitude = abs(value)
    digits = max(1, int(magnitude.bit_length() * math.log10(2)))
    while magnitude >= 10**digits:
        digits += 1
    while digits > 1 and magnitude < 10 ** (digits - 1):
        digits -= 1
    return digits


def _child_path(path: str, key: str | int) -> str:
    # The same notation as jsonschema's `json_path`, so every message reads alike.
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def _plain_json(value: Any, errors: list[str]) -> Any:
    """A plain copy of a JSON value, or None after appending to `errors` why it is unusable.

    What is usable is decided by `canonical.json_problem`, the rule every other
    entry point applies (store.md), so arguments and schemas are accepted or
    refused exactly as the record would accept or refuse them; the problem is
    reported as `"<json path>: <reason>"` in jsonschema's path notation.
    """
    try:
        problem = json_problem(value)
    except Exception as exc:  # a str subclass's own method raised: never raise for the value
        errors.append(f"$: not usable JSON: {_clip(f'{type(exc).__name__}: {exc}')}")
        return None
    if problem is not None:
        where, reason = problem
        path = "$"
        for step in where:
            path = _child_path(path, step)
        errors.append(f"{path}: {reason}")
        return None
    return _plain_copy(value)


def _plain_copy(value: Any) -> Any:
    """A copy of a usable JSON value in plain types, built without calling its methods.

    Subclasses (IntEnum, StrEnum, float subclasses...) become their plain type, so
    no consumer-defined method runs during validation; a `JSONFloat` (agentrt's
    own, keeping a literal such as `1e400`) stays as it is; tuples
    become lists; very long ints become `_LongInt`, which compares as the same int
    but prints short. Nesting is bounded (usable JSON is at most 256 deep).
    """
    kind = type(value)
    if value is None or kind is bool or kind is JSONFloat:
        return value
    if isinstance(value, int):
        number = int.__int__(value)
        return _LongInt(number) if abs(number) >= _LONG_INT else number
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return {str.__str__(key): _plain_copy(item) for key, item in value.items()}
    return [_plain_copy(item) for item in value]


def _clip(message: str) -> str:
    if len(message) <= _MAX_MESSAGE_CHARS:
        return message
    return message[: _MAX_MESSAGE_CHARS - 1] + "…"


# ---------------------------------------------------------------------------
# Schema dialects, compiled without I/O


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    # Reached only if a reference escaped the checks below: fail closed, never fetch.
    # referencing reports it as Unretrievable.
    raise LookupError(f"refusing to retrieve {uri!r}: a tool schema may only refer to itself")


@functools.cache
def _no_io_registry() -> referencing.Registry[Any]:
    """The registry every compiled schema resolves through: it never retrieves anything."""
    import referencing

    # mypy does not see the attrs alias `retrieve` of the private field `_retrieve`.
    return referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _exact(number: int | float) -> Fraction:
    # A float is taken at its shortest decimal form, the literal it was parsed from.
    return Fraction(number) if isinstance(number, int) else Fraction(Decimal(repr(number)))


def _multiple_of(
    validator: Any, divisor: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.exceptions.ValidationError]:
    """`multipleOf` decided exactly on decimal values: it cannot overflow, and 0.3 is a
    multiple of 0.1 (jsonschema's float arithmetic raises on huge ints and says no)."""
    if not validator.is_type(instance, "number") or not validator.is_type(divisor, "number"):
        return
    if divisor == 0 or _exact(instance) % _exact(divisor) != 0:
        import jsonschema.exceptions

        yield jsonschema.exceptions.ValidationError(
            f"{instance!r} is not a multiple of {divisor!r}"
        )


@functools.cache
def _dialects() -> dict[str, tuple[Any, referencing.Specification[Any]]]:
    """`$schema` URI (without its empty fragment) -> (validator class, specification)."""
    import jsonschema
    import jsonschema.validators
    import referencing.jsonschema

    out: dict[str, tuple[Any, referencing.Specification[Any]]] = {}
    for base in (
        jsonschema.Draft3Validator,
        jsonschema.Draft4Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft202012Validator,
    ):
        keyword = "divisibleBy" if "divisibleBy" in base.VALIDATORS else "multipleOf"
        # Patterns are searched in linear time, never with Python's backtracking `re`;
        # unions and uniqueness cost what the argument's size allows (`_keywords`).
        bounded = {
            name: function
            for name, function in (
                ("anyOf", keywords.any_of),
                ("oneOf", keywords.one_of),
                ("uniqueItems", keywords.unique_items),
            )
            if name in base.VALIDATORS
        }
        cls = jsonschema.validators.extend(
            base,
            validators={
                keyword: _multiple_of,
                "pattern": patterns.pattern,
                "patternProperties": patterns.pattern_properties,
                "additionalProperties": patterns.additional_properties,
                **bounded,
            },
        )
        cls.evolve = _evolve_within(cls)
        uri = base.META_SCHEMA.get("$id", base.META_SCHEMA.get("id"))
        out[_strip_empty_fragment(uri)] = (
            cls,
            referencing.jsonschema.specification_with(uri),
        )
    return out


def _evolve_within(cls: Any) -> Callable[..., Any]:
    """`cls.evolve`, keeping every subschema within this library's validator classes.

    jsonschema's `evolve` (called on each descent into a subschema) gives a subschema
    that names a `$schema` jsonschema's stock class for that dialect, which searches
    patterns with Python's backtracking `re`: a nested dialect gets this library's
    class for it instead (registration has refused any dialect not bundled).
    """
    import attrs

    fields = tuple((field.name, field.alias) for field in attrs.fields(cls) if field.init)

    def evolve(self: Any, **changes: Any) -> Any:
        schema = changes.setdefault("schema", self.schema)
        new = type(self)
        declared = schema.get("$schema") if isinstance(schema, dict) else None
        if isinstance(declared, str):
            new = _dialects().get(_strip_empty_fragment(declared), (new,))[0]
        for name, alias in fields:
            if alias not in changes:
                changes[alias] = getattr(self, name)
        return new(**changes)

    return evolve


def _metaschema_formats(cls: Any) -> Any:
    """The dialect's format checks for its metaschema, but `regex` left to `patterns`.

    jsonschema checks `format: regex` with Python's `re`, a different dialect
    from ECMA-262; `patterns.check_patterns` is the one judge of a pattern.
    """
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {
        **cls.FORMAT_CHECKER.checkers,
        "regex": (lambda instance: True, ()),
    }
    return checker


def _strip_empty_fragment(uri: str) -> str:
    return uri[:-1] if uri.endswith("#") else uri


_DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_OLD_ID_DIALECTS = frozenset(
    {"http://json-schema.org/draft-03/schema", "http://json-schema.org/draft-04/schema"}
)


def _local_refs(schema: dict[str, Any], name: str, dialect: str) -> list[str]:
    """Every reference in the schema; refuses any that could reach outside it.

    The walk visits every object, not only the places a dialect reads schemas
    from: a `#/...` pointer can make any part of the document act as a schema.
    """
    id_keywords = ("$id", "id") if dialect in _OLD_ID_DIALECTS else ("$id",)
    refs: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, _child_path(path, i)) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for keyword in _REF_KEYWORDS:
            target = node.get(keyword)
            if isinstance(target, str):
                if not target.startswith("#"):
                    raise ConfigError(
                        f"tool {name!r}: input schema refers outside itself at {path}: "
                        f"{keyword} {_clip(repr(target))} (only '#...' references are allowed; "
                        "nothing is ever fetched)"
                    )
                refs.append(target)
        for keyword in id_keywords:
            base = node.get(keyword)
            if isinstance(base, str) and base and not base.startswith("#"):
                raise ConfigError(
                    f"tool {name!r}: input schema sets a base URI at {path}: "
                    f"{keyword} {_clip(repr(base))} (an id would let references resolve elsewhere)"
                )
        nested_dialect = node.get("$schema")
        if (
            path != "$"
            and isinstance(nested_dialect, str)
            and _strip_empty_fragment(nested_dialect) not in _dialects()
        ):
            raise ConfigError(
                f"tool {name!r}: input schema names an unknown dialect at {path}: "
                f"$schema {_clip(repr(nested_dialect))}"
            )
        stack.extend((item, _child_path(path, key)) for key, item in node.items())
    return refs


# ---------------------------------------------------------------------------
# Specs: refusal, hashing, compilation, argument checks


def spec_hash(spec: ToolSpec) -> str:
    """Hex SHA-256 of the spec's JSON encoding: how a registered tool is identified."""
    return content_hash(spec.to_json())


@dataclasses.dataclass(frozen=True)
class CompiledTool:
    """A spec whose schema has been checked and compiled; `check` applies it to arguments."""

    spec: ToolSpec
    hash: str
    dialect: str
    validator: Any = dataclasses.field(repr=False, compare=False)
    # A check that may only say "accepted" (`_simple_acceptance`), for the simple
    # schemas most tools have; None when the schema is not one of them.
    accepts: Callable[[dict[str, Any]], bool] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    # Whether a union's branch judged once per value holds wherever it is reached: not
    # with `$dynamicRef` or `$recursiveRef` (`_keywords`).
    judge_once: bool = dataclasses.field(default=False, repr=False, compare=False)

    def check(self, args: Any) -> list[str]:
        """Errors of `args` against the schema, as `"<json path>: <problem>"`, sorted.

        An empty list means accepted. `None` means `{}`. Never raises: values that
        are not usable JSON, huge numbers, and schemas too recursive for the
        arguments' depth all come back as error strings.
        """
        errors: list[str] = []
        plain = _plain_json({} if args is None else args, errors)
        if errors:
            return sorted(errors, key=_by_path)
        if not isinstance(plain, dict):
            return [f"$: arguments must be a JSON object, got {_json_type(plain)}"]
        if self.accepts is not None and self.accepts(plain):
            return []  # what the validator would find: nothing (`_simple_acceptance`)
        try:
            with keywords.judged() if self.judge_once else contextlib.nullcontext():
                found = [
                    f"{error.json_path}: {_clip(error.message)}"
                    for error in self.validator.iter_errors(plain)
                ]
        except RecursionError:
            return ["$: the arguments nest too deeply to be checked against this schema"]
        except Exception as exc:  # the contract is: never raise because of the arguments
            problem = _clip(f"{type(exc).__name__}: {exc}")
            return [f"$: the arguments could not be checked: {problem}"]
        return sorted(found, key=_by_path)


def _by_path(error: str) -> tuple[str, str]:
    # Every message is "<json path>: <problem>"; a path never contains ": " before
    # its own end unless a property name does, which only reorders among equals.
    path, _, problem = error.partition(": ")
    return path, problem


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array"


_CACHE_SIZE = 512
_cache: OrderedDict[str, CompiledTool] = OrderedDict()
_cache_lock = threading.Lock()

renewed_in_children(__name__, "_cache_lock", threading.Lock)  # a lock held at a fork (0125)


def _check_spec_fields(spec: ToolSpec) -> str:
    """Refuse a spec's name, description, side effect, timeout or terminal flag; return the name."""
    name = spec.name
    if not isinstance(name, str):
        raise ConfigError(f"tool name must be a string, got {type(name).__name__}")
    if not name:
        raise ConfigError("tool name must not be empty")
    if _TOOL_NAME.fullmatch(name) is None:
        raise ToolNameError(
            f"tool name {_clip(repr(name))} is refused: a tool name must be 1 to 64 ASCII "
            "letters, digits, '_' or '-' (^[a-zA-Z0-9_-]{1,64}$), which every provider accepts"
        )
    if not isinstance(spec.description, str):
        raise ConfigError(
            f"tool {name!r}: description must be a string, got {type(spec.description).__name__}"
        )
    if not isinstance(spec.side_effect, str) or spec.side_effect not in _SIDE_EFFECTS:
        raise ConfigError(
            f"tool {name!r}: side effect {spec.side_effect!r} is not one of "
            f"{', '.join(_SIDE_EFFECTS)}"
        )
    timeout = spec.timeout
    if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
        raise ConfigError(f"tool {name!r}: timeout must be a positive timedelta, got {timeout!r}")
    if duration_to_ns(timeout) > _MAX_TIMEOUT_NS:
        raise ConfigError(f"tool {name!r}: timeout {timeout} is longer than a tool can wait")
    if not isinstance(spec.terminal, bool):
        raise ConfigError(f"tool {name!r}: terminal must be a bool, got {spec.terminal!r}")
    return name


def compile_tool(spec: ToolSpec) -> CompiledTool:
    """Check a spec the way `Driver(...)` does and compile its schema (cached by spec hash).

    Refuses with ConfigError: a bad name, description, side effect, timeout or
    terminal flag; an input schema that is not a JSON object with `"type":
    "object"` at the top, is not usable JSON (nested deeper than 256, say),
    names a `$schema` this library does not bundle, does not compile against
    its metaschema (Draft 2020-12 by default), has a reference that does not
    start with `#` or does not resolve, or sets an `$id` that changes the base
    URI. Nothing is ever fetched: no file, no network.
    """
    name = _check_spec_fields(spec)
    schema = spec.input_schema
    if not isinstance(schema, dict):
        raise ConfigError(
            f"tool {name!r}: input schema must be a JSON object (a dict), "
            f"got {type(schema).__name__}"
        )
    errors: list[str] = []
    plain = _plain_json(schema, errors)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"tool {name!r}: input schema is not usable JSON: {errors[0]}{more}")
    try:
        key = spec_hash(spec)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"tool {name!r}: the spec cannot be encoded: {exc}") from exc
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    compiled = _compile(spec, name, key, plain)
    with _cache_lock:
        _cache[key] = compiled
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled


def _compile(spec: ToolSpec, name: str, key: str, schema: dict[str, Any]) -> CompiledTool:
    if schema.get("type") != "object":
        raise ConfigError(
            f'tool {name!r}: input schema must have "type": "object" at the top '
            "(tool arguments are always an object)"
        )
    declared = schema.get("$schema", _DEFAULT_DIALECT)
    if not isinstance(declared, str) or _strip_empty_fragment(declared) not in _dialects():
        raise ConfigError(
            f"tool {name!r}: input schema names a $schema this library does not bundle: "
            f"{_clip(repr(declared))}"
        )
    dialect = _strip_empty_fragment(declared)
    cls, specification = _dialects()[dialect]
    refs = _local_refs(schema, name, dialect)
    import jsonschema.exceptions
    import referencing.exceptions

    try:
        cls.check_schema(schema, format_checker=_metaschema_formats(cls))
    except jsonschema.exceptions.SchemaError as exc:
        raise ConfigError(
            f"tool {name!r}: input schema does not compile against {dialect}: "
            f"{exc.json_path}: {_clip(exc.message)}"
        ) from exc
    patterns.check_patterns(schema, name)
    # The dialect is chosen; the root's `$schema` goes, because jsonschema re-reads
    # it whenever a reference re-enters the root and would swap in its stock
    # validator class, which lacks the overflow-safe `multipleOf`.
    root = {keyword: value for keyword, value in schema.items() if keyword != "$schema"}
    resolver = _no_io_registry().resolver_with_root(specification.create_resource(root))
    for ref in refs:
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            raise ConfigError(
                f"tool {name!r}: input schema reference {_clip(repr(ref))} does not resolve "
                "inside the schema"
            ) from exc
    validator = cls(root, registry=_no_io_registry())
    return CompiledTool(
        spec=spec,
        hash=key,
        dialect=dialect,
        validator=validator,
        accepts=_simple_acceptance(root, dialect),
        judge_once=not any(keyword in node for node in _objects(root) for keyword in _DYNAMIC),
    )


_DYNAMIC = ("$dynamicRef", "$recursiveRef")


def _objects(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in a JSON value, data included."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# What a simple schema may hold besides its structure: annotations, which no dialect
# from draft 4 on validates (draft 3 reads `required` inside a property: not simple).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
_SIMPLE_ROOT = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_SIMPLE_PROPERTY = _ANNOTATIONS | {"type"}
# A simple type, and the exact Python types of a plain copy (`_plain_copy`) that every
# dialect from draft 4 on accepts as it (bool is not an integer; a `_LongInt` or a
# `JSONFloat`, a float that is an integer, are left to the validator).
_SIMPLE_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
}
_ANY_VALUE: frozenset[type] = frozenset()


def _simple_acceptance(
    schema: dict[str, Any], dialect: str
) -> Callable[[dict[str, Any]], bool] | None:
    """For a simple object schema, a check that says True only when the validator would
    find no error; None for any other schema (the validator then judges every call).

    Simple: `"type": "object"`, `properties` whose schemas give at most one simple `type`
    (or none: any value), `required` names, a boolean `additionalProperties`, and
    annotations; draft 4 or later. False means "ask the validator", never "invalid".
    """
    if dialect == "http://json-schema.org/draft-03/schema" or not schema.keys() <= _SIMPLE_ROOT:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if (
        schema.get("type") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not all(type(name) is str for name in required)
        or type(additional) is not bool
    ):
        return None
    types: dict[str, frozenset[type]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict) or not sub.keys() <= _SIMPLE_PROPERTY:
            return None
        if "type" not in sub:
            types[name] = _ANY_VALUE
            continue
        kinds = _SIMPLE_TYPES.get(sub["type"]) if type(sub["type"]) is str else None
        if kinds is None:
            return None
        types[name] = kinds
    names = tuple(required)

    def accepts(args: dict[str, Any]) -> bool:
        for name in names:
            if name not in args:
                return False
        for name, value in args.items():
            kinds = types.get(name)
            if kinds is None:
                if not additional:
                    return False
            elif kinds and type(value) not in kinds:
                return False
        return True

    return accepts


def check_args(spec: ToolSpec, args: Any) -> list[str]:
    """The driver's argument check: `[]` accepts, else sorted `"<json path>: <problem>"` strings.

    `None` means `{}`. Raises ConfigError only for a spec `compile_tool` refuses;
    never raises because of the arguments.
    """
    return compile_tool(spec).check(args)


def validate_tool(tool: object) -> ToolSpec:
    """Refuse a tool the way `Driver(...)` does (ConfigError); return its spec."""
    spec = getattr(tool, "spec", None)
    if not isinstance(spec, ToolSpec):
        raise ConfigError(f"{tool!r} is not a tool: it has no `spec` attribute holding a ToolSpec")
    if not callable(getattr(tool, "call", None)):
        raise ConfigError(f"tool {spec.name!r} has no callable `call` method")
    compile_tool(spec)
    return spec


def registered_spec(spec: ToolSpec) -> ToolSpec:
    """The spec as registered: its schema copied, so later edits of the tool's dict change nothing.

    A Driver validates, hashes, asks its policy about and approves calls
    against this one copy; a changed tool is a new registration (a new Driver),
    which a resume then compares by hash (loop.md).
    """
    return dataclasses.replace(spec, input_schema=copy_json(spec.input_schema))


def validate_tools(tools: Sequence[Tool]) -> list[Tool]:
    """Validate every tool, refuse duplicate names, and return the tools sorted by name."""
    seen: set[str] = set()
    for item in tools:
        name = validate_tool(item).name
        if name in seen:
            raise ConfigError(f"duplicate tool name {name!r}: tool names must be unique")
        seen.add(name)
    return sorted(tools, key=lambda item: item.spec.name)
