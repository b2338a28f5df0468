"""Window assignment: aligned, UTC, sizes that divide a day."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.windows import (
    is_aligned,
    to_datetime,
    to_ms,
    validate_window_minutes,
    window_end,
    window_start,
)

DIVISORS = [m for m in range(1, 1441) if 1440 % m == 0]
timestamps = st.integers(min_value=0, max_value=4_102_444_800_000)


@given(timestamps, st.sampled_from(DIVISORS))
def test_a_timestamp_falls_in_exactly_one_aligned_window(ts, minutes):
    start = window_start(ts, minutes)
    assert start <= ts < window_end(start, minutes)
    assert is_aligned(start, minutes)
    assert window_start(start, minutes) == start


@given(timestamps, st.sampled_from(DIVISORS))
def test_windows_align_to_utc_midnight(ts, minutes):
    start = to_datetime(window_start(ts, minutes))
    since_midnight = start - start.replace(hour=0, minute=0, second=0, microsecond=0)
    assert since_midnight.total_seconds() % (minutes * 60) == 0


@given(timestamps)
def test_milliseconds_survive_the_trip_through_datetime(ts):
    assert to_ms(to_datetime(ts)) == ts


@pytest.mark.parametrize(
    ("ts", "minutes", "start"),
    [
        (0, 10, 0),
        (599_999, 10, 0),
        (600_000, 10, 600_000),
        (to_ms(datetime(2026, 11, 22, 13, 59, 59, tzinfo=UTC)), 10, to_ms(datetime(2026, 11, 22, 13, 50, tzinfo=UTC))),
        (to_ms(datetime(2026, 11, 22, 13, 59, 59, tzinfo=UTC)), 1440, to_ms(datetime(2026, 11, 22, tzinfo=UTC))),
    ],
)
def test_window_start_table(ts, minutes, start):
    assert window_start(ts, minutes) == start


@pytest.mark.parametrize(
    ("minutes", "reason"),
    [
        (7, "7 does not divide a day"),
        (0, "0 is not between 1 and 1440"),
        (2880, "2880 is not between"),
        (-10, "-10 is not between"),
        (10.0, "10.0 is not a whole number"),
        (True, "True is not a whole number"),
        ("10", "'10' is not a whole number"),
    ],
)
def test_bad_window_sizes_are_named(minutes, reason):
    assert reason in validate_window_minutes(minutes)


@pytest.mark.parametrize("minutes", DIVISORS)
def test_every_divisor_of_a_day_is_accepted(minutes):
    assert validate_window_minutes(minutes) is None


def test_a_time_before_the_epoch_is_in_a_window_before_it():
    """Floor division, as every implementation does (tests/contract_cases.py); no audit time is ever before
    the epoch (audit.contract.audit_time), so no record names such a window."""
    assert window_start(-1, 10) == -600_000
    assert not is_aligned(-600_000, 10)


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="no time zone"):
        to_ms(datetime(2026, 1, 1))
