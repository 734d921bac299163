"""Time, duration and id formats as they are stored.

Timestamps are UTC ISO-8601 text with exactly six fractional digits and a `Z`
(`2026-11-30T02:42:14.123456Z`), so that text order is time order and a fake
clock gives byte-identical records. `''` means unset. Durations are stored as
integer nanoseconds. Ids are 32 lowercase hex characters from 16 random bytes.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]
IdFactory = Callable[[], str]

_NS_PER_US = 1000


def wall_clock() -> datetime:
    """The real time, timezone-aware UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """32 lowercase hex characters from 16 random bytes."""
    return secrets.token_hex(16)


# Exactly the stored shape, ASCII digits only: anything else is not a stored time.
_STORED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def format_time(value: datetime | None) -> str:
    """Stored form of a timestamp; naive datetimes are refused (they hide a zone)."""
    if value is None:
        return ""
    # isoformat, unlike strftime (several times slower, and "999" for year 999 on
    # glibc), always writes four year digits and, with the offset dropped, the Z form.
    # It is called on a plain datetime: a clock's subclass cannot change the text.
    kept = _FORMATTED.get(id(value))  # a step formats its `now` and the run's times
    if kept is not None and kept[0] is value:
        return kept[1]
    text = as_stored(value).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    if len(_FORMATTED) >= _FORMATTED_KEPT:
        _FORMATTED.clear()
    _FORMATTED[id(value)] = (value, text)
    return text


# The timestamps formatted lately, by identity (each kept alive by its entry, so its id is
# not reused meanwhile), and their texts: a datetime's fields never change, so the same
# object always formats the same. Emptied whole when full.
_FORMATTED: dict[int, tuple[datetime, str]] = {}
_FORMATTED_KEPT = 16


def as_stored(value: datetime) -> datetime:
    """What `parse_time(format_time(value))` gives, without the round trip through text.

    Always a plain `datetime` in `UTC` with `fold=0`: a clock may return a
    subclass, or `fold=1`, which `astimezone(UTC)` would hand back unchanged.
    """
    if value.__class__ is datetime and value.tzinfo is UTC and not value.fold:
        return value  # already the stored form (what a clock of agentrt's gives)
    # A tzinfo whose utcoffset() is None leaves the time naive too (Python's rule).
    if value.tzinfo is None or datetime.utcoffset(value) is None:
        raise ValueError("naive datetime: agentrt records timezone-aware UTC times only")
    u = datetime.astimezone(value, UTC)  # the stdlib's conversion, whatever the subclass says
    return datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, UTC)


def parse_time(text: str) -> datetime | None:
    """Inverse of `format_time`; `''` is None. Raises ValueError on anything else."""
    if text == "":
        return None
    parsed = _PARSED.get(text)  # a run's times are read back again and again
    if parsed is not None:
        return parsed
    if not text.endswith("Z"):
        raise ValueError(f"timestamp {text!r} is not UTC text ending in Z")
    if not _STORED.fullmatch(text):
        raise ValueError(
            f"timestamp {text!r} is not in the stored form YYYY-MM-DDTHH:MM:SS.ffffffZ"
        )
    # fromisoformat still refuses what is no date (Feb 30, hour 24, second 60).
    parsed = datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    if len(_PARSED) >= _PARSED_KEPT:
        _PARSED.clear()
    _PARSED[text] = parsed
    return parsed


# Texts parsed lately and what they gave (only valid ones, whose parse is a pure function
# of the text); emptied whole when full.
_PARSED: dict[str, datetime] = {}
_PARSED_KEPT = 512


def duration_to_ns(value: timedelta) -> int:
    """A timedelta as integer nanoseconds (exact: timedelta has microsecond resolution)."""
    return (value // timedelta(microseconds=1)) * _NS_PER_US


def ns_to_duration(value: int) -> timedelta:
    return timedelta(microseconds=value // _NS_PER_US)


def duration_to_ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)
