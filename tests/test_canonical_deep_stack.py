"""A usable value is encoded, checked, copied and parsed the same whatever the caller's
stack: the walkers recurse once per level (272 at most), and a caller already deep in
its own frames (a framework's call stack, a deep callback) must get the same bytes, not
a RecursionError (decision 0003: nothing deeper than 272 is written or read)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from agentrt._canonical import (
    MAX_DEPTH,
    MAX_STORED_DEPTH,
    canonical_json,
    check_json,
    content_hash,
    copy_json,
    from_text,
    json_problem,
    parse_json,
    policy_json,
    to_text,
)


def nested(depth: int, leaf: Any = "<&>\u2028") -> Any:
    value: Any = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


def with_frames_left(left: int, work: Callable[[], Any]) -> Any:
    """`work()` called with only about `left` frames left before the recursion limit."""
    here = len(_frames())
    target = sys.getrecursionlimit() - left

    def down(depth: int) -> Any:
        if depth >= target:
            return work()
        return down(depth + 1)

    return down(here + 1)


def _frames() -> list[Any]:
    frames = []
    frame = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return frames


USABLE = nested(MAX_DEPTH)
STORED = nested(MAX_STORED_DEPTH)
TEXT = canonical_json(USABLE)

CALLS: list[tuple[str, Callable[[], Any]]] = [
    ("canonical_json", lambda: canonical_json(STORED)),
    ("policy_json", lambda: policy_json(USABLE)),
    ("content_hash", lambda: content_hash(STORED)),
    ("to_text", lambda: to_text(STORED)),
    ("check_json", lambda: check_json(USABLE)),
    ("json_problem", lambda: json_problem(USABLE)),
    ("copy_json", lambda: copy_json(STORED)),
    ("parse_json", lambda: parse_json(TEXT)),
    ("from_text", lambda: from_text(to_text(STORED))),
    ("refusal", lambda: json_problem(nested(MAX_DEPTH + 1))),
]


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=[n for n, _ in CALLS])
def test_a_deep_usable_value_gives_the_same_answer_from_a_deep_caller(
    call: Callable[[], Any],
) -> None:
    expected = call()
    assert with_frames_left(60, call) == expected
