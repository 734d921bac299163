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


__all__ = ["bounded", "seconds", "status"]
