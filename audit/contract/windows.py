"""Window assignment: UTC, aligned, in epoch milliseconds.

Window sizes divide a day, so aligning to multiples of the size since the epoch also aligns every
window to UTC midnight.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DEFAULT_WINDOW_MINUTES = 10
MINUTES_PER_DAY = 1440
MS_PER_MINUTE = 60_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def validate_window_minutes(minutes: object) -> str | None:
    """The reason `minutes` is not a usable window size, or None."""
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        return f"{minutes!r} is not a whole number of minutes"
    if minutes <= 0 or minutes > MINUTES_PER_DAY:
        shown = str(minutes) if abs(minutes) < 10**12 else f"a {len(str(abs(minutes)))}-digit number"
        return f"{shown} is not between 1 and {MINUTES_PER_DAY}"
    if MINUTES_PER_DAY % minutes:
        return f"{minutes} does not divide a day ({MINUTES_PER_DAY} minutes) evenly"
    return None


def window_start_ms(ts_ms: int, window_ms: int) -> int:
    """Start of the `window_ms`-long window holding `ts_ms`: the last multiple of `window_ms` at or before it.

    The one statement of window alignment: floor division, so a time before the epoch is in a window that
    starts before it. The C loops and the lake's Spark column state it again; tests/contract_cases.py holds
    every one of them to this function."""
    return ts_ms - ts_ms % window_ms


def window_length_ms(window_minutes: int = DEFAULT_WINDOW_MINUTES) -> int:
    """Milliseconds in a window of `window_minutes`."""
    return window_minutes * MS_PER_MINUTE


def window_start(ts_ms: int, window_minutes: int = DEFAULT_WINDOW_MINUTES) -> int:
    """Start (epoch ms, UTC) of the window holding `ts_ms`."""
    return window_start_ms(ts_ms, window_length_ms(window_minutes))


def window_end(start_ms: int, window_minutes: int = DEFAULT_WINDOW_MINUTES) -> int:
    """First millisecond after the window that starts at `start_ms`."""
    return start_ms + window_length_ms(window_minutes)


def is_aligned(start_ms: int, window_minutes: int = DEFAULT_WINDOW_MINUTES) -> bool:
    return start_ms >= 0 and start_ms % window_length_ms(window_minutes) == 0


def to_datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def to_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone; audit times are UTC")
    return (moment - EPOCH) // timedelta(milliseconds=1)
