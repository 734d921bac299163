"""Canonical JSON and usable JSON: the one encoding agentrt hashes and stores.

This module owns what counts as usable JSON (`parse_json`, `check_json`), the
canonical bytes every hash is taken over (`canonical_json`, `content_hash`), the
form policies receive and the database stores (`policy_json`, `to_text`,
`from_text`), and the number types that keep a literal as it was written
(`JSONFloat`, `JSONInt`), so that `10`, `10.0` and `1e1` never collapse.

Bytes-like input (`bytes`, `bytearray`, `memoryview`) is always JSON *text*;
a `str` given to the value functions is a JSON *string value* (see
docs/decisions/0003-json-numbers-and-canonical-form.md). Only `parse_json` and
`from_text` read a `str` as text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sys
import threading

# The C accelerator's functions, the ones json.loads and json.dumps use, so the
# slow paths below unescape and escape strings exactly like the fast ones (CPython).
from _json import encode_basestring as _encode_basestring
from _json import scanstring as _scanstring
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any, NoReturn

from ._errors import JSONValueError

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_NUMBER_CHARS",
    "MAX_STORED_DEPTH",
    "JSONFloat",
    "JSONInt",
    "canonical_json",
    "check_json",
    "content_hash",
    "copy_json",
    "deeper_than",
    "from_text",
    "json_problem",
    "parse_json",
    "policy_json",
    "to_text",
]

MAX_DEPTH = 256
"""Most containers nested inside one another in usable JSON: `[]` is 1, a scalar 0."""

MAX_STORED_DEPTH = MAX_DEPTH + 16
"""The nesting the encoders and `from_text` accept: usable JSON inside agentrt's own
envelopes (event payloads, the approval hash's request, a policy's view), which
add a few levels above the value they carry."""

MAX_NUMBER_CHARS = 10_000
"""Longest number literal, sign and exponent included."""

MAX_EXPONENT = 10_000
"""Largest absolute exponent written in a number literal (`1e10000` is usable)."""

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\ud800-\udfff]")
# A `\u` escape of a surrogate: only then can json.loads produce a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# Exact for well-formed JSON; on malformed text it only decides which parser runs. A string
# that never ends runs to the end of the text: a match begun at a quote never fails, so no
# quote after it (each `\"` in it) is tried again as a start, which took time quadratic in
# the text (decision 0238, amended).
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# An int needs at least this many bits before it can have 10,000 digits.
_HUGE_INT_BITS = 33_000
# The lowest int/str conversion limit Python allows: ints of at most this many
# digits convert both ways whatever the interpreter is configured to.
_SAFE_DIGITS = 640


# --------------------------------------------------------------------------- numbers


class JSONFloat(float):
    """A number literal with a fraction or an exponent, kept as written.

    It is a `float` (the nearest double; `1e400` overflows to `inf`) so ordinary
    code, jsonschema and pydantic compute and compare with it as a number; it
    re-encodes as `literal`, which is also its `str` and `repr`. Parsing returns a
    plain `float` instead when the float's `repr` is the literal (`0.1`, `10.0`),
    since a plain float encodes as its `repr`.
    """

    __slots__ = ("_literal",)
    _literal: str

    def __new__(cls, literal: str) -> JSONFloat:
        if not isinstance(literal, str):
            raise TypeError(f"JSONFloat takes the literal as a str, not {type(literal).__name__}")
        match = _NUMBER.fullmatch(literal)
        if match is None or (match[1] is None and match[2] is None):
            raise JSONValueError(
                f"{_show(literal)} is not a JSON number literal with a fraction or exponent"
            )
        _check_literal_limits(literal)
        self = super().__new__(cls, literal)
        self._literal = literal
        return self

    @property
    def literal(self) -> str:
        """The number exactly as it is written in JSON text."""
        return self._literal

    def __repr__(self) -> str:
        return self._literal

    __str__ = __repr__

    def __reduce__(self) -> tuple[type[JSONFloat], tuple[str]]:
        return (JSONFloat, (self._literal,))

    def __copy__(self) -> JSONFloat:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> JSONFloat:
        return self


class JSONInt(int):
    """An integer literal a plain `int` would not keep: `-0`, or one over 640 digits.

    It is an `int` (value 0 for `-0`) and re-encodes as `literal`, which is also
    its `str` and `repr`, so printing it (jsonschema does, in its error messages)
    never hits the interpreter's int/str digit limit (4,300 by default).
    """

    _literal: str

    def __new__(cls, literal: str) -> JSONInt:
        if not isinstance(literal, str):
            raise TypeError(f"JSONInt takes the literal as a str, not {type(literal).__name__}")
        match = _NUMBER.fullmatch(literal)
        if match is None or match[1] is not None or match[2] is not None:
            raise JSONValueError(f"{_show(literal)} is not a JSON integer literal")
        _check_literal_limits(literal)
        self = super().__new__(cls, _decimal_to_int(literal))
        self._literal = literal
        return self

    @property
    def literal(self) -> str:
        """The number exactly as it is written in JSON text."""
        return self._literal

    def __repr__(self) -> str:
        return self._literal

    __str__ = __repr__

    def __reduce__(self) -> tuple[type[JSONInt], tuple[str]]:
        return (JSONInt, (self._literal,))

    def __copy__(self) -> JSONInt:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> JSONInt:
        return self


def _decimal_to_int(literal: str) -> int:
    """int(literal), also beyond the interpreter's int/str digit limit (left untouched)."""
    try:
        return int(literal)
    except ValueError:
        pass
    digits = literal.lstrip("-")
    value = 0
    for start in range(0, len(digits), _SAFE_DIGITS):
        chunk = digits[start : start + _SAFE_DIGITS]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if literal.startswith("-") else value


def _int_to_decimal(value: int) -> str:
    """str(value), also beyond the interpreter's int/str digit limit (left untouched)."""
    try:
        return int.__repr__(value)
    except ValueError:
        pass
    magnitude = -value if value < 0 else value
    base: int = 10**_SAFE_DIGITS
    chunks: list[str] = []
    while magnitude >= base:
        magnitude, low = divmod(magnitude, base)
        chunks.append(str(low).zfill(_SAFE_DIGITS))
    chunks.append(str(magnitude))
    chunks.reverse()
    return ("-" if value < 0 else "") + "".join(chunks)


def _check_number_limits(literal: str) -> None:
    """Refuse a literal over MAX_NUMBER_CHARS or with an exponent beyond ±MAX_EXPONENT."""
    if len(literal) > MAX_NUMBER_CHARS:
        raise _Refusal(
            f"number literal of {len(literal)} characters (the limit is {MAX_NUMBER_CHARS})"
        )
    cut = max(literal.find("e"), literal.find("E"))
    if cut >= 0:
        digits = literal[cut + 1 :].lstrip("+-").lstrip("0")
        # Compare lengths first: int() of a long digit string could hit the str limit.
        if len(digits) > len(str(MAX_EXPONENT)) or int(digits or "0") > MAX_EXPONENT:
            raise _Refusal(
                f"number literal {_show(literal)} has an exponent beyond ±{MAX_EXPONENT}"
            )


def _check_literal_limits(literal: str) -> None:
    """`_check_number_limits` for the public constructors, which raise JSONValueError."""
    try:
        _check_number_limits(literal)
    except _Refusal as exc:
        raise JSONValueError(exc.reason) from None


def _decimal_digits_exceed(value: int) -> bool:
    """True when the literal for `value` would be longer than MAX_NUMBER_CHARS."""
    if value.bit_length() < _HUGE_INT_BITS:
        return False
    # A negative literal spends one character on its sign.
    limit = _TEN_TO_MAX_CHARS if value >= 0 else _TEN_TO_MAX_CHARS_MINUS_ONE
    return abs(value) >= limit


_TEN_TO_MAX_CHARS: int = 10**MAX_NUMBER_CHARS
_TEN_TO_MAX_CHARS_MINUS_ONE: int = 10 ** (MAX_NUMBER_CHARS - 1)


# --------------------------------------------------------------------------- errors


class _Refusal(Exception):
    """Internal: why a value is unusable, and the path to it, built while unwinding."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reversed_path: list[str | int] = []

    def error(self) -> JSONValueError:
        path = _render_path(list(reversed(self.reversed_path)))
        return JSONValueError(f"{self.reason} at {path}")


def _show(text: str, limit: int = 40) -> str:
    """A short quoted form of `text` for messages."""
    return json.dumps(text if len(text) <= limit else text[:limit] + "…")


def _render_path(path: list[str | int]) -> str:
    parts = ["$"]
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.fullmatch(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{_show(step)}]")
    rendered = "".join(parts)
    if len(rendered) > 160:
        # A path 257 levels deep says nothing more than its ends do.
        rendered = rendered[:80] + "…" + rendered[-60:]
    return rendered


def _position(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return f" (line {line}, column {column})"


# --------------------------------------------------------------------------- parsing


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse exactly one usable JSON value, keeping every number literal as written.

    Integers are `int`, exact at any size (a `JSONInt` for `-0` and beyond 640
    digits); other numbers are `float`, or a `JSONFloat` when `repr` would not
    give the literal back. Raises `JSONValueError` saying what is wrong and where.
    """
    return _parse(data, MAX_DEPTH)  # a deep caller: `_parse` falls back on `_parse_slow`


def from_text(text: str) -> Any:
    """Parse text agentrt stored in a database column (see `to_text`).

    Like `parse_json`, but nesting up to `MAX_STORED_DEPTH`, as the writers allow.
    """
    return _parse(text, MAX_STORED_DEPTH)  # a deep caller: `_parse` falls back on `_parse_slow`


def _on_a_fresh_stack(work: Callable[..., Any], *args: Any) -> Any:
    """`work(*args)` again on a thread of its own, for a caller whose stack was too deep.

    Every walker here recurses once per level of nesting (at most `MAX_STORED_DEPTH`):
    a usable value must not be refused, or raise RecursionError, because the caller was
    already deep in frames of its own. Only such a call takes this path. A RecursionError
    on the fresh stack too (a value whose own methods recurse without end) is raised as
    it was; any other exception is the call's own.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work(*args)))
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.append((False, exc))

    helper = threading.Thread(target=run, name="agentrt-json-deep-caller", daemon=True)
    helper.start()
    helper.join()
    done, value = outcome[0]
    if done:
        return value
    raise value


def _parse(data: bytes | bytearray | memoryview | str, limit: int) -> Any:
    if isinstance(data, str):
        text = data
        if not text.isascii() and _SURROGATE.search(text) is not None:
            # A raw lone surrogate cannot be UTF-8; the slow parser says where it is.
            return _parse_slow(text, limit)
    elif isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONValueError(f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None
    else:
        raise TypeError(f"parse_json takes bytes or str JSON text, not {type(data).__name__}")
    if deeper_than(text, limit):
        return _parse_slow(text, limit)
    try:
        value = _decoder.decode(text)
    except RecursionError:
        # The caller's own stack was already deep; the slow parser does not recurse.
        return _parse_slow(text, limit)
    except (json.JSONDecodeError, _Refusal) as exc:
        # The slow parser refuses the same texts and says where; it should not return.
        _parse_slow(text, limit)
        reason = exc.reason if isinstance(exc, _Refusal) else str(exc)
        raise JSONValueError(reason) from None
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None and _has_surrogate(value):
        return _parse_slow(text, limit)
    return value


def deeper_than(text: str, limit: int) -> bool:
    """True when JSON text nests containers more than `limit` deep, found without recursion
    (and on any interpreter alike, whatever its own parser's stack allows). Text that is not
    well-formed JSON may be counted deeper than a parser would find it: it is no JSON value
    of `limit` levels either way."""
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(_BRACKET_STEP[c] for c in brackets), default=0) > limit


_NEGATIVE_ZERO = JSONInt("-0")


def _parse_int(literal: str) -> int:
    # 18 characters can neither break a limit nor be -0's only spelling.
    if len(literal) < 19 and literal != "-0":
        return int(literal)
    _check_number_limits(literal)
    if literal == "-0":
        return _NEGATIVE_ZERO
    if len(literal) - literal.startswith("-") <= _SAFE_DIGITS:
        return int(literal)
    number = int.__new__(JSONInt, _decimal_to_int(literal))
    number._literal = literal
    return number


def _parse_float(literal: str) -> float:
    value = float(literal)
    # A float's repr is short and has a small exponent, so it is within the limits.
    if float.__repr__(value) == literal:
        return value
    _check_number_limits(literal)
    number = float.__new__(JSONFloat, value)
    number._literal = literal
    return number


def _parse_constant(name: str) -> NoReturn:
    raise _Refusal(f"{name} is not a JSON value")


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refusal(f"repeated key {_show(key)}")
            seen.add(key)
    return obj


# One decoder for every parse: building one costs more than a small parse. It
# is safe to share between threads, like the json module's own default decoder.
_decoder = json.JSONDecoder(
    parse_float=_parse_float,
    parse_int=_parse_int,
    parse_constant=_parse_constant,
    object_pairs_hook=_object_from_pairs,
)


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_SURROGATE.search(k) is not None or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _skip(text: str, pos: int) -> int:
    """The position after any JSON whitespace at pos."""
    match = _WHITESPACE.match(text, pos)
    return pos if match is None else match.end()


def _string_problem(exc: json.JSONDecodeError, text: str) -> str:
    """json's complaint about a string, reworded to stand before a path."""
    if exc.msg.startswith("Invalid control character"):
        return f"unescaped control character U+{ord(text[exc.pos]):04X} in a string"
    if exc.msg.startswith("Unterminated string"):
        return "unterminated string"
    if exc.msg.startswith("Invalid \\uXXXX"):
        return f"invalid escape {_show(text[exc.pos - 1 : exc.pos + 5])} in a string"
    if exc.msg.startswith("Invalid \\escape"):
        return f"invalid escape {_show(text[exc.pos : exc.pos + 2])} in a string"
    return exc.msg[0].lower() + exc.msg[1:]


def _parse_slow(text: str, limit: int) -> Any:
    """The exact, iterative parser: decides every text the fast path cannot, with paths.

    Strings go through the same C `scanstring` json.loads uses and numbers through
    the same hooks, so the two parsers accept and refuse the same texts.
    """
    # Each frame: [container, key being filled (objects) or None (arrays)].
    stack: list[list[Any]] = []
    end = len(text)

    def fail(reason: str, pos: int, *, inside: bool = True) -> NoReturn:
        path: list[str | int] = []
        for container, key in stack:
            if isinstance(container, dict):
                path.append(key)
            else:
                path.append(len(container))
        if not inside and path:
            path.pop()
        raise JSONValueError(f"{reason} at {_render_path(path)}{_position(text, pos)}")

    def read_key(pos: int) -> int:
        """Read `"key" :` at pos into the top frame; return where its value starts."""
        obj = stack[-1][0]
        if pos >= end or text[pos] != '"':
            fail("expecting a property name in double quotes", pos, inside=False)
        try:
            key, pos = _scanstring(text, pos + 1, True)
        except json.JSONDecodeError as exc:
            fail(_string_problem(exc, text), exc.pos, inside=False)
        surrogate = _SURROGATE.search(key)
        if surrogate is not None:
            fail(f"lone surrogate U+{ord(surrogate[0]):04X} in key {_show(key)}", pos, inside=False)
        if key in obj:
            fail(f"repeated key {_show(key)}", pos, inside=False)
        stack[-1][1] = key
        pos = _skip(text, pos)
        if pos >= end or text[pos] != ":":
            fail("expecting ':' after a property name", pos)
        return _skip(text, pos + 1)

    pos = _skip(text, 0)
    while True:
        # Read one value starting at pos (opening a container pushes a frame).
        char = text[pos] if pos < end else ""
        value: Any
        if char in ("{", "["):
            if len(stack) >= limit:
                fail(f"nesting deeper than {limit}", pos)
            closing = "}" if char == "{" else "]"
            after = _skip(text, pos + 1)
            if after < end and text[after] == closing:
                value, pos = ({} if char == "{" else []), after + 1
            else:
                stack.append([{} if char == "{" else [], None])
                pos = read_key(after) if char == "{" else after
                continue
        elif char == '"':
            try:
                value, after = _scanstring(text, pos + 1, True)
            except json.JSONDecodeError as exc:
                fail(_string_problem(exc, text), exc.pos)
            surrogate = _SURROGATE.search(value)
            if surrogate is not None:
                fail(f"lone surrogate U+{ord(surrogate[0]):04X} in a string", pos)
            pos = after
        elif char == "-" or "0" <= char <= "9":
            if text.startswith("-Infinity", pos):
                fail("-Infinity is not a JSON value", pos)
            number = _NUMBER.match(text, pos)
            if number is None:
                fail("expecting a digit", pos + 1)
            literal = number[0]
            try:
                is_float = number[1] is not None or number[2] is not None
                value = _parse_float(literal) if is_float else _parse_int(literal)
            except _Refusal as exc:
                fail(exc.reason, pos)
            pos = number.end()
        elif text.startswith("true", pos):
            value, pos = True, pos + 4
        elif text.startswith("false", pos):
            value, pos = False, pos + 5
        elif text.startswith("null", pos):
            value, pos = None, pos + 4
        elif text.startswith("NaN", pos) or text.startswith("Infinity", pos):
            fail(("NaN" if char == "N" else "Infinity") + " is not a JSON value", pos)
        elif char == "\ufeff":
            fail("a byte order mark is not part of JSON text", pos)
        elif char == "":
            fail("expecting a value, found the end of the text", pos)
        else:
            fail(f"expecting a value, found {_show(char)}", pos)

        # Hand the value to its container; close every container that ends here.
        while True:
            pos = _skip(text, pos)
            if not stack:
                if pos != end:
                    fail("extra data after the JSON value", pos)
                return value
            container = stack[-1][0]
            char = text[pos] if pos < end else ""
            if isinstance(container, dict):
                container[stack[-1][1]] = value
                if char == ",":
                    after = _skip(text, pos + 1)
                    pos = read_key(after)
                    break
                if char != "}":
                    fail("expecting ',' or '}' after an object member", pos, inside=False)
            else:
                container.append(value)
                if char == ",":
                    pos = _skip(text, pos + 1)
                    break
                if char != "]":
                    fail("expecting ',' or ']' after an array element", pos, inside=False)
            stack.pop()
            value, pos = container, pos + 1


# --------------------------------------------------------------------------- checking


def check_json(value: Any) -> None:
    """Raise `JSONValueError` unless `value` is usable JSON.

    Bytes-like values are JSON text and get every `parse_json` check. Anything
    else is a Python value: dict (str keys), list or tuple, str, int, float, bool,
    None (and their subclasses), with no lone surrogate in any string, no
    non-finite float (a `JSONFloat` such as `1e400` keeps its literal and is
    fine), no int longer than 10,000 characters, and nesting at most 256 deep.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        parse_json(value)
        return
    try:
        _check(value, 0, MAX_DEPTH)
    except _Refusal as exc:
        raise exc.error() from None
    except RecursionError:
        _on_a_fresh_stack(check_json, value)


def json_problem(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """Where and why a Python value is not usable JSON, or None when it is.

    The rule of `check_json` (the only one: `tools` checks arguments and schemas
    with it too), answered as data: the path from the root (keys and indexes)
    to the first unusable part, and the reason. Methods a str subclass overrides
    may still run and raise; the caller decides what that means.
    """
    try:
        _check(value, 0, MAX_DEPTH)
    except _Refusal as exc:
        return tuple(reversed(exc.reversed_path)), exc.reason
    except RecursionError:
        answer: tuple[tuple[str | int, ...], str] | None = _on_a_fresh_stack(json_problem, value)
        return answer
    return None


def _check(value: Any, depth: int, limit: int) -> None:
    """Raise `_Refusal` unless the Python value is usable JSON.

    Leaves of the common types are checked inline to spare a call per leaf.
    """
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_text(value)
    elif kind is int:
        _check_int(value)
    elif kind is float:
        if not math.isfinite(value):
            raise _Refusal(f"{value!r} is not a JSON number")
    elif value is None or kind is bool:
        pass
    elif isinstance(value, dict):
        if depth >= limit:
            raise _Refusal(f"nesting deeper than {limit}")
        plain_keys = True
        for key, item in dict.items(value):
            if type(key) is not str:
                if not isinstance(key, str):
                    raise _Refusal(f"an object key must be a str, not {type(key).__name__}")
                plain_keys = False
            if not key.isascii():
                surrogate = _SURROGATE.search(key)
                if surrogate is not None:
                    raise _Refusal(f"lone surrogate U+{ord(surrogate[0]):04X} in key {_show(key)}")
            kind = type(item)
            if kind is str:
                if item.isascii():
                    continue
            elif kind is int:
                if -(2**63) <= item < 2**63:
                    continue
            elif kind is float:
                if math.isfinite(item):
                    continue
            elif kind is bool or item is None:
                continue
            try:
                _check(item, depth + 1, limit)
            except _Refusal as exc:
                exc.reversed_path.append(str.__str__(key))
                raise
        # Two str-subclass keys can be distinct dict keys yet the same JSON string.
        if not plain_keys and len({str.__str__(key) for key in dict.keys(value)}) != len(
            dict.keys(value)
        ):
            raise _Refusal("two keys of this object are the same string")
    elif isinstance(value, list | tuple):
        if depth >= limit:
            raise _Refusal(f"nesting deeper than {limit}")
        for index, item in enumerate(_members(value)):
            kind = type(item)
            if kind is str:
                if item.isascii():
                    continue
            elif kind is int:
                if -(2**63) <= item < 2**63:
                    continue
            elif kind is float:
                if math.isfinite(item):
                    continue
            elif kind is bool or item is None:
                continue
            try:
                _check(item, depth + 1, limit)
            except _Refusal as exc:
                exc.reversed_path.append(index)
                raise
    elif isinstance(value, str):
        _check_text(value)
    elif isinstance(value, JSONFloat | JSONInt):
        pass  # their constructors checked the literal
    elif isinstance(value, int):
        _check_int(int.__int__(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Refusal(f"{float(value)!r} is not a JSON number")
    else:
        raise _Refusal(f"{type(value).__module__}.{type(value).__qualname__} is not a JSON value")


def _check_text(text: str) -> None:
    surrogate = _SURROGATE.search(text)
    if surrogate is not None:
        raise _Refusal(f"lone surrogate U+{ord(surrogate[0]):04X} in a string")


def _check_int(value: int) -> None:
    if _decimal_digits_exceed(value):
        raise _Refusal(f"integer of more than {MAX_NUMBER_CHARS} characters")


# --------------------------------------------------------------------------- encoding


def canonical_json(value_or_bytes: Any) -> bytes:
    """The canonical UTF-8 encoding of a usable JSON value: the bytes agentrt hashes.

    Keys sorted by code point, no whitespace, numbers as their literal (plain
    floats as `repr`), strings escaped minimally: `\\"` `\\\\`, `\\b \\f \\n \\r \\t`,
    `\\u00XX` for other controls, and `<` `>` `&` U+2028 U+2029 as `\\uXXXX`.
    Bytes-like input is JSON text and is parsed first. Raises `JSONValueError` for
    anything `check_json` refuses, except that nesting may go to `MAX_STORED_DEPTH`
    so agentrt's envelopes around a usable value still encode.
    """
    return _encode(value_or_bytes, html=True)


def policy_json(value_or_bytes: Any) -> bytes:
    """`canonical_json` without the HTML escapes (`<` `>` `&` raw): what policies see."""
    return _encode(value_or_bytes, html=False)


def content_hash(value_or_bytes: Any) -> str:
    """Lowercase hex SHA-256 of `canonical_json(value_or_bytes)`."""
    return hashlib.sha256(_roomy_text(value_or_bytes, True).encode("utf-8")).hexdigest()


def to_text(value: Any) -> str:
    """The text agentrt stores in a database column: `policy_json` as a str."""
    return _roomy_text(value, False)


def _encode(value: Any, *, html: bool) -> bytes:
    return _roomy_text(value, html).encode("utf-8")


def _roomy_text(value: Any, html: bool) -> str:
    """`_text`, the same from a caller whose own frames leave too little stack for it."""
    try:
        if isinstance(value, _BYTES_LIKE):
            return _text(value, html=html)
        # `_text` for a value, its fast path tried here first: a step makes about a dozen
        # encodings, most of them of small values, where each frame saved shows.
        fast = _text_fast(value, html=html)
        return _text_slow(value, html) if fast is None else fast
    except RecursionError:
        text: str = _on_a_fresh_stack(functools.partial(_text, html=html), value)
        return text


_BYTES_LIKE = (bytes, bytearray, memoryview)


def _text(value: Any, *, html: bool) -> str:
    """The canonical text (`html`) or the policy text of `value`, as a str that encodes
    to UTF-8 (`_encode`'s bytes decoded: the encoding is made only where it may fail)."""
    if isinstance(value, _BYTES_LIKE):
        value = _parse(value, MAX_STORED_DEPTH)
    text = _text_fast(value, html=html)
    return _text_slow(value, html) if text is None else text


def _text_slow(value: Any, html: bool) -> str:
    """`_text` of a value (not bytes) the fast path did not take: checked, then written by
    `_write`."""
    try:
        _check(value, 0, MAX_STORED_DEPTH)
    except _Refusal as exc:
        raise exc.error() from None
    text = _finish(_encode_slow(value), html=html)
    text.encode("utf-8")  # raises as the bytes were made before
    return text


_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
    sort_keys=True,
    separators=(",", ":"),
)


def _c_encoder() -> Callable[[Any, int], Iterable[str]] | None:
    """`_ENCODER`'s C encoder, made once: `encoder(value, 0)` gives the parts of
    `_ENCODER.encode(value)`.

    `JSONEncoder.encode` makes a new C encoder (and a closure) per call; with no
    circularity markers the C encoder keeps no state between calls, so one made
    here with the same settings writes the same text. None where the C encoder
    is not there (the plain `encode` is then used).
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    basestring = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return None
    settings = _ENCODER
    encoder: Callable[[Any, int], Iterable[str]] = make(
        None,
        settings.default,
        basestring,
        None,
        settings.key_separator,
        settings.item_separator,
        True,
        settings.skipkeys,
        False,
    )
    return encoder


_C_ENCODER = _c_encoder()


def _dumps(value: Any) -> str:
    """`_ENCODER.encode(value)`, by the C encoder made once where there is one."""
    encoder = _C_ENCODER
    return _ENCODER.encode(value) if encoder is None else "".join(encoder(value, 0))


_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})

_INT_DIGITS_CHECKED_EXACTLY = 4_300
"""Up to this limit (the interpreter's default) `str(int)` refuses every int of more
digits. Above it, CPython 3.12 and later check ints of more than ~9,000 digits against
a coarser bound on their size, letting some of up to ~1% more digits through (with the
limit at 9,999, `str(10**10_000)` gives 10,001 digits): a text that long may then hold
a literal over MAX_NUMBER_CHARS, so it takes the slow path, which counts exactly."""


def _text_fast(value: Any, *, html: bool) -> str | None:
    """The C encoder's text when it is provably the canonical one, else None.

    `_plain` admits only exact types the C encoder writes exactly as `_write`
    does; each remaining problem makes the C encoder or the UTF-8 encoding fail
    (non-finite float, int over the int/str limit, unknown type, lone surrogate),
    and then the caller checks the value and takes the slow path. ASCII text
    always encodes: only other text is encoded to find a lone surrogate.
    """
    limit = sys.get_int_max_str_digits()
    # Otherwise json.dumps would write an int too long to be a usable literal.
    if not 0 < limit < MAX_NUMBER_CHARS or not _plain(value, 0):
        return None
    try:
        # `_finish(_dumps(value), html=html)`, written out: the HTML escapes replace ASCII
        # with ASCII, so one look at the text says whether U+2028/9 may be in it.
        encoder = _C_ENCODER
        text = _dumps(value) if encoder is None else "".join(encoder(value, 0))
        if html and ("<" in text or ">" in text or "&" in text):
            text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        if limit > _INT_DIGITS_CHECKED_EXACTLY and len(text) > MAX_NUMBER_CHARS:
            return None  # it may hold an int the interpreter let past its limit
        if not text.isascii():
            if "\u2028" in text or "\u2029" in text:
                text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            text.encode("utf-8")
    except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
        return None
    return text


def _plain(value: Any, depth: int) -> bool:
    """True when the value is built of exact dicts (str keys), lists, tuples and leaves."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_STORED_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind in _LEAF_TYPES or (
                (kind is dict or kind is list or kind is tuple) and _plain(item, depth + 1)
            ):
                continue
            return False
        return True
    if kind is list or kind is tuple:
        if depth >= MAX_STORED_DEPTH:
            return False
        for item in value:
            kind = type(item)
            if kind in _LEAF_TYPES or (
                (kind is dict or kind is list or kind is tuple) and _plain(item, depth + 1)
            ):
                continue
            return False
        return True
    return kind in _LEAF_TYPES


def _encode_slow(value: Any) -> str:
    """The pure-Python encoding of a checked value, before `_finish`."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, JSONFloat | JSONInt):
        out.append(value.literal)
    elif isinstance(value, int):
        out.append(_int_to_decimal(int.__int__(value)))
    elif isinstance(value, float):
        out.append(float.__repr__(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        separator = "{"
        for key, item in sorted(((str.__str__(k), v) for k, v in dict.items(value)), key=_first):
            out.append(separator)
            out.append(_encode_basestring(key))
            out.append(":")
            _write(item, out)
            separator = ","
        out.append("}")
    else:
        if not value:
            out.append("[]")
            return
        separator = "["
        for item in _members(value):
            out.append(separator)
            _write(item, out)
            separator = ","
        out.append("]")


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


def _members(value: list[Any] | tuple[Any, ...]) -> Iterator[Any]:
    """A list's or tuple's items by the base type's iterator: a subclass's own `__iter__`
    is never asked (it could answer differently at each read, or never end)."""
    return list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)


def _finish(text: str, *, html: bool) -> str:
    """Add the escapes json.dumps does not make; `<>&` and U+2028/9 occur only in strings."""
    # A test for the three first (a search): `replace` counts through the whole text even
    # when there is nothing to replace (the three about 12 µs on 8 KiB, the test 0.2 µs).
    if html and ("<" in text or ">" in text or "&" in text):
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if not text.isascii() and ("\u2028" in text or "\u2029" in text):
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


# --------------------------------------------------------------------------- copying


def copy_json(value: Any) -> Any:
    """An independent copy of a JSON value: new plain dicts and lists, literals kept.

    Scalars are shared (they are immutable). Tuples become lists. It assumes the
    value is usable (see `check_json`) and only refuses, with `JSONValueError`, a
    type that is not JSON or nesting beyond `MAX_STORED_DEPTH`, where it cannot go on.
    """
    try:
        return _copy(value, 0)
    except _Refusal as exc:
        raise exc.error() from None
    except RecursionError:
        return _on_a_fresh_stack(copy_json, value)


def _copy(value: Any, depth: int) -> Any:
    if isinstance(value, dict):
        if depth >= MAX_STORED_DEPTH:
            raise _Refusal(f"nesting deeper than {MAX_STORED_DEPTH}")
        copied: dict[str, Any] = {}
        for key, item in dict.items(value):
            if type(key) is not str and isinstance(key, str):
                key = str.__str__(key)
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None or kind is float:
                copied[key] = item
                continue
            try:
                copied[key] = _copy(item, depth + 1)
            except _Refusal as exc:
                exc.reversed_path.append(key if isinstance(key, str) else repr(key))
                raise
        if len(copied) != dict.__len__(value):  # two keys, one string: as `check_json` says
            raise _Refusal("two keys of this object are the same string")
        return copied
    if isinstance(value, list | tuple):
        if depth >= MAX_STORED_DEPTH:
            raise _Refusal(f"nesting deeper than {MAX_STORED_DEPTH}")
        items: list[Any] = []
        for index, item in enumerate(_members(value)):
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None or kind is float:
                items.append(item)
                continue
            try:
                items.append(_copy(item, depth + 1))
            except _Refusal as exc:
                exc.reversed_path.append(index)
                raise
        return items
    if value is None or isinstance(value, bool | JSONFloat | JSONInt):
        return value
    # A subclass's own methods may say otherwise: the value is the base type's.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    raise _Refusal(f"{type(value).__module__}.{type(value).__qualname__} is not a JSON value")
