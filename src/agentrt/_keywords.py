"""The JSON Schema keywords whose jsonschema cost a model's argument could blow up.

The argument check runs on the event loop, before the tool and before any
timeout; the schema is the developer's, the argument the model's. This module
owns the keyword functions that replace jsonschema's where its cost grows
faster than the argument:

- `anyOf` and `oneOf`: jsonschema collects every error of every failing branch,
  descending the whole argument under each, so a recursive union (an expression
  tree, pydantic's `anyOf` of `$ref`s) doubles in cost with each level of nesting.
  Here a branch is only asked whether it holds, which stops at its first error,
  and within one check each (branch, value) pair is judged once (`judged`; a
  branch that is only a `$ref` is known by the reference), so the cost is
  bounded by the schema's size times the argument's. The messages
  are jsonschema's; the errors of the failing branches (jsonschema's `context`,
  which the check never reports) are not collected.
- `uniqueItems`: jsonschema compares every pair of items it cannot sort (objects,
  say); here each item's hashable key, equal exactly when JSON Schema calls two
  values equal (`1` and `1.0` equal, `true` and `1` not), is put in a set.

A judgement is remembered only within one check and only for schemas without
`$dynamicRef` or `$recursiveRef`, whose meaning depends on the path that reached
them; the references a registered schema may hold (decision 0004) resolve the
same wherever they stand.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

__all__ = ["any_of", "judged", "one_of", "unique_items"]

_Judged = dict[tuple[Any, Any, int], tuple[Any, Any, bool]]
_judged: contextvars.ContextVar[_Judged | None] = contextvars.ContextVar(
    "agentrt_keyword_judgements", default=None
)


@contextlib.contextmanager
def judged() -> Iterator[None]:
    """Within the block, each (branch, value) pair of `anyOf`/`oneOf` is judged once."""
    token = _judged.set({})
    try:
        yield
    finally:
        _judged.reset(token)


def _holds(validator: Any, instance: Any, subschema: Any, index: int) -> bool:
    """Whether `instance` is valid under the branch `subschema`: stops at its first error."""
    memo = _judged.get()
    if memo is None:
        return next(validator.descend(instance, subschema, schema_path=index), None) is None
    # A branch that is only a reference (pydantic's `{"$ref": "#/$defs/Model"}`, one dict
    # per place it is written) is known by what it names; any other by its identity.
    ref = subschema.get("$ref") if type(subschema) is dict and len(subschema) == 1 else None
    known: Any = ref if type(ref) is str else id(subschema)
    key = (type(validator), known, id(instance))
    # The objects are kept with the answer, so their ids cannot be reused meanwhile.
    hit = memo.get(key)
    if hit is not None and hit[1] is instance:
        return hit[2]
    holds = next(validator.descend(instance, subschema, schema_path=index), None) is None
    memo[key] = (subschema, instance, holds)
    return holds


def _invalid(message: str) -> Any:
    # Reached only from inside a jsonschema validator, so jsonschema is loaded.
    import jsonschema.exceptions

    return jsonschema.exceptions.ValidationError(message)


def any_of(validator: Any, any_of: Any, instance: Any, schema: Any) -> Iterator[Any]:
    for index, subschema in enumerate(any_of):
        if _holds(validator, instance, subschema, index):
            return
    yield _invalid(f"{instance!r} is not valid under any of the given schemas")


def one_of(validator: Any, one_of: Any, instance: Any, schema: Any) -> Iterator[Any]:
    valid = [s for index, s in enumerate(one_of) if _holds(validator, instance, s, index)]
    if not valid:
        yield _invalid(f"{instance!r} is not valid under any of the given schemas")
    elif len(valid) > 1:
        # jsonschema's order: the later valid branches, then the first.
        reprs = ", ".join(repr(each) for each in [*valid[1:], valid[0]])
        yield _invalid(f"{instance!r} is valid under each of {reprs}")


def _key(value: Any) -> Any:
    """A hashable key of a plain JSON value: equal keys for values JSON Schema calls equal."""
    if value is None or isinstance(value, bool | str):
        return (type(value), value)
    if isinstance(value, int | float):
        return (float, value)  # 1 == 1.0, and their hashes agree
    if isinstance(value, dict):
        return (dict, frozenset((key, _key(item)) for key, item in value.items()))
    if isinstance(value, list):
        return (list, tuple(_key(item) for item in value))
    return (object, id(value))  # never in a plain copy of the arguments


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _key(item)
        if key in seen:
            yield _invalid(f"{instance!r} has non-unique elements")
            return
        seen.add(key)
