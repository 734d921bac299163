"""Types of the command line's option values: each parses one text or says why it cannot.

A number is written in plain ASCII digits (seconds may have one decimal point):
Python's `int()` and `float()` also read `1_0`, surrounding spaces, a sign,
other scripts' digits and `1e1`, and none of those is a value a person means to
type here. Integers are bounded (never above what SQLite can bind), a status is
one of `RunStatus` in any case, seconds are positive and at most `MAX_SECONDS`
(what a thread's wait can take); a bad value is
argparse's usage error (exit 2), with the value quoted.
"""

from __future__ import annotations

import argparse
import re
import threading
from collections.abc import Callable

from .._records import RunStatus

_MAX_INT64 = 2**63 - 1  # what SQLite can bind
_INTEGER = re.compile(r"(-?)([0-9]+)")  # a sign only to say that a negative is out of range
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
MAX_SECONDS = int(threading.TIMEOUT_MAX)
"""The longest wait a thread can be asked for (about 292 years): a number of seconds
above it would be taken, then fail at the first wait."""


def bounded(low: int, high: int | None) -> Callable[[str], int]:
    """An integer from `low` (0 or more) to `high` (at most what SQLite can bind)."""
    if low < 0:
        raise ValueError(f"bounded() takes a low of 0 or more, not {low}")
    top = _MAX_INT64 if high is None else min(high, _MAX_INT64)

    def parse(text: str) -> int:
        match = _INTEGER.fullmatch(text)
        if match is None:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
        digits = match[2].lstrip("0") or "0"
        # Compared as text first: int() refuses more than 4300 digits with a ValueError.
        too_long = len(digits) > len(str(top))
        value = 0 if too_long else int(digits)
        if match[1] or too_long or value < low or value > top:
            raise argparse.ArgumentTypeError(f"must be between {low} and {top}, got {_shown(text)}")
        return value

    return parse


def _shown(number: str) -> str:
    """A number as written, or how many characters it has when it is too long to show."""
    return number if len(number) <= 40 else f"a number of {len(number)} characters"


MAX_POSITIONS = 1024
"""The most seqs one `--after` may name: one per chain partition, and N is at most 1024."""


def after_seqs(text: str) -> tuple[int, ...]:
    """`SEQ`, or `SEQ,SEQ,...` (one per chain partition, as a hint prints it)."""
    parts = text.split(",")
    if len(parts) > MAX_POSITIONS:
        raise argparse.ArgumentTypeError(f"at most {MAX_POSITIONS} seqs, got {len(parts)}")
    seq = bounded(0, None)
    if len(parts) == 1:
        return (seq(text),)
    try:
        return tuple(seq(part) for part in parts)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"in {text!r}: {e}") from None


def status(text: str) -> str:
    try:
        return str(RunStatus(text.upper()))
    except ValueError:
        names = ", ".join(s.value for s in RunStatus)
        raise argparse.ArgumentTypeError(f"{text!r} is not a status ({names})") from None


def seconds(text: str) -> float:
    """A positive, finite number of seconds: digits, and perhaps a point and more digits."""
    negative = text.startswith("-") and _SECONDS.fullmatch(text[1:]) is not None
    if not negative and _SECONDS.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    value = float(text)  # of more than 308 digits: inf
    if negative or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, got {_shown(text)}"
        )
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_SECONDS} seconds (what a wait can take), got {_shown(text)}"
        )
    return value


__all__ = ["MAX_POSITIONS", "MAX_SECONDS", "after_seqs", "bounded", "seconds", "status"]
