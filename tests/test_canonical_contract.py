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
