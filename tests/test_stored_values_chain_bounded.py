"""The parts a stored value names put back a bounded length in all (decision 0142).

Found by a review: decision 0142 bounded the text a stored value puts back, and each
part, but not what `unpacked` builds on the way: every distinct part is joined and kept
(`whole`), so a
chain of parts that each put back just under the bound builds the bound times the
chain's length. A hostile file of a few KB (genuine hashes: a doubling of a 1 KB leaf
up to half the bound, then N parts each wrapping the next in brackets) still makes a
read build N/2 times the bound (with the real 2^30: hundreds of GB for N in the
hundreds), the shape the decision says is refused before anything is joined.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping

import pytest

from agentrt._store.sqlite import _values
from agentrt._store.sqlite._values import MARK, Unresolved, digest, unpacked

BOUND = 2**20  # the bound lowered for the test, as tests/test_stored_values_bounded.py does


def fetcher(bodies: Mapping[str, str]) -> _values.Fetch:
    return lambda hashes: {h: bodies[h] for h in hashes if h in bodies}


def test_a_chain_of_parts_each_within_the_bound_is_not_built_whole_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_values, "MAX_UNPACKED", BOUND)
    bodies: dict[str, str] = {}
    value = "x" * 1024
    ref = digest(value)
    bodies[ref] = value
    while len(value) * 2 <= BOUND // 2:  # doubling: 2^19 characters put back
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
    tracemalloc.start()
    try:
        got = unpacked(MARK + ref, fetcher(bodies))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(got, Unresolved) or got == value
    # What a read may build is bounded by the bound (a few times it), not by the bound
    # times the number of parts a file names.
    assert peak < 8 * BOUND, f"{peak} bytes traced for a bound of {BOUND} characters"
