"""Canonical JSON and usable JSON: golden bytes, refusals, number literals, properties."""

from __future__ import annotations

import copy
import enum
import hashlib
import inspect
import math
import pickle
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import jsonschema
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import _canonical as canonical
from agentrt._canonical import (
    MAX_DEPTH,
    MAX_STORED_DEPTH,
    JSONFloat,
    JSONInt,
    _encode_slow,
    _finish,
    _parse_slow,
    _text_fast,
    canonical_json,
    check_json,
    content_hash,
    copy_json,
    from_text,
    parse_json,
    policy_json,
    to_text,
)
from agentrt._decisions import record
from agentrt._errors import JSONValueError
from agentrt._records import Decision

# --------------------------------------------------------------------------- golden bytes


def test_keys_sort_by_code_point_not_utf16_units() -> None:
    value = {"b": 1, "a": 2, "\uffff": 3, "😀": 4, "é": 5, "": 6, "A": 7, "\ue000": 8}
    assert canonical_json(value) == (
        b'{"":6,"A":7,"a":2,"b":1,"\xc3\xa9":5,"\xee\x80\x80":8,"\xef\xbf\xbf":3,'
        b'"\xf0\x9f\x98\x80":4}'
    )
    # A literal-carrying number takes the pure-Python encoder: same order.
    value["a"] = JSONFloat("2e0")
    assert canonical_json(value) == (
        b'{"":6,"A":7,"a":2e0,"b":1,"\xc3\xa9":5,"\xee\x80\x80":8,"\xef\xbf\xbf":3,'
        b'"\xf0\x9f\x98\x80":4}'
    )


def test_number_literals_are_kept_as_written() -> None:
    text = (
        b"[10,10.0,1e1,1E1,-0,0.1,1e400,123456789012345678901234567890,"
        b"-0.0,1e-400,1.5e+3,1.50,2E-0]"
    )
    assert canonical_json(parse_json(b" [ " + text[1:-1].replace(b",", b" ,\n") + b" ] ")) == text
    assert canonical_json(text) == text


def test_plain_python_numbers() -> None:
    assert canonical_json([10, 10.0, 0.1, 1e16, 1e-05, -0.0, 1.5, 2**64, True, False, None]) == (
        b"[10,10.0,0.1,1e+16,1e-05,-0.0,1.5,18446744073709551616,true,false,null]"
    )


def test_five_thousand_digit_integer() -> None:
    limit_before = sys.get_int_max_str_digits()
    digits = "9" + "1234567890" * 499 + "123456789"
    assert len(digits) == 5000
    literal = digits.encode()
    parsed = parse_json(literal)
    assert parsed == int(Decimal(digits))
    assert canonical_json(parsed) == literal
    assert canonical_json(int(Decimal(digits))) == literal
    assert canonical_json(-int(Decimal(digits))) == b"-" + literal
    assert sys.get_int_max_str_digits() == limit_before  # never raised globally


def test_every_control_character_escape() -> None:
    text = "".join(chr(c) for c in range(0x20))
    assert canonical_json(text) == (
        b'"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007'
        b"\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f"
        b"\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017"
        b'\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f"'
    )


def test_html_characters_line_separators_quotes_and_raw_utf8() -> None:
    value = {"<k>": '<a href="x">&</a>\u2028\u2029\\/\x7f😀é'}
    assert canonical_json(value) == (
        b'{"\\u003ck\\u003e":"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e'
        b'\\u2028\\u2029\\\\/\x7f\xf0\x9f\x98\x80\xc3\xa9"}'
    )
    assert policy_json(value) == (
        b'{"<k>":"<a href=\\"x\\">&</a>\\u2028\\u2029\\\\/\x7f\xf0\x9f\x98\x80\xc3\xa9"}'
    )


def test_escaped_input_is_unescaped_then_written_canonically() -> None:
    text = b'{"k":"\\u0041\\/\\ud83d\\ude00\\u00e9\\u003c\\u2028\\u0000"}'
    assert canonical_json(text) == b'{"k":"A/\xf0\x9f\x98\x80\xc3\xa9\\u003c\\u2028\\u0000"}'


def test_content_hash_golden_values() -> None:
    assert content_hash({"b": [True, None, "x"], "a": 1}) == (
        "eca8cfb31ab74533e1eb2f4c74d2d55dfe3c79ac704787e54be8647ea7777eb1"
    )
    assert content_hash("<&>") == (
        "4f625111c9a47ece97bd2ddbea3ecac60f880b03ac8ab17538d569b8728b53bc"
    )
    assert content_hash(b"[1e1, 10.0, 10]") == (
        "e4245943444bf3e80b6dd0fe619ba17ed0b0b5c9aa491a1522eee74176493fbd"
    )
    assert content_hash(b"[1e1, 10.0, 10]") == hashlib.sha256(b"[1e1,10.0,10]").hexdigest()


def test_a_str_is_a_string_value_and_bytes_are_text() -> None:
    assert canonical_json('{"a":1}') == b'"{\\"a\\":1}"'
    assert canonical_json(b'{"a":1}') == b'{"a":1}'
    assert canonical_json(bytearray(b"[1]")) == b"[1]"
    assert canonical_json(memoryview(b"[1]")) == b"[1]"
    assert content_hash("123") != content_hash(123)
    assert parse_json('{"a":1}') == {"a": 1}
    check_json("not json text, a string")


def test_tuples_subclasses_and_enums() -> None:
    class Colour(enum.StrEnum):
        RED = "red"

    class Size(enum.IntEnum):
        BIG = 3

    # A str mixin whose str() is "Plain.BLUE": its JSON string is still "blue".
    class Plain(str, enum.Enum):  # noqa: UP042
        BLUE = "blue"

    value = {Colour.RED: (Size.BIG, Plain.BLUE, Colour.RED), "a": []}
    assert canonical_json(value) == b'{"a":[],"red":[3,"blue","red"]}'
    assert canonical_json({"x": ()}) == b'{"x":[]}'


# --------------------------------------------------------------------------- refusals


def plain_id(case: object) -> str:
    """A parameter's test id in printable ASCII with no backslash, at most 60 characters.

    pytest escapes any other id, and escapes it again when one process collects
    the test a second time, as mutmut's fork server does: the id it then asks
    for is not found, and every mutant those tests cover goes untested
    (docs/mutation.md).
    """
    if isinstance(case, bytes):
        case = case.decode("latin-1")
    if not isinstance(case, str):
        return ""
    return "".join(c if " " <= c <= "~" and c != "\\" else "?" for c in case[:60])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"a":[{"b":1,"b":2}]}', 'repeated key "b" at $.a[0]'),
        (b'{"x":1,"x":1}', 'repeated key "x" at $ '),
        (b'"\\udc00"', "lone surrogate U+DC00 in a string at $"),
        (b'["ok","\\ud800"]', "lone surrogate U+D800 in a string at $[1]"),
        (b'"\\ud83d\\ude00\\udc00"', "lone surrogate U+DC00"),
        (b'{"\\udfff":1}', "lone surrogate U+DFFF in key"),
        (b"1" * 10_001, "number literal of 10001 characters (the limit is 10000) at $"),
        (b"[0." + b"1" * 9_999 + b"]", "number literal of 10001 characters"),
        (b"1e10001", 'number literal "1e10001" has an exponent beyond ±10000 at $'),
        (b"[1E-10001]", 'number literal "1E-10001" has an exponent beyond ±10000 at $[0]'),
        (b"1e+0000010001", "has an exponent beyond ±10000"),
        (b'"\xff"', "invalid UTF-8 at byte 1"),
        (b'"\xed\xa0\x80"', "invalid UTF-8 at byte 1"),
        (b"[\xc0\xaf]", "invalid UTF-8 at byte 1"),
        (b"1 2", "extra data after the JSON value at $ (line 1, column 3)"),
        (b'{"a":1}{}', "extra data after the JSON value at $ (line 1, column 8)"),
        (b"NaN", "NaN is not a JSON value at $"),
        (b'{"a":[Infinity]}', "Infinity is not a JSON value at $.a[0]"),
        (b"-Infinity", "-Infinity is not a JSON value at $"),
        (b"[1,]", 'expecting a value, found "]" at $[1]'),
        (b'{"a":1,}', "expecting a property name in double quotes at $ "),
        (b"", "expecting a value, found the end of the text at $"),
        (b"\xef\xbb\xbf[]", "a byte order mark is not part of JSON text"),
        (b"\x0c1", 'expecting a value, found "\\f"'),
        (b"\xc2\xa01", 'expecting a value, found "\\u00a0"'),
        (b"01", "extra data after the JSON value"),
        (b"[1.]", "expecting ',' or ']' after an array element at $"),
        (b"[.5]", 'expecting a value, found "."'),
        (b"+1", 'expecting a value, found "+"'),
        (b'{"a":"\x01"}', "unescaped control character U+0001 in a string at $.a"),
        (b'{"a b":"\\x"}', 'invalid escape "\\\\x" in a string at $["a b"] (line 1, column 9)'),
        (b'["\\u12G4"]', 'invalid escape "\\\\u12G4" in a string at $[0]'),
        (b'{"a":"abc', "unterminated string at $.a"),
        (b"{'a':1}", "expecting a property name in double quotes at $"),
        (b'{"a" 1}', "expecting ':' after a property name at $.a"),
        (b"[tru]", 'expecting a value, found "t" at $[0]'),
    ],
    ids=plain_id,
)
def test_unusable_text_is_refused_with_what_and_where(text: bytes, message: str) -> None:
    for call in (parse_json, check_json, canonical_json, policy_json, content_hash, to_text):
        with pytest.raises(JSONValueError) as info:
            call(text)
        assert message in str(info.value)
    with pytest.raises(ValueError):  # JSONValueError is also a ValueError
        parse_json(text)


def test_limits_are_inclusive() -> None:
    assert parse_json(b"1" * 10_000) == int(Decimal("1" * 10_000))
    assert canonical_json(b"-" + b"1" * 9_999) == b"-" + b"1" * 9_999
    assert canonical_json(b"0." + b"1" * 9_998) == b"0." + b"1" * 9_998
    big = parse_json(b"1e10000")
    assert isinstance(big, JSONFloat)
    assert big == math.inf
    assert big.literal == "1e10000"
    assert canonical_json([big, parse_json(b"1e-10000")]) == b"[1e10000,1e-10000]"
    assert parse_json(b"1e00000000000000010000") == math.inf


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_depth_256_is_usable_and_257_is_not() -> None:
    assert parse_json(_nested(256)) is not None
    check_json(_nested(256))
    with pytest.raises(JSONValueError, match=r"^nesting deeper than 256 at \$\[0\]\[0\]"):
        parse_json(_nested(257))
    with pytest.raises(JSONValueError, match=r"^nesting deeper than 256 at \$\[0\]\[0\]"):
        check_json(_nested(257))
    objects = b'{"a":' * 256 + b"1" + b"}" * 256
    assert canonical_json(parse_json(objects)) == objects
    with pytest.raises(JSONValueError, match=r"nesting deeper than 256 at \$\.a\.a"):
        parse_json(b'{"a":' * 257 + b"1" + b"}" * 257)
    # Brackets inside strings do not count.
    assert parse_json(b'["' + b"[" * 300 + b'"]') == ["[" * 300]

    value: Any = []
    for _ in range(255):
        value = [value]
    check_json(value)
    with pytest.raises(JSONValueError, match=r"^nesting deeper than 256 at \$\[0\]"):
        check_json([value])
    nested: Any = {}
    for _ in range(255):
        nested = {"a": nested}
    check_json(nested)
    with pytest.raises(JSONValueError, match=r"nesting deeper than 256 at \$\.a\.a"):
        check_json({"a": nested})
    with pytest.raises(JSONValueError, match=r"nesting deeper than 256 at \$\[0\]\.a"):
        check_json([nested])


def test_writers_and_from_text_leave_room_for_envelopes() -> None:
    assert MAX_STORED_DEPTH == 272
    usable: Any = []
    for _ in range(MAX_DEPTH - 1):
        usable = [usable]
    # An event payload or the approval hash's request carries the value a few levels down.
    envelope = {"request": {"spec": {}, "args": {"x": usable}}}
    text = to_text(envelope)
    assert text == '{"request":{"args":{"x":' + "[" * 256 + "]" * 256 + '},"spec":{}}}'
    assert canonical_json(from_text(text)) == text.encode()
    assert canonical_json(text.encode()) == text.encode()
    assert canonical_json(copy_json(envelope)) == text.encode()
    with pytest.raises(JSONValueError, match="nesting deeper than 256"):
        parse_json(text)  # the usable-JSON gate stays at 256

    deepest = _nested(MAX_STORED_DEPTH)
    assert canonical_json(deepest) == deepest
    assert canonical_json(from_text(deepest.decode())) == deepest
    too_deep = _nested(MAX_STORED_DEPTH + 1)
    for call in (canonical_json, policy_json, content_hash, to_text):
        with pytest.raises(JSONValueError, match=r"^nesting deeper than 272 at \$\[0\]"):
            call(too_deep)
        with pytest.raises(JSONValueError, match=r"^nesting deeper than 272 at \$\[0\]"):
            call([from_text(deepest.decode())])
    with pytest.raises(JSONValueError, match="nesting deeper than 272"):
        from_text(too_deep.decode())
    with pytest.raises(JSONValueError, match="nesting deeper than 272"):
        copy_json([from_text(deepest.decode())])
    objects: Any = {}
    for _ in range(MAX_STORED_DEPTH - 1):
        objects = {"a": objects}
    assert canonical_json(objects) == b'{"a":' * 271 + b"{}" + b"}" * 271
    assert copy_json(objects) == objects
    for call in (canonical_json, copy_json):
        with pytest.raises(JSONValueError, match=r"^nesting deeper than 272 at \$\.a\.a"):
            call({"a": objects})


def test_cycles_are_refused_not_a_recursion_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(JSONValueError, match="nesting deeper than 256"):
        check_json(loop)
    for call in (canonical_json, copy_json):
        with pytest.raises(JSONValueError, match="nesting deeper than 272"):
            call(loop)


def test_deep_text_parses_when_the_callers_stack_is_already_deep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow_calls: list[str] = []

    def spy(text: str, limit: int) -> Any:
        slow_calls.append(text)
        return _parse_slow(text, limit)

    def json_runs_out() -> bool:
        try:
            canonical._decoder.decode(text.decode())
        except RecursionError:
            return True
        return False

    monkeypatch.setattr(canonical, "_parse_slow", spy)
    text = _nested(MAX_DEPTH)
    limit = sys.getrecursionlimit()
    # Leave room for the test's own frames but not for json's 256 levels.
    sys.setrecursionlimit(len(inspect.stack(0)) + 120)
    try:
        ran_out = json_runs_out()
        value = parse_json(text)
    finally:
        sys.setrecursionlimit(limit)
    assert canonical_json(value) == text
    # Where json's C scanner counts its nesting against the Python limit (3.11), it runs out
    # of stack and the fallback parses the text; 3.12 and later bound it by a C limit of its
    # own, and the fast parse needs no fallback.
    assert ran_out == (sys.version_info < (3, 12))
    assert slow_calls == ([text.decode()] if ran_out else [])


def test_deep_text_cut_inside_a_string_of_escaped_quotes_is_refused_in_linear_time() -> None:
    """Text deeper than the limit whose last string never ends, full of `\\"`: each escaped
    quote could start a string that runs to the end, and the depth count, made before any
    parser, must not try each of them (64 KiB of such text took seconds of CPU). Bounded
    by this process's CPU time, not the clock's: a quadratic count takes many times it."""
    text = "[" * (MAX_DEPTH + 1) + '"' + '\\"' * 32_000
    began = time.process_time()
    assert canonical.deeper_than(text, MAX_DEPTH)
    with pytest.raises(JSONValueError):
        parse_json(text.encode())
    assert time.process_time() - began < 1


class _Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "nan is not a JSON number at $"),
        ([1, float("inf")], "inf is not a JSON number at $[1]"),
        ({"a": {"b": -math.inf}}, "-inf is not a JSON number at $.a.b"),
        ({1: 2}, "an object key must be a str, not int at $"),
        ({"a": [{None: 1}]}, "an object key must be a str, not NoneType at $.a[0]"),
        ({"a": {1, 2}}, "builtins.set is not a JSON value at $.a"),
        ({"a": b"x"}, "builtins.bytes is not a JSON value at $.a"),
        ([_Opaque()], "_Opaque is not a JSON value at $[0]"),
        ({"a": [1, {"b": "ok\udc00"}]}, "lone surrogate U+DC00 in a string at $.a[1].b"),
        ("\ud83d\ude00", "lone surrogate U+D83D in a string at $"),
        ({"x\ud800": 1}, 'lone surrogate U+D800 in key "x\\ud800" at $'),
        ([10**10_000], "integer of more than 10000 characters at $[0]"),
        (-(10**9_999), "integer of more than 10000 characters at $"),
    ],
    ids=plain_id,
)
def test_unusable_python_values_are_refused(value: Any, message: str) -> None:
    for call in (check_json, canonical_json, policy_json, content_hash, to_text):
        with pytest.raises(JSONValueError) as info:
            call(value)
        assert message in str(info.value)


def test_python_int_limits_are_inclusive() -> None:
    check_json(10**10_000 - 1)
    check_json(-(10**9_999 - 1))
    assert canonical_json(10**9_999) == b"1" + b"0" * 9_999


def test_equal_string_subclass_keys_are_a_repeated_key() -> None:
    class Key(str):
        def __hash__(self) -> int:
            return id(self)

        def __eq__(self, other: object) -> bool:
            return self is other

    with pytest.raises(JSONValueError, match="two keys of this object are the same string"):
        canonical_json({Key("a"): 1, Key("a"): 2})
    # A copy (what a tool's content becomes before it is checked: decision 0138) refuses
    # them too, whichever comes first, rather than keep one value of the two.
    for keys in ((Key("a"), Key("a")), (Key("a"), "a"), ("a", Key("a"))):
        with pytest.raises(JSONValueError, match="two keys of this object are the same string"):
            copy_json(dict(zip(keys, (1, 2), strict=True)))


def test_wrong_argument_type_for_parse_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not int"):
        parse_json(12)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- number types


def test_parsed_number_types() -> None:
    values = parse_json(b"[10,10.0,1e1,-0,0.1,1e400,-1e400,1e-400," + b"7" * 641 + b"]")
    assert [type(v) for v in values] == [
        int,
        float,
        JSONFloat,
        JSONInt,
        float,
        JSONFloat,
        JSONFloat,
        JSONFloat,
        JSONInt,
    ]
    assert type(parse_json(b"7" * 640)) is int
    assert values[2] == 10.0
    assert values[2] + 1 == 11.0
    assert type(values[2] + 1) is float
    assert values[3] == 0
    assert values[5] == math.inf
    assert values[6] == -math.inf
    assert values[7] == 0.0
    assert str(values[2]) == repr(values[2]) == "1e1"
    assert str(values[3]) == "-0"
    assert repr(values[8]) == "7" * 641


def test_number_constructors_check_the_literal() -> None:
    assert JSONFloat("2.50").literal == "2.50"
    assert JSONFloat("2.50") == 2.5
    assert JSONInt("-0").literal == "-0"
    assert canonical_json([JSONFloat("2.50"), JSONInt("-0")]) == b"[2.50,-0]"
    with pytest.raises(JSONValueError, match="not a JSON number literal with a fraction"):
        JSONFloat("10")
    with pytest.raises(JSONValueError, match="not a JSON number literal"):
        JSONFloat("1_0.0")
    with pytest.raises(JSONValueError, match="not a JSON integer literal"):
        JSONInt("1.0")
    with pytest.raises(JSONValueError, match="exponent beyond"):
        JSONFloat("1e10001")
    with pytest.raises(TypeError):
        JSONFloat(1.0)  # type: ignore[arg-type]


def test_huge_numbers_compare_and_validate_without_raising() -> None:
    huge = parse_json(b"9" * 5000)
    inf_literal = parse_json(b"1e400")
    assert huge > 1e308
    assert inf_literal > huge
    assert huge < parse_json(b"1" + b"0" * 5000)
    validator = jsonschema.Draft202012Validator({"type": "array", "items": {"maximum": 5}})
    errors = list(validator.iter_errors([huge, inf_literal, parse_json(b"-0"), 5]))
    assert [e.path[0] for e in errors] == [0, 1]
    assert errors[1].message == "1e400 is greater than the maximum of 5"
    integer = jsonschema.Draft202012Validator({"type": "integer"})
    assert integer.is_valid(huge)
    assert integer.is_valid(parse_json(b"-0"))
    assert pydantic.TypeAdapter(float).validate_python(parse_json(b"1e1")) == 10.0
    assert pydantic.TypeAdapter(int).validate_python(parse_json(b"-0")) == 0


def test_deepcopy_pickle_and_copy_json_keep_literals() -> None:
    value = parse_json(b'{"a":[1e1,-0,1e400,1E-7,' + b"3" * 700 + b'],"b":{"c":"x"}}')
    expected = canonical_json(value)
    for clone in (
        copy.deepcopy(value),
        copy.copy(value),
        pickle.loads(pickle.dumps(value)),
        pickle.loads(pickle.dumps(value, protocol=0)),
        copy_json(value),
    ):
        assert canonical_json(clone) == expected
        assert [type(v) for v in clone["a"]] == [JSONFloat, JSONInt, JSONFloat, JSONFloat, JSONInt]


def test_copy_json_is_independent_and_plain() -> None:
    original: Any = {"a": [1, {"b": [2]}], "t": (1, [3])}
    copied = copy_json(original)
    copied["a"][1]["b"].append(9)
    copied["t"][1].append(9)
    assert original == {"a": [1, {"b": [2]}], "t": (1, [3])}
    assert copied == {"a": [1, {"b": [2, 9]}], "t": [1, [3, 9]]}
    with pytest.raises(JSONValueError, match=r"builtins\.object is not a JSON value at \$\.a\[1\]"):
        copy_json({"a": [1, object()]})


def test_interpreter_int_limit_settings_do_not_change_the_result() -> None:
    digits = b"8" * 5000
    limit = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(640)
        parsed = parse_json(b"[" + digits + b"," + b"5" * 700 + b"]")
        assert canonical_json(parsed) == b"[" + digits + b"," + b"5" * 700 + b"]"
        assert canonical_json(int(Decimal("6" * 700))) == b"6" * 700
        assert str(parsed[1]) == "5" * 700
        sys.set_int_max_str_digits(0)
        with pytest.raises(JSONValueError, match="integer of more than 10000 characters"):
            canonical_json(10**10_000)
        assert canonical_json(10**9_999) == b"1" + b"0" * 9_999
    finally:
        sys.set_int_max_str_digits(limit)


def test_text_round_trip_for_storage() -> None:
    value = parse_json(b'{"z":"<b>&","a":[1E1,-0]}')
    text = to_text(value)
    assert text == '{"a":[1E1,-0],"z":"<b>&"}'
    assert canonical_json(from_text(text)) == canonical_json(value)
    with pytest.raises(JSONValueError, match="repeated key"):
        from_text('{"a":1,"a":1}')


# --------------------------------------------------------------------------- properties

_SPECIAL_CHARS = [*map(chr, range(0x20)), '"', "\\", "/", "<", ">", "&", "\u2028", "\u2029"]
_SPECIAL_CHARS += ["\x7f", "é", "\ue000", "\uffff", "😀", "\U0010ffff", "\u00a0"]
_chars = st.one_of(st.sampled_from(_SPECIAL_CHARS), st.characters(codec="utf-8"))
_strings = st.text(_chars, max_size=12)


@st.composite
def _float_literals(draw: st.DrawFn) -> JSONFloat:
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.sampled_from(["0", "1", "10", "123456789012345678901234567890"]))
    fraction = draw(st.sampled_from(["", ".0", ".5", ".50", ".000001", ".1234567890123456789"]))
    exponent = draw(
        st.sampled_from(["", "e1", "E1", "e+5", "e-5", "e400", "e-400", "E+0", "e007", "e10000"])
    )
    if not fraction and not exponent:
        fraction = ".0"
    return JSONFloat(sign + whole + fraction + exponent)


_big_ints = st.tuples(st.booleans(), st.integers(min_value=2**64, max_value=10**6000)).map(
    lambda pair: -pair[1] if pair[0] else pair[1]
)
_plain_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    _strings,
)
_leaves = st.one_of(
    _plain_leaves,
    _float_literals(),
    st.just(JSONInt("-0")),
    _big_ints,
    st.builds(lambda n: JSONInt(str(n)), st.integers(10**700, 10**800)),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_strings, children, max_size=4),
    )


_json_values = st.recursive(_leaves, _containers, max_leaves=20)
_plain_values = st.recursive(
    _plain_leaves,
    lambda c: st.one_of(
        st.lists(c, max_size=4),
        st.lists(c, max_size=3).map(tuple),
        st.dictionaries(_strings, c, max_size=4),
    ),
    max_leaves=20,
)

_PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference_string(text: str, *, html: bool) -> str:
    """The escaping rules of store.md and decision 0003, one character at a time."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
    short["\t"] = "\\t"
    out = ['"']
    for char in text:
        if char in short:
            out.append(short[char])
        elif ord(char) < 0x20 or char in "\u2028\u2029" or (html and char in "<>&"):
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _reference(value: Any, *, html: bool = True) -> str:
    """An independent canonical encoder to check the module against."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, JSONFloat | JSONInt):
        return value.literal
    if isinstance(value, int):
        return str(Decimal(value))
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, str):
        return _reference_string(value, html=html)
    if isinstance(value, dict):
        members = sorted(value.items(), key=lambda kv: [ord(c) for c in kv[0]])
        body = ",".join(
            _reference_string(k, html=html) + ":" + _reference(v, html=html) for k, v in members
        )
        return "{" + body + "}"
    return "[" + ",".join(_reference(v, html=html) for v in value) + "]"


@_PROPERTY
@given(_json_values)
def test_canonical_matches_the_reference_encoder(value: Any) -> None:
    assert canonical_json(value) == _reference(value).encode("utf-8")
    assert policy_json(value) == _reference(value, html=False).encode("utf-8")
    assert content_hash(value) == hashlib.sha256(_reference(value).encode("utf-8")).hexdigest()


@_PROPERTY
@given(_json_values)
def test_parse_of_canonical_recanonicalizes_identically(value: Any) -> None:
    encoded = canonical_json(value)
    again = parse_json(encoded)
    assert canonical_json(again) == encoded
    assert parse_json(encoded.decode("utf-8")) == again
    assert canonical_json(from_text(to_text(value))) == encoded


@_PROPERTY
@given(_json_values)
def test_policy_and_canonical_differ_only_in_html_escapes(value: Any) -> None:
    canonical, policy = canonical_json(value), policy_json(value)
    assert not any(c in canonical for c in b"<>&")
    unescaped = (
        canonical.replace(b"\\u003c", b"<").replace(b"\\u003e", b">").replace(b"\\u0026", b"&")
    )
    # An escaped backslash before "u003c" is text, not an escape: compare the other way too.
    escaped = policy.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")
    assert escaped == canonical
    if b"\\\\u00" not in canonical:
        assert unescaped == policy


@_PROPERTY
@given(_plain_values)
def test_fast_path_equals_slow_path(value: Any) -> None:
    for html in (True, False):
        fast = _text_fast(value, html=html)
        assert fast is not None  # plain values must take the fast path
        assert fast.encode("utf-8") == _finish(_encode_slow(value), html=html).encode("utf-8")


@_PROPERTY
@given(_json_values)
def test_values_with_literals_take_the_slow_path_only_when_needed(value: Any) -> None:
    fast = _text_fast(value, html=True)
    if fast is not None:
        assert fast.encode("utf-8") == _reference(value).encode("utf-8")


def _render(value: Any, data: st.DataObject) -> str:
    """Any JSON text for `value`: random whitespace, key order and string escapes."""
    space = data.draw(st.text(st.sampled_from(" \t\n\r"), max_size=2))
    if isinstance(value, dict):
        keys = data.draw(st.permutations(list(value)))
        members = [_render_string(k, data) + space + ":" + _render(value[k], data) for k in keys]
        return "{" + space + ("," + space).join(members) + "}"
    if isinstance(value, list | tuple):
        return "[" + space + ("," + space).join(_render(v, data) for v in value) + space + "]"
    if isinstance(value, str):
        return space + _render_string(value, data)
    return space + _reference(value) + space


def _render_string(text: str, data: st.DataObject) -> str:
    out = ['"']
    for char in text:
        how = data.draw(st.sampled_from(["raw", "u", "U"]))
        code = ord(char)
        if how != "raw" or char in '"\\' or code < 0x20:
            digits = "x" if how == "u" else "X"
            if code > 0xFFFF:
                high = 0xD800 + ((code - 0x10000) >> 10)
                low = 0xDC00 + ((code - 0x10000) & 0x3FF)
                out.append(f"\\u{high:04{digits}}\\u{low:04{digits}}")
            elif char == "/" and how == "U":
                out.append("\\/")
            else:
                out.append(f"\\u{code:04{digits}}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


@_PROPERTY
@given(_json_values, st.data())
def test_any_text_of_a_value_canonicalizes_like_the_value(value: Any, data: st.DataObject) -> None:
    text = _render(value, data).encode("utf-8")
    assert canonical_json(text) == canonical_json(value)
    assert canonical_json(text) == canonical_json(parse_json(text))
    assert canonical_json(_parse_slow(text.decode("utf-8"), MAX_DEPTH)) == canonical_json(value)


def _mutations(text: str) -> Iterator[str]:
    yield text
    for cut in {0, 1, len(text) // 2, len(text) - 1}:
        yield text[:cut]
        yield text[:cut] + text[cut + 1 :]
        for junk in (",", "]", "}", '"', "\\", "-", "e", "\x00", "1", " ", "{", ":"):
            yield text[:cut] + junk + text[cut:]


@_PROPERTY
@given(_json_values, st.data())
def test_fast_and_slow_parsers_accept_and_refuse_the_same_texts(
    value: Any, data: st.DataObject
) -> None:
    for text in _mutations(_render(value, data)):
        try:
            expected = canonical_json(_parse_slow(text, MAX_DEPTH))
        except JSONValueError as slow_error:
            with pytest.raises(JSONValueError) as fast_error:
                parse_json(text)
            assert str(fast_error.value) == str(slow_error)
        else:
            assert canonical_json(parse_json(text)) == expected


_field_texts = st.one_of(st.just(""), _strings, st.sampled_from(["tool_call", "complete", "fail"]))


@_PROPERTY
@given(
    kind=_field_texts,
    tool=_field_texts,
    args=st.one_of(st.none(), _json_values, st.floats(), st.sets(st.integers(), max_size=2)),
    reason=_field_texts,
    result=st.one_of(st.none(), _json_values),
    message=_field_texts,
    origin=_field_texts,
    invalid=st.one_of(st.none(), _strings),
)
def test_a_recorded_decisions_payload_is_its_text(
    kind: str,
    tool: str,
    args: Any,
    reason: str,
    result: Any,
    message: str,
    origin: str,
    invalid: str | None,
) -> None:
    # Decision 0114: `step.decided`'s payload is written as the decision's recorded text,
    # which is what encoding the decision that text reads back as gives.
    given = Decision(
        kind=kind,
        tool=tool,
        args=args,
        reason=reason,
        result=result,
        message=message,
        origin=origin,
        invalid_args=invalid,
        invalid_result=invalid,
    )
    for decision in (given, given.to_json(), None):
        recorded = record(decision)
        assert to_text(recorded.decision.to_json()) == recorded.text
