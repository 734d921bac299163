"""Packing a JSON text into parts stored once, and putting them back (decision 0084).

The store's rows hold `pack(text)`; every read gives `unpacked(...)`. Whatever the
text, putting the parts back gives it exactly, character for character: JSON as
the runtime writes it, JSON with white space and escapes, and text that is not
JSON at all (kept as it is).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt._canonical import to_text
from agentrt._store.sqlite._values import MARK, Unresolved, pack, unpacked

LIMIT = 64  # small, so that generated values have parts


def round_trip(text: str, limit: int = LIMIT) -> tuple[str, dict[str, tuple[int, str]]]:
    held, parts = pack(text, limit)
    bodies = {h: body for h, (_, body) in parts.items()}
    back = unpacked(held, lambda hashes: {h: bodies[h] for h in hashes if h in bodies})
    assert not isinstance(back, Unresolved), back.why
    assert back == text
    for hash, (length, body) in parts.items():
        whole = unpacked(body, lambda hashes: {h: bodies[h] for h in hashes})
        assert hashlib.sha256(whole.encode()).hexdigest() == hash
        assert len(whole) == length
    return held, parts


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=120),
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=10), inner, max_size=8)
    ),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_as_the_runtime_writes_it_comes_back_exactly(value: Any) -> None:
    round_trip(to_text(value))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_with_white_space_and_ascii_escapes_comes_back_exactly(value: Any) -> None:
    round_trip(json.dumps(value, indent=1, ensure_ascii=True))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab"\\[]{}:, x\n', max_size=300))
def test_any_text_comes_back_exactly_json_or_not(text: str) -> None:
    round_trip(text, limit=8)


def test_a_large_string_is_one_part_and_the_text_refers_to_it() -> None:
    big = "x" * 300
    held, parts = round_trip(to_text({"args": {"body": big}, "tool": "write"}), limit=200)
    token = to_text(big)
    (hash,) = parts
    assert parts[hash] == (len(token), token)
    assert held == '{"args":{"body":' + MARK + hash + '},"tool":"write"}'


def test_the_same_part_in_two_texts_is_the_same_hash() -> None:
    big = {"rows": list(range(80))}
    _, decided = round_trip(to_text({"args": big, "kind": "tool_call"}), limit=200)
    _, started = round_trip(to_text({"args": big, "tool": "t"}), limit=200)
    assert set(decided) == set(started)


def test_a_container_of_small_parts_is_one_part_and_nests_a_large_one() -> None:
    text = to_text({"rows": [{"n": n} for n in range(20)] + ["y" * 100]})
    _, parts = round_trip(text)
    assert len(parts) >= 2
    assert any(MARK in body for _, body in parts.values())


def test_short_texts_and_texts_holding_the_mark_are_kept_as_they_are() -> None:
    assert pack('{"a":1}', LIMIT) == ('{"a":1}', {})
    odd = '{"a":"' + "z" * 100 + '"}' + MARK
    assert pack(odd, LIMIT) == (odd, {})


def test_escaped_quotes_and_backslashes_end_a_string_where_json_does() -> None:
    tricky = '\\"' * 30 + "\\\\" + '"inner"' + "\\\\"
    round_trip(to_text({"s": tricky, "t": ["\\" * 70, '"' * 70]}))


def test_a_missing_or_changed_part_is_unresolved_saying_which() -> None:
    held, parts = pack(to_text({"body": "q" * 300}), 200)
    (hash,) = parts
    missing = unpacked(held, lambda hashes: {})
    assert isinstance(missing, Unresolved) and missing == held
    assert missing.why == f"refers to stored value {hash}, which is missing"
    changed = unpacked(held, lambda hashes: {hash: to_text("r" * 300)})
    assert isinstance(changed, Unresolved)
    assert changed.why == f"stored value {hash} does not match its hash"
    looping = unpacked(held, lambda hashes: {hash: "[" + MARK + hash + "]"})
    assert isinstance(looping, Unresolved)
    bad = unpacked('{"a":' + MARK + "not-a-hash}", lambda hashes: {})
    assert isinstance(bad, Unresolved) and "malformed reference" in bad.why
    unreadable = unpacked(held, lambda hashes: {hash: b"\xff"})
    assert isinstance(unreadable, Unresolved) and "not readable text" in unreadable.why
