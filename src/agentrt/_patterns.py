"""Regular expressions in tool schemas: read as ECMA-262, matched in linear time.

JSON Schema's `pattern` and `patternProperties` are ECMA-262 regular
expressions. `jsonschema` applies them with Python's backtracking `re`, on the
event loop and holding the GIL: `^(a+)+$` against forty characters takes
hours and stops everything, the lease's heartbeat included. This module owns
the one way the runtime reads those patterns instead (decision 0016):

- At registration (`check_patterns`), every pattern of a schema is translated
  from ECMA-262 (as JSON Schema reads it, with Unicode code points) into RE2
  syntax and compiled with `google-re2`, an automaton that never backtracks:
  a match costs time linear in the text, whatever the pattern. What RE2 cannot
  match in linear time (backreferences, lookaround) or would read differently
  from ECMA-262 is refused with `UnsafePatternError`, one sentence naming the
  tool, the place and the reason; nothing is ever silently read another way.
- At validation, the keyword functions here (`pattern`, `patternProperties`,
  `additionalProperties`) replace jsonschema's, and search only with the
  compiled RE2 programs. `unevaluatedProperties` in a schema that also has
  `patternProperties` is refused, because jsonschema's evaluation of it
  searches with `re` and cannot be redirected.

Where ECMA-262 and RE2 differ, the translation keeps ECMA's meaning: `.`
excludes the four line terminators (`\\n`, `\\r`, U+2028, U+2029); `\\s` and
`\\S` are ECMA's Unicode white space; `$` is the end of the text only (not
before a final newline, as Python's `$` is); `\\d`, `\\w` and `\\b` are ASCII, as
in both; `\\uXXXX` (surrogate pairs joined), `\\u{...}`, `\\xHH`, `\\cX` and `\\0`
become RE2 code point escapes; `(?<name>...)` becomes a named group. Refused
besides: `\\B` (RE2 would find a non-boundary between the UTF-8 bytes of one
character), and a class escape (`\\d`, `\\s`, `\\w`...) beside a '-' that would
make a range (a syntax error with ECMA's `u` flag, a union without it).

The walk that finds a schema's patterns reads the schema as validation does:
the data of `const`, `enum`, `default` and `examples` is skipped where those
are keywords (a property may be named `default`), and whatever a `#/...`
reference points at is read as a schema, data included.
"""

from __future__ import annotations

import functools
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import UnsafePatternError
from ._fork import renewed_in_children

if TYPE_CHECKING:
    import jsonschema.exceptions

# `re2` and `jsonschema` are imported where first used, never when `import agentrt`
# runs (decision 0061): a pattern is compiled only when a tool is registered, and
# the keyword functions below are called only by a jsonschema validator.

__all__ = [
    "additional_properties",
    "check_patterns",
    "pattern",
    "pattern_properties",
    "search",
    "translate",
]

# ECMA-262 WhiteSpace and LineTerminator: what `\s` matches.
_WHITE_SPACE = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_LINE_TERMINATORS = r"\x{a}\x{d}\x{2028}\x{2029}"
_MAX_CODE_POINT = 0x10FFFF
_QUANTIFIER = re.compile(r"\{[0-9]+(,[0-9]*)?\}")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_BRACED_HEX = re.compile(r"\{([0-9A-Fa-f]{1,6})\}")
# Escapes of a letter or digit with the same meaning in ECMA-262 and RE2.
_SHARED_CLASS_ESCAPES = frozenset("dDwW")
_SHARED_CONTROL_ESCAPES = frozenset("fnrtv")
# The escapes that stand for a set of characters, never one.
_CLASS_ESCAPES = frozenset("dDwWsS")
# Bounds an RE2 program's memory; a pattern too big for it is refused.
_MAX_MEM = 8 << 20
_CACHE_SIZE = 4096


class _Refused(Exception):
    """Why a pattern cannot be checked safely as ECMA-262 reads it."""


def _ranges(spans: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
        for low, high in spans
    )


def _complement(spans: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    start = 0
    for low, high in spans:
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= _MAX_CODE_POINT:
        out.append((start, _MAX_CODE_POINT))
    return tuple(out)


_SPACE_ITEMS = _ranges(_WHITE_SPACE)
_NOT_SPACE_ITEMS = _ranges(_complement(_WHITE_SPACE))


def _code_point(value: int) -> str:
    if 0xD800 <= value <= 0xDFFF:
        raise _Refused(f"it names the lone surrogate U+{value:04X}, which no valid text contains")
    if value > _MAX_CODE_POINT:
        raise _Refused(f"it names U+{value:X}, beyond the last Unicode code point")
    return f"\\x{{{value:x}}}"


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """Translate the escape at `pattern[i]` (a backslash); return (RE2 text, next index)."""
    if i + 1 >= len(pattern):
        raise _Refused("it ends with a lone backslash")
    e = pattern[i + 1]
    after = i + 2
    if e in _SHARED_CLASS_ESCAPES or e in _SHARED_CONTROL_ESCAPES:
        return "\\" + e, after
    if e == "s":
        return (_SPACE_ITEMS if in_class else f"[{_SPACE_ITEMS}]"), after
    if e == "S":
        return (_NOT_SPACE_ITEMS if in_class else f"[{_NOT_SPACE_ITEMS}]"), after
    if e == "b":
        return ("\\x{8}" if in_class else "\\b"), after  # a backspace inside a class
    if e == "B":
        if in_class:
            raise _Refused("\\B inside a character class has no meaning")
        # RE2 searches UTF-8 bytes: it finds a non-boundary between the bytes of one
        # character ("é"), a position ECMA-262 does not have.
        raise _Refused(
            "\\B cannot be matched as ECMA-262 reads it: the linear-time matcher would also "
            "find it between the bytes of one character"
        )
    if e == "0":
        if after < len(pattern) and pattern[after].isdigit():
            raise _Refused("octal escapes like \\0" + pattern[after] + " are not ECMA-262")
        return "\\x{0}", after
    if e in "123456789":
        raise _Refused("backreferences cannot be matched in linear time")
    if e == "k":
        raise _Refused("backreferences cannot be matched in linear time")
    if e == "x":
        match = _HEX2.match(pattern, after)
        if match is None:
            raise _Refused("\\x must be followed by exactly two hex digits")
        return _code_point(int(match.group(), 16)), match.end()
    if e == "u":
        return _unicode_escape(pattern, after)
    if e == "c":
        if after < len(pattern) and pattern[after].isascii() and pattern[after].isalpha():
            return _code_point(ord(pattern[after]) % 32), after + 1
        raise _Refused("\\c must be followed by an ASCII letter")
    if e in "pP":
        raise _Refused("Unicode property escapes (\\p, \\P) are not supported")
    if e.isascii() and not e.isalnum():
        # An escaped punctuation character is itself, in both.
        return "\\" + e, after
    raise _Refused(f"\\{e} is not an ECMA-262 escape")


def _unicode_escape(pattern: str, at: int) -> tuple[str, int]:
    braced = _BRACED_HEX.match(pattern, at)
    if braced is not None:
        return _code_point(int(braced.group(1), 16)), braced.end()
    match = _HEX4.match(pattern, at)
    if match is None:
        raise _Refused("\\u must be followed by four hex digits or {hex digits}")
    value = int(match.group(), 16)
    end = match.end()
    if 0xD800 <= value <= 0xDBFF and pattern.startswith("\\u", end):
        low = _HEX4.match(pattern, end + 2)
        if low is not None and 0xDC00 <= int(low.group(), 16) <= 0xDFFF:
            joined = 0x10000 + ((value - 0xD800) << 10) + (int(low.group(), 16) - 0xDC00)
            return _code_point(joined), low.end()
    return _code_point(value), end


def _refuse_class_escape_range(pattern: str, i: int, after_dash: bool) -> None:
    """Refuse the class escape at `pattern[i]` when a '-' beside it would make a range:
    a syntax error in ECMA-262 with the `u` flag, a union without it, and a range
    between the spliced items here."""
    if after_dash or (pattern.startswith("-", i + 2) and not pattern.startswith("-]", i + 2)):
        raise _Refused(
            f"the class escape {pattern[i : i + 2]} beside '-' in a character class is read "
            "differently by different engines; write \\- for a literal '-'"
        )


def _group(pattern: str, i: int) -> tuple[str, int]:
    """Translate a group opening at `pattern[i]` (a parenthesis)."""
    if not pattern.startswith("(?", i):
        return "(", i + 1
    if pattern.startswith("(?:", i):
        return "(?:", i + 3
    if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
        raise _Refused("lookahead and lookbehind cannot be matched in linear time")
    if pattern.startswith("(?<", i):
        name = _GROUP_NAME.match(pattern, i + 3)
        if name is None or not pattern.startswith(">", name.end()):
            raise _Refused("a group name must be letters, digits or '_' after (?<")
        return f"(?P<{name.group()}>", name.end() + 1
    raise _Refused(f"{pattern[i : i + 3]!r} is not ECMA-262 group syntax")


def translate(pattern: str) -> str:
    """The RE2 pattern that matches what the ECMA-262 `pattern` matches.

    Raises `_Refused` (its message says why) for what cannot be translated
    safely; RE2's own compilation refuses the rest (an invalid pattern, a
    repetition above 1000, a program too large).
    """
    out: list[str] = []
    i = 0
    n = len(pattern)
    in_class = False
    # In a class: where its first item stands, and whether the last item was a '-'
    # that would make a range.
    class_start = 0
    after_dash = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if in_class and pattern[i + 1 : i + 2] in _CLASS_ESCAPES:
                _refuse_class_escape_range(pattern, i, after_dash)
            text, i = _escape(pattern, i, in_class)
            out.append(text)
            after_dash = False
            continue
        if in_class:
            after_dash = c == "-" and i != class_start
            if c == "]":
                in_class = False
                out.append("]")
            elif c == "[":
                out.append("\\[")  # RE2 would read `[:alpha:]` as a POSIX class
            else:
                out.append(c)
            i += 1
            continue
        if c == "[":
            opening = "[^" if pattern.startswith("[^", i) else "["
            i += len(opening)
            if pattern.startswith("]", i):
                raise _Refused(
                    f"{opening}] is an empty class in ECMA-262 but starts a class "
                    "holding ']' elsewhere; write \\] for a ']' in a class"
                )
            in_class = True
            class_start = i
            after_dash = False
            out.append(opening)
            continue
        if c == ".":
            out.append(f"[^{_LINE_TERMINATORS}]")
        elif c == "(":
            text, i = _group(pattern, i)
            out.append(text)
            continue
        elif c == "{":
            quantifier = _QUANTIFIER.match(pattern, i)
            if quantifier is None:
                raise _Refused(
                    "a '{' that does not start a quantifier {n}, {n,} or {n,m} is read "
                    "differently by different engines; write \\{ for a literal brace"
                )
            out.append(quantifier.group())
            i = quantifier.end()
            continue
        elif c == "}":
            out.append("\\}")
        else:
            out.append(c)
        i += 1
    if in_class:
        raise _Refused("a character class is not closed")
    return "".join(out)


_cache: dict[str, Any] = {}
_cache_lock = threading.Lock()

renewed_in_children(__name__, "_cache_lock", threading.Lock)  # a lock held at a fork (0125)


@functools.cache
def _options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    return options


def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 program of an ECMA-262 pattern (cached); raises `_Refused`."""
    with _cache_lock:
        compiled = _cache.get(pattern)
    if compiled is not None:
        return compiled
    translated = translate(pattern)
    import re2

    try:
        compiled = re2.compile(translated, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "backslashreplace")
        raise _Refused(f"it cannot be compiled to a linear-time matcher: {reason}") from exc
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[pattern] = compiled
    return compiled


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` (ECMA-262) matches somewhere in `text`, in linear time; raises
    `_Refused` for a pattern `check_patterns` would have refused."""
    return compile_pattern(pattern).search(text) is not None


# Keys whose values are data in a schema, never schemas (unless a reference makes them one).
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose value maps names (any string, a data keyword's name too) to schemas.
_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


def _pointed(root: Any, ref: str) -> tuple[Any, str] | None:
    """The value a `#/...` JSON pointer names in `root`, and its json path; None for an
    anchor or a pointer that names nothing (registration refuses a dangling one later)."""
    if not ref.startswith("#/"):
        return None
    node, path = root, "$"
    for token in urllib.parse.unquote(ref[2:]).split("/"):
        part = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node, path = node[part], f"{path}.{part}"
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, path = node[int(part)], f"{path}[{part}]"
        else:
            return None
    return node, path


def _schemas(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(json path, object) for every object of `schema` that validation may read as a
    schema: the root, what its keywords hold (not the data of `const`, `enum`, `default`
    and `examples`; every value of a map of named schemas such as `properties`, whatever
    its name), and whatever a `#/...` reference points at, data included."""
    stack: list[tuple[Any, str]] = [(schema, "$")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node))
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        yield path, node
        for key, item in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SCHEMAS and isinstance(item, dict):
                stack.extend((sub, f"{path}.{key}.{name}") for name, sub in item.items())
            else:
                stack.append((item, f"{path}.{key}"))
        for keyword in _REFERENCES:
            target = node.get(keyword)
            pointed = _pointed(schema, target) if isinstance(target, str) else None
            if pointed is not None:
                stack.append(pointed)


def _patterns(schema: Any) -> Iterator[tuple[str, str]]:
    """(json path, pattern) for every `pattern` and `patternProperties` key in `schema`."""
    for path, node in _schemas(schema):
        found = node.get("pattern")
        if isinstance(found, str):
            yield f"{path}.pattern", found
        keyed = node.get("patternProperties")
        if isinstance(keyed, dict):
            for key in keyed:
                yield f"{path}.patternProperties", key


def _has_keyword(schema: Any, keyword: str) -> bool:
    return any(keyword in node for _, node in _schemas(schema))


def _shown(pattern: str) -> str:
    text = repr(pattern)
    return text if len(text) <= 200 else text[:199] + "…"


def check_patterns(schema: Mapping[str, Any], name: str) -> None:
    """Compile every pattern of a tool's schema, or refuse it with `UnsafePatternError`."""
    for path, found in _patterns(schema):
        try:
            compile_pattern(found)
        except _Refused as exc:
            raise UnsafePatternError(
                f"tool {name!r}: the pattern {_shown(found)} at {path} is refused because {exc}"
            ) from None
    if _has_keyword(schema, "patternProperties") and _has_keyword(schema, "unevaluatedProperties"):
        raise UnsafePatternError(
            f"tool {name!r}: unevaluatedProperties together with patternProperties is "
            "refused because it cannot be checked in linear time here"
        )


# ---------------------------------------------------------------------------
# The keywords, as jsonschema calls them


def _invalid(message: str) -> jsonschema.exceptions.ValidationError:
    # Reached only from inside a jsonschema validator, so jsonschema is loaded.
    import jsonschema.exceptions

    return jsonschema.exceptions.ValidationError(message)


def _matches(pattern: str, text: str) -> bool | str:
    """True/False, or why the pattern could not be applied (then the value is refused)."""
    try:
        return search(pattern, text)
    except _Refused as exc:
        return str(exc)


def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "string") or not isinstance(patrn, str):
        return
    matched = _matches(patrn, instance)
    if isinstance(matched, str):
        yield _invalid(f"the pattern {_shown(patrn)} cannot be applied: {matched}")
    elif not matched:
        yield _invalid(f"{instance!r} does not match {patrn!r}")


def pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            matched = _matches(patrn, key)
            if isinstance(matched, str):
                yield _invalid(f"the pattern {_shown(patrn)} cannot be applied: {matched}")
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties and not any(_matches(p, key) is True for p in patterns)
    ]


def additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    """jsonschema's `additionalProperties`, its messages kept, with linear-time patterns."""
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield _invalid(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            shown = ", ".join(repr(each) for each in sorted(extras, key=str))
            verb = "was" if len(extras) == 1 else "were"
            yield _invalid(f"Additional properties are not allowed ({shown} {verb} unexpected)")
