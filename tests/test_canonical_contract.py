"""The canonical encoder's edges, pinned by the mutation campaign (docs/mutation.md).

The approval hash and every stored payload go through this encoder; each test
here kills a mutant of `agentrt._canonical`'s encoding functions that the
tests in `test_canonical.py` let live.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from agentrt._canonical import canonical_json, to_text


@pytest.fixture
def smallest_int_limit() -> Iterator[None]:
    """The interpreter's int/str digit limit at its smallest (640): the encoder's own path."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize("power", [1, 2, 3])
def test_an_exact_power_of_ten_to_the_640_encodes_whole_under_the_smallest_int_limit(
    smallest_int_limit: None, power: int
) -> None:
    # Each 640-digit chunk of 10**(640*power) is all zeros and the top one is
    # exactly 1: the chunking must go on while what is left equals a chunk's base.
    value = 10 ** (640 * power)
    expected = b"1" + b"0" * (640 * power)
    assert canonical_json(value) == expected
    assert canonical_json(-value) == b"-" + expected
    assert to_text({"n": value}) == '{"n":' + expected.decode() + "}"


@pytest.mark.parametrize("limit", [0, 640, 4_300, 5_000, 9_000, 9_999, 10_000, 10_001])
def test_an_int_longer_than_the_literal_limit_is_refused_whatever_the_int_limit(
    limit: int,
) -> None:
    """`-10**9999` is 10,000 digits and 10,001 characters: one over the literal limit,
    however many digits the interpreter would convert (0 means no limit). Python 3.12 and
    later convert `10**10_000` under a limit of 9,999: the C encoder's text is not trusted
    then."""
    from agentrt._errors import JSONValueError

    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        with pytest.raises(JSONValueError, match="integer of more than 10000 characters"):
            canonical_json(-(10**9_999))
        with pytest.raises(JSONValueError, match="integer of more than 10000 characters"):
            to_text([10**10_000])
        assert canonical_json(10**9_999) == b"1" + b"0" * 9_999  # 10,000 characters: usable
    finally:
        sys.set_int_max_str_digits(saved)


class _Text(str):
    """A str subclass: the C encoder's fast path does not take it, the slow path does."""


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("leaf", ["a", _Text("a")], ids=["fast path", "slow path"])
def test_the_stored_nesting_limit_is_the_same_on_the_fast_and_the_slow_path(leaf: str) -> None:
    from agentrt._canonical import MAX_STORED_DEPTH
    from agentrt._errors import JSONValueError

    deepest = _nested(MAX_STORED_DEPTH, leaf)
    assert to_text(deepest) == "[" * MAX_STORED_DEPTH + '"a"' + "]" * MAX_STORED_DEPTH
    with pytest.raises(JSONValueError, match=f"nesting deeper than {MAX_STORED_DEPTH}"):
        to_text(_nested(MAX_STORED_DEPTH + 1, leaf))
