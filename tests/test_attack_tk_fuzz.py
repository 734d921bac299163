"""Attacks on `fuzz_args`: integer bounds the runtime accepts but the generator mishandles."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt.testkit import fuzz_args


def _one_integer(**bounds: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"n": {"type": "integer", **bounds}},
        "required": ["n"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    "schema",
    [
        # An id-sized exact range: the only valid value is 2**53 + 1.
        _one_integer(minimum=2**53 + 1, maximum=2**53 + 1),
        # A bound too large for a float: the runtime accepts the schema.
        _one_integer(minimum=0, maximum=10**400),
    ],
    ids=["bound-past-2**53", "bound-past-float-range"],
)
def test_integer_bounds_are_not_rounded_through_float(schema: dict[str, Any]) -> None:
    """A tool's schema bounds an integer beyond what a float holds exactly (an id, an amount
    in micros): today `_bounds` converts the bounds to float, so the generator never builds
    a valid value for the first (every "valid" value is 2**53, off by one) and raises a raw
    OverflowError for the second. Valid values should be built, as the docstring promises."""
    cases = fuzz_args(schema, n=20, seed=0, invalid_ratio=0.0)
    assert len(cases) == 20
    assert all(c.valid for c in cases), [(c.args, c.errors) for c in cases if not c.valid][:3]
