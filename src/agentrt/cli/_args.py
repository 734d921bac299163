"""Types of the command line's option values: each parses one text or says why it cannot.

Integers are bounded (never above what SQLite can bind), a status is one of
`RunStatus` in any case, seconds are positive and finite; a bad value is
argparse's usage error (exit 2), with the value quoted.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .._records import RunStatus

_MAX_INT64 = 2**63 - 1  # what SQLite can bind


def bounded(low: int, high: int | None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        top = _MAX_INT64 if high is None else min(high, _MAX_INT64)
        if value < low or value > top:
            bound = f"between {low} and {top}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


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
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


__all__ = ["MAX_POSITIONS", "after_seqs", "bounded", "seconds", "status"]
