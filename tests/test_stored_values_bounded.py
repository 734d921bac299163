"""A stored value is put back to at most `MAX_UNPACKED` characters (decision 0142).

Found by an attack: a 240 KB file whose `stored_values` nest parts with genuine hashes
(1,000 x 1,000 x 3 copies of a 1 KB leaf) made `events` and `verify` build a 3 GB string
before any cap applied (a MemoryError traceback under a memory limit). The length a text
would put back is now counted from the bodies before anything is joined, and a text past
the bound reads as unresolved (the row's `decode_error`), in one line.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping

import pytest

from agentrt._errors import StoreError
from agentrt._store.sqlite import _values
from agentrt._store.sqlite._values import MARK, MAX_UNPACKED, Unresolved, digest, pack, unpacked


def fetcher(bodies: Mapping[str, str]) -> _values.Fetch:
    return lambda hashes: {h: bodies[h] for h in hashes if h in bodies}


def put_back_traced(text: str, bodies: Mapping[str, str]) -> tuple[str, int]:
    """`text` put back from `bodies`, and the most memory traced meanwhile (bytes)."""
    tracemalloc.start()
    try:
        got = unpacked(text, fetcher(bodies))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return got, peak


def test_parts_that_nest_past_the_bound_read_as_unresolved_without_being_built() -> None:
    leaf = "x" * 1000
    h0 = digest(leaf)
    level1 = (MARK + h0) * 1000  # puts back 1,000,000 characters
    h1 = digest(leaf * 1000)
    level2 = (MARK + h1) * 3000  # would put back 3,000,000,000
    h2 = "e" * 64  # never checked: the length refuses it first
    bodies = {h0: leaf, h1: level1, h2: level2}
    got, peak = put_back_traced(MARK + h2, bodies)
    assert isinstance(got, Unresolved)
    assert got.why == (
        f"stored value {h2} would put back 3000000000 characters, over {MAX_UNPACKED}"
    )
    assert peak < 20 * 2**20  # nothing of the 3 GB was built


def test_parts_that_nest_within_the_bound_are_put_back_exactly() -> None:
    leaf = "y" * 1000
    h0 = digest(leaf)
    level1 = (MARK + h0) * 50
    h1 = digest(leaf * 50)
    text = '["' + MARK + h1 + '", 1]'
    got = unpacked(text, fetcher({h0: leaf, h1: level1}))
    assert not isinstance(got, Unresolved)
    assert got == '["' + leaf * 50 + '", 1]'


def test_a_value_longer_than_the_bound_is_refused_when_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_values, "MAX_UNPACKED", 5_000)
    with pytest.raises(StoreError) as refused:
        pack('"' + "z" * 6_000 + '"')
    assert str(refused.value) == (
        "a value of 6002 characters is over the 5000 a store puts back; nothing was written"
    )
    text, parts = pack('"' + "z" * 4_000 + '"')  # within it: packed as before
    assert MARK in text and len(parts) == 1


def test_a_value_whose_parts_put_back_too_much_in_all_is_refused_when_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fourteen nested lists, each with a string of its own just under the inline limit:
    the text is within the bound, but its parts (each level a part, holding the next) put
    back more than four times it in all, which a read would refuse: refused when written."""
    monkeypatch.setattr(_values, "MAX_UNPACKED", 20_000)
    text = "null"
    for level in range(14):
        text = f'[{text},"{"b" * 1000}{level:02d}"]'
    assert len(text) <= 20_000
    with pytest.raises(StoreError) as refused:
        pack(text)
    assert " characters in all is over the 80000 a store puts back; nothing was written" in str(
        refused.value
    )


CHAIN_BOUND = 2**20  # the bound lowered for the test


def test_a_chain_of_parts_each_within_the_bound_is_not_built_whole_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chain of parts each putting back just under the bound, each wrapping the next (found
    by a review): a read builds a few times the bound, not the bound once per link."""
    monkeypatch.setattr(_values, "MAX_UNPACKED", CHAIN_BOUND)
    bodies: dict[str, str] = {}
    value = "x" * 1024
    ref = digest(value)
    bodies[ref] = value
    while len(value) * 2 <= CHAIN_BOUND // 2:  # doubling: 2^19 characters put back
        value = value * 2
        body = (MARK + ref) * 2
        ref = digest(value)
        bodies[ref] = body
    links = 64
    for _ in range(links):  # each wraps the next: just over 2^19 each, under the bound
        value = "[" + value + "]"
        body = "[" + MARK + ref + "]"
        ref = digest(value)
        bodies[ref] = body
    stored = sum(len(b) for b in bodies.values())
    assert stored < 10_000  # a few KB of file
    got, peak = put_back_traced(MARK + ref, bodies)
    assert isinstance(got, Unresolved) or got == value
    # What a read may build is bounded by the bound (a few times it), not by the bound
    # times the number of parts a file names.
    assert peak < 8 * CHAIN_BOUND, f"{peak} bytes traced for a bound of {CHAIN_BOUND} characters"
