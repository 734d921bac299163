"""Stored time formats: one exact shape, round-tripped, everything else refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt._clock import as_stored, duration_to_ns, format_time, ns_to_duration, parse_time


def test_format_is_utc_with_six_fraction_digits_and_z() -> None:
    assert format_time(datetime(2026, 11, 30, 2, 42, 14, 123456, tzinfo=UTC)) == (
        "2026-11-30T02:42:14.123456Z"
    )
    east = timezone(timedelta(hours=5))
    assert format_time(datetime(2026, 1, 1, tzinfo=east)) == "2025-12-31T19:00:00.000000Z"
    assert format_time(datetime(999, 1, 1, tzinfo=UTC)) == "0999-01-01T00:00:00.000000Z"
    assert format_time(None) == ""


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30T00:00:00.000000Z",  # no such day
        "2026-11-30T24:00:00.000000Z",
        "2026-11-30T00:00:60.000000Z",
        "2026-11-30T02:42:14Z",  # not the stored shape
        "2026-11-30T02:42:14.123456+00:00",
        "２026-11-30T02:42:14.123456Z",  # fullwidth digit
        "x",
    ],
)
def test_anything_but_the_stored_shape_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


def test_empty_text_is_unset() -> None:
    assert parse_time("") is None


@given(st.datetimes(timezones=st.just(UTC)))
def test_round_trip(value: datetime) -> None:
    text = format_time(value)
    assert parse_time(text) == value
    assert format_time(parse_time(text)) == text


@given(st.timedeltas(min_value=timedelta(0)))
def test_durations_round_trip_through_nanoseconds(value: timedelta) -> None:
    assert ns_to_duration(duration_to_ns(value)) == value


class AppTime(datetime):
    """A consumer clock's datetime type (pendulum, arrow and freezegun have such subclasses)."""


@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.one_of(st.timezones(), st.just(UTC), st.just(timezone(timedelta(hours=2)))),
    ),
    fold=st.sampled_from([0, 1]),
    subclass=st.booleans(),
)
def test_as_stored_is_the_round_trip_through_the_stored_text(
    moment: datetime, fold: int, subclass: bool
) -> None:
    moment = moment.replace(fold=fold)
    if subclass:
        moment = AppTime(*moment.timetuple()[:6], moment.microsecond, moment.tzinfo, fold=fold)
    stored = as_stored(moment)
    # repr: the same instant is not enough; the type, the zone and the fold must match too
    assert repr(stored) == repr(parse_time(format_time(moment)))
    assert type(stored) is datetime and stored.tzinfo is UTC and stored.fold == 0


def test_as_stored_refuses_a_naive_datetime_as_format_time_does() -> None:
    with pytest.raises(ValueError, match="naive"):
        as_stored(datetime(2026, 11, 30, 9, 0))


class Overriding(datetime):
    """A subclass whose own methods would write another time, or another shape."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "not a time"

    def astimezone(self, tz: tzinfo | None = None) -> datetime:
        return datetime(2000, 1, 1, tzinfo=UTC)


def test_a_clock_subclass_cannot_change_the_stored_time_or_its_shape() -> None:
    moment = Overriding(2026, 11, 30, 11, 0, 0, 123, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(moment) == "2026-11-30T09:00:00.000123Z"
    assert repr(as_stored(moment)) == repr(datetime(2026, 11, 30, 9, 0, 0, 123, tzinfo=UTC))


class NoOffset(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def test_a_zone_without_an_offset_is_naive_and_refused() -> None:
    moment = datetime(2026, 11, 30, 9, 0, tzinfo=NoOffset())
    for convert in (format_time, as_stored):
        with pytest.raises(ValueError, match="naive"):
            convert(moment)
