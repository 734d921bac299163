"""Text read from objects the runtime does not own.

Agents, tools, policies and models are consumer code: their values and exceptions
may override `__str__`, `__repr__` or `__name__` to raise, lie or run forever. This
module owns turning them into text for the record, and its invariants are that
nothing here raises (whatever the object does), every text is bounded, and every
text can be stored as UTF-8 (lone surrogates are escaped).
"""

from __future__ import annotations

from typing import Any

MAX_DESCRIBED = 4096
"""Characters kept of an exception's description."""


def type_name(value: Any) -> str:
    """The name of `value`'s class, read past any metaclass that overrides `__name__`."""
    try:
        name = type.__dict__["__name__"].__get__(type(value), type)
    except BaseException:  # a hostile class: its name cannot be read
        return "object"
    return name if isinstance(name, str) else "object"


def plain_text(text: object, limit: int) -> str:
    """At most `limit` characters of `text` as a plain `str` storable as UTF-8 ("" if not text)."""
    if not isinstance(text, str):
        return ""
    # str's own slicing: a subclass's overrides never run, and the copy is bounded.
    clipped = str.__getitem__(text, slice(0, limit))
    return clipped.encode("utf-8", "backslashreplace").decode("utf-8")


def exception_text(exc: BaseException, *, named: bool = True, limit: int = MAX_DESCRIBED) -> str:
    """`Type: message` (or the message alone) for an exception raised by consumer code.

    A `__str__` that raises (anything, `SystemExit` included) leaves the type and a
    note saying the message could not be read.
    """
    try:
        message = plain_text(str(exc), limit)
    except BaseException as inner:
        message = f"<its message could not be read: {type_name(inner)}>"
    if not named:
        return message
    name = type_name(exc)
    return f"{name}: {message}"[:limit] if message else name
