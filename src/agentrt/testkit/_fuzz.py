"""Schema-driven arguments for a tool: valid ones, and near-misses one change away.

`fuzz_args(spec, n, seed)` generates `n` argument values from the tool's input
schema, deterministically by `seed`: values built to satisfy the schema, and
values built by changing one thing in such a value (a required property
dropped, a type swapped, a bound crossed by one, an unknown property added, an
enum or const missed, an array too short or too long). Every case is labelled
by the runtime's own check (`agentrt.check_args`), never by the generator's
intent, so a label is always what the driver will do with those args.

hypothesis-jsonschema is not a dependency; this small generator covers the
common keywords: type (or a list of types), properties, required,
additionalProperties, enum, const, minimum/maximum and their exclusive forms,
multipleOf, minLength/maxLength, items/prefixItems, minItems/maxItems,
uniqueItems, allOf/anyOf/oneOf, local $ref and a few formats. A keyword it
does not know (pattern, say) can make a "valid" value fail; the label says so.
"""

from __future__ import annotations

import copy
import math
import random
import string
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import ConfigError, SideEffect, ToolSpec, check_args
from ..lowlevel import JSON

_MAX_DEPTH = 8
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
# A value of each JSON type, used to swap a value's type for another.
_OTHER_TYPE_VALUES: dict[str, JSON] = {
    "object": {},
    "array": [],
    "string": "text",
    "integer": 7,
    "number": 7.5,
    "boolean": True,
    "null": None,
}
_FORMATS = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "email": "someone@example.com",
    "uri": "https://example.com/x",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
}


@dataclass(frozen=True)
class FuzzCase:
    """One generated argument value and what the runtime's schema check makes of it."""

    args: JSON
    valid: bool  # check_args accepts it
    mutation: str  # "" for a value built to be valid; else the one change made
    errors: tuple[str, ...] = ()  # check_args' findings when it is refused


def fuzz_args(
    tool: Any, n: int = 100, seed: int = 0, *, invalid_ratio: float = 0.5
) -> list[FuzzCase]:
    """`n` argument values for `tool` (a ToolSpec, a tool, or a bare input schema).

    About `invalid_ratio` of them are near-misses of a valid value. The same
    `(tool, n, seed)` gives the same cases.
    """
    spec = _spec(tool)
    if n < 0:
        raise ConfigError("n must not be negative")
    if not 0.0 <= invalid_ratio <= 1.0:
        raise ConfigError("invalid_ratio is a fraction between 0 and 1")
    check_args(spec, {})  # refuses a schema the runtime refuses (ConfigError), up front
    rng = random.Random(seed)
    gen = _Generator(dict(spec.input_schema), rng)
    out: list[FuzzCase] = []
    for _ in range(n):
        base = gen.value(gen.root, 0)
        mutation = ""
        args: JSON = base
        if rng.random() < invalid_ratio:
            options = gen.mutants(gen.root, base, 0)
            if options:
                mutation, args = options[rng.randrange(len(options))]
        errors = tuple(check_args(spec, args))
        out.append(FuzzCase(args=args, valid=not errors, mutation=mutation, errors=errors))
    return out


def _spec(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    spec = getattr(tool, "spec", None)
    if isinstance(spec, ToolSpec):
        return spec
    if isinstance(tool, Mapping):
        return ToolSpec(
            name="fuzzed",
            description="a schema under fuzzing",
            input_schema=dict(tool),
            side_effect=SideEffect.READ_ONLY,
            timeout=timedelta(seconds=1),
        )
    raise ConfigError(f"fuzz_args needs a ToolSpec, a tool or a schema; got {tool!r}")


class _Generator:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    # -- schema plumbing -------------------------------------------------------

    def resolve(self, schema: Any) -> Any:
        """Follow local `$ref`s ("#/$defs/x") to the schema they name."""
        for _ in range(_MAX_DEPTH):
            if not isinstance(schema, Mapping) or "$ref" not in schema:
                return schema
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                return {}
            target: Any = self.root
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target = target[part]
                else:
                    return {}
            schema = target
        return schema

    def types(self, schema: Mapping[str, Any]) -> list[str]:
        declared = schema.get("type")
        if isinstance(declared, str):
            return [declared]
        if isinstance(declared, list) and declared:
            return [t for t in declared if isinstance(t, str)]
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            return ["object"]
        if "items" in schema or "prefixItems" in schema or "minItems" in schema:
            return ["array"]
        if "minLength" in schema or "maxLength" in schema or "format" in schema:
            return ["string"]
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "multipleOf")):
            return ["number"]
        return ["string", "integer", "boolean", "null"]

    # -- valid values ------------------------------------------------------------

    def value(self, schema: Any, depth: int) -> JSON:
        schema = self.resolve(schema)
        if schema is True or schema == {} or not isinstance(schema, Mapping):
            return self.rng.choice(["x", 1, True, None])
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(self.rng.choice(schema["enum"]))
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            return self.value(self.merged(schema), depth)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                rest = {k: v for k, v in schema.items() if k != key}
                branch = self.resolve(self.rng.choice(schema[key]))
                if isinstance(branch, Mapping):
                    return self.value({**rest, **branch}, depth)
        kind = self.rng.choice(self.types(schema))
        make: Callable[[Mapping[str, Any], int], JSON] = getattr(self, f"_make_{kind}", self._any)
        return make(schema, depth)

    def merged(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """allOf folded into one schema (properties and required united; last word wins)."""
        out: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        props: dict[str, Any] = dict(out.get("properties", {}))
        required: list[str] = list(out.get("required", []))
        for part in schema["allOf"]:
            part = self.resolve(part)
            if not isinstance(part, Mapping):
                continue
            props.update(part.get("properties", {}))
            required += [r for r in part.get("required", []) if r not in required]
            out.update({k: v for k, v in part.items() if k not in ("properties", "required")})
        if props:
            out["properties"] = props
        if required:
            out["required"] = required
        return out

    def _any(self, schema: Mapping[str, Any], depth: int) -> JSON:
        return None

    def _make_null(self, schema: Mapping[str, Any], depth: int) -> JSON:
        return None

    def _make_boolean(self, schema: Mapping[str, Any], depth: int) -> JSON:
        return self.rng.random() < 0.5

    def _make_string(self, schema: Mapping[str, Any], depth: int) -> JSON:
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _FORMATS[fmt]
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", low + 12))
        size = self.rng.randint(low, max(low, min(high, low + 12)))
        alphabet = string.ascii_letters + string.digits + " -_"
        return "".join(self.rng.choice(alphabet) for _ in range(size))

    def _make_integer(self, schema: Mapping[str, Any], depth: int) -> JSON:
        lo, hi = _whole_range(schema)
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int) and not isinstance(multiple, bool) and multiple > 0:
            first, last = -(-lo // multiple), hi // multiple
            if first <= last:
                return self.rng.randint(first, last) * multiple
        return self.rng.randint(lo, max(lo, hi))

    def _make_number(self, schema: Mapping[str, Any], depth: int) -> JSON:
        multiple = schema.get("multipleOf")
        whole_low, whole_high = _whole_range(schema)
        if whole_low <= whole_high and (isinstance(multiple, int) or self.rng.random() < 0.5):
            # Whole numbers (and whole multiples) are exact in binary, so the
            # schema's bounds and multipleOf judge them without rounding doubt.
            return self._make_integer(schema, depth)
        low, high = _fraction_range(schema)
        if isinstance(multiple, (int, float)) and multiple > 0:
            first, last = math.ceil(low / multiple), math.floor(high / multiple)
            return self.rng.randint(first, max(first, last)) * multiple
        return round(self.rng.uniform(low, max(low, high)), 3)

    def _make_array(self, schema: Mapping[str, Any], depth: int) -> JSON:
        prefix = _list(schema.get("prefixItems"))
        items = schema.get("items", {})
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + 3))
        size = max(len(prefix) if low <= len(prefix) <= high else low, 0)
        if depth < _MAX_DEPTH:
            size = self.rng.randint(size, max(size, min(high, low + 3)))
        out: list[JSON] = []
        for i in range(size):
            sub = prefix[i] if i < len(prefix) else items
            value = self.value(sub, depth + 1)
            if schema.get("uniqueItems"):
                for _ in range(10):
                    if value not in out:
                        break
                    value = self.value(sub, depth + 1)
            out.append(value)
        return out

    def _make_object(self, schema: Mapping[str, Any], depth: int) -> JSON:
        props = schema.get("properties", {})
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        out: dict[str, JSON] = {}
        for name in required:
            out[name] = self.value(props.get(name, {}), depth + 1)
        if depth < _MAX_DEPTH:
            for name, sub in props.items():
                if name not in out and self.rng.random() < 0.5:
                    out[name] = self.value(sub, depth + 1)
        extra = schema.get("additionalProperties", True)
        if isinstance(extra, Mapping) and extra and self.rng.random() < 0.3:
            key = self._fresh_key(out, props)
            out[key] = self.value(extra, depth + 1)
        return out

    def _fresh_key(self, value: Mapping[str, Any], props: Mapping[str, Any]) -> str:
        key = "extra"
        while key in value or key in props:
            key += "_"
        return key

    # -- near misses ----------------------------------------------------------------

    def mutants(self, schema: Any, value: JSON, depth: int) -> list[tuple[str, JSON]]:
        """Every one-change near miss of `value` this generator knows, as (what, value)."""
        schema = self.resolve(schema)
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return []
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            schema = self.merged(schema)
        if any(isinstance(schema.get(k), list) for k in ("anyOf", "oneOf")):
            # A swapped value may match another branch: near misses of unions are
            # left to the labels rather than promised.
            return []
        out: list[tuple[str, JSON]] = []
        if "const" in schema:
            out.append(("missed const", _other_than(schema["const"])))
            return out
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            miss = _outside(schema["enum"])
            out.append(("not in enum", miss))
            return out
        allowed = set(self.types(schema)) if "type" in schema else set()
        if allowed:
            if "number" in allowed:
                allowed.add("integer")
            for kind in _TYPES:
                if kind not in allowed:
                    out.append(
                        (
                            f"type {kind} instead of {'/'.join(sorted(allowed))}",
                            copy.deepcopy(_OTHER_TYPE_VALUES[kind]),
                        )
                    )
                    break
        if isinstance(value, bool) or value is None:
            return out
        if isinstance(value, (int, float)):
            out += self._number_misses(schema, value)
        elif isinstance(value, str):
            if "minLength" in schema and int(schema["minLength"]) > 0:
                out.append(("shorter than minLength", "x" * (int(schema["minLength"]) - 1)))
            if "maxLength" in schema:
                out.append(("longer than maxLength", "x" * (int(schema["maxLength"]) + 1)))
        elif isinstance(value, list):
            out += self._array_misses(schema, value, depth)
        elif isinstance(value, dict):
            out += self._object_misses(schema, value, depth)
        return out

    def _number_misses(self, schema: Mapping[str, Any], value: float) -> list[tuple[str, JSON]]:
        out: list[tuple[str, JSON]] = []
        whole = isinstance(value, int)
        step: int | float = 1 if whole else 0.5
        if "minimum" in schema:
            out.append(("below minimum", _num(schema["minimum"], -step)))
        if "maximum" in schema:
            out.append(("above maximum", _num(schema["maximum"], step)))
        if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
            out.append(("at exclusiveMinimum", schema["exclusiveMinimum"]))
        if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
            out.append(("at exclusiveMaximum", schema["exclusiveMaximum"]))
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int) and multiple > 1 and isinstance(value, int):
            out.append(("not a multipleOf", value + 1))
        if schema.get("type") == "integer" and whole and abs(value) < 2**52:
            # Past 2**52 a float has no halves: the "fraction" would be a whole number.
            out.append(("fraction for an integer", value + 0.5))
        return out

    def _array_misses(
        self, schema: Mapping[str, Any], value: list[JSON], depth: int
    ) -> list[tuple[str, JSON]]:
        out: list[tuple[str, JSON]] = []
        low = int(schema.get("minItems", 0))
        if low > 0:
            out.append(("fewer than minItems", copy.deepcopy(value[: low - 1])))
        if "maxItems" in schema:
            high = int(schema["maxItems"])
            filler = (
                copy.deepcopy(value[0]) if value else self.value(schema.get("items", {}), depth + 1)
            )
            longer = copy.deepcopy(value) + [
                copy.deepcopy(filler) for _ in range(high + 1 - len(value))
            ]
            out.append(("more than maxItems", longer))
        if (
            schema.get("uniqueItems")
            and value
            and len(value) + 1 <= int(schema.get("maxItems", 10**9))
        ):
            out.append(("a duplicate item", [*copy.deepcopy(value), copy.deepcopy(value[0])]))
        prefix = _list(schema.get("prefixItems"))
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items", {})
            for what, miss in self.mutants(sub, item, depth + 1):
                changed = copy.deepcopy(value)
                changed[i] = miss
                out.append((f"[{i}]: {what}", changed))
        return out

    def _object_misses(
        self, schema: Mapping[str, Any], value: dict[str, JSON], depth: int
    ) -> list[tuple[str, JSON]]:
        out: list[tuple[str, JSON]] = []
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name in value:
                dropped = {k: copy.deepcopy(v) for k, v in value.items() if k != name}
                out.append((f"required {name!r} missing", dropped))
        if schema.get("additionalProperties") is False:
            key = self._fresh_key(value, props)
            out.append((f"unknown property {key!r}", {**copy.deepcopy(value), key: 1}))
        for name, item in value.items():
            if name not in props:
                continue
            for what, miss in self.mutants(props[name], item, depth + 1):
                changed = copy.deepcopy(value)
                changed[name] = miss
                out.append((f"{name}: {what}", changed))
        return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_SPAN = 1000  # how far a range open on one side (or on both) reaches


def _given(schema: Mapping[str, Any], key: str) -> int | float | None:
    """A numeric bound of the schema; None when absent (or not a number)."""
    bound = schema.get(key)
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        return None
    return bound


def _whole_range(schema: Mapping[str, Any]) -> tuple[int, int]:
    """The whole numbers the schema's bounds allow, in exact integer arithmetic: a bound
    past 2**53 (an id, an amount in micros) or past a float's range stays exact."""
    lows: list[int | float] = []
    highs: list[int | float] = []
    if (bound := _given(schema, "minimum")) is not None:
        lows.append(_ceil(bound))
    if (bound := _given(schema, "exclusiveMinimum")) is not None:
        lows.append(_floor(bound) + 1)
    if (bound := _given(schema, "maximum")) is not None:
        highs.append(_floor(bound))
    if (bound := _given(schema, "exclusiveMaximum")) is not None:
        highs.append(_ceil(bound) - 1)
    low, high = _close(lows, highs)
    return int(low), int(high)


def _fraction_range(schema: Mapping[str, Any]) -> tuple[float, float]:
    """The range a fractional number is drawn from (a bound past a float's range is held
    at the largest float)."""
    lows: list[int | float] = []
    highs: list[int | float] = []
    if (bound := _given(schema, "minimum")) is not None:
        lows.append(_as_float(bound))
    if (bound := _given(schema, "exclusiveMinimum")) is not None:
        lows.append(_as_float(bound) + 0.001)
    if (bound := _given(schema, "maximum")) is not None:
        highs.append(_as_float(bound))
    if (bound := _given(schema, "exclusiveMaximum")) is not None:
        highs.append(_as_float(bound) - 0.001)
    low, high = _close(lows, highs)
    return float(low), float(high)


def _close(lows: list[int | float], highs: list[int | float]) -> tuple[int | float, int | float]:
    """The tightest (low, high); a side left open reaches `_SPAN` past the other."""
    if not lows and not highs:
        return -_SPAN, _SPAN
    low = max(lows) if lows else min(highs) - _SPAN
    high = min(highs) if highs else low + _SPAN
    return low, high


def _floor(bound: int | float) -> int:
    return bound if isinstance(bound, int) else math.floor(bound)


def _ceil(bound: int | float) -> int:
    return bound if isinstance(bound, int) else math.ceil(bound)


def _as_float(bound: int | float) -> float:
    try:
        return float(bound)
    except OverflowError:
        return math.copysign(sys.float_info.max, bound)


def _num(bound: Any, delta: float) -> JSON:
    if isinstance(bound, int) and not isinstance(bound, bool) and float(delta).is_integer():
        return bound + int(delta)
    return float(bound) + delta


def _other_than(value: JSON) -> JSON:
    return "not-" + value if isinstance(value, str) else ["not", value]


def _outside(options: list[JSON]) -> JSON:
    candidate: JSON = "not-in-enum"
    while candidate in options:
        candidate = str(candidate) + "_"
    return candidate
