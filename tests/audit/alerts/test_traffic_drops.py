"""The traffic-drop rule, pure: the verdict on one count as a table and properties, then `drop_alerts` over
completeness frames built in memory (the same rule over real Delta tables and SMTP: test_alerts.py)."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.alerts.drops import DropRule, drop_alerts

NOW = datetime(2025, 3, 11, 12, 3, tzinfo=UTC)
SINCE = NOW - timedelta(hours=2)
RULE = DropRule(fraction=0.1, history_days=7)


@pytest.mark.parametrize(
    "count, history, expected, why",
    [
        (50, [1000] * 7, True, "5 % of the usual"),
        (99, [1000] * 7, True, "just under 10 %"),
        (100, [1000] * 7, False, "exactly 10 % is not below it"),
        (500, [1000] * 7, False, "half the usual is no drop"),
        (0, [1000] * 7, True, "traffic gone"),
        (0, [0] * 7, False, "no traffic then either"),
        (0, [1000, 1000, 1000, 0, 0, 0, 0], False, "the median of 3 days of traffic in 7 is 0"),
        (0, [1000, 1000, 1000, 1000, 0, 0, 0], True, "4 days of 7 had traffic: the median is 1000"),
        (50, [10, 20, 1000, 1000, 1000, 5000, 9000], True, "the median, not the mean: 1000"),
        (150, [10, 20, 30, 1000, 1000, 5000, 9000], False, "the median is 1000: 15 %"),
    ],
)
def test_the_verdict_on_one_window(count, history, expected, why):
    assert RULE.is_drop(count, history) is expected, why


histories = st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=28)
fractions = st.floats(min_value=0.001, max_value=1.0)


@given(count=st.integers(min_value=0, max_value=10**9), history=histories, fraction=fractions)
def test_a_drop_is_below_the_fraction_of_a_median_above_zero(count, history, fraction):
    usual = statistics.median(history)
    assert DropRule(fraction=fraction).is_drop(count, history) == (usual > 0 and count < fraction * usual)


@given(count=st.integers(min_value=0, max_value=10**9), history=histories, fraction=fractions)
def test_fewer_messages_are_never_less_of_a_drop(count, history, fraction):
    rule = DropRule(fraction=fraction)
    if rule.is_drop(count, history):
        assert all(rule.is_drop(lower, history) for lower in (0, count // 2, count - 1) if lower >= 0)


@given(count=st.integers(min_value=0, max_value=10**6), history=histories, factor=st.integers(1, 1000))
def test_the_verdict_does_not_depend_on_the_topic_s_volume(count, history, factor):
    assert RULE.is_drop(count, history) == RULE.is_drop(count * factor, [h * factor for h in history])


@given(history=histories, fraction=fractions)
def test_the_usual_level_is_never_a_drop_nor_is_any_count_without_traffic_then(history, fraction):
    rule = DropRule(fraction=fraction)
    assert not rule.is_drop(int(statistics.median(history)) + 1, history)
    assert not rule.is_drop(0, [0] * len(history))


# -- drop_alerts over completeness frames -------------------------------------------------------------


def completeness(levels: dict[str, dict[datetime, int]], *, final: bool = True) -> pd.DataFrame:
    """Completeness rows of two tiers (dc1, lake) per topic and window: `expected` is the window's level."""
    rows = [
        dict(
            origin_cluster="dc1",
            topic=topic,
            window_start=pd.Timestamp(start),
            window_minutes=10,
            tier=tier,
            reference_tier="producer",
            expected=count,
            final=final or tier == "dc1",
        )
        for topic, windows in levels.items()
        for start, count in windows.items()
        for tier in ("dc1", "lake")
    ]
    return pd.DataFrame(rows)


def history(level: int, *, window: datetime, days: int = 7) -> dict[datetime, int]:
    """The same time of day as `window` on each of the `days` days before it, at `level`."""
    return {window - timedelta(days=k): level for k in range(1, days + 1)}


def watermarks(**origin_watermarks: datetime) -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(tier="dc1", origin_cluster="dc1", topic=topic, watermark=pd.Timestamp(moment))
            for topic, moment in origin_watermarks.items()
        ],
        columns=["tier", "origin_cluster", "topic", "watermark"],
    )


def alerts_of(frame: pd.DataFrame, status: pd.DataFrame | None = None, *, watched=lambda _t: True):
    return drop_alerts(
        frame,
        watermarks() if status is None else status,
        now=NOW,
        since=SINCE,
        rule=RULE,
        watched=watched,
        window_minutes=10,
        grace_s=300,
    )


W = datetime(2025, 3, 11, 11, 0, tzinfo=UTC)  # a final window in the lookback


def test_a_window_at_5_percent_of_its_usual_level_is_one_drop_alert_at_the_reference_tier():
    [alert] = alerts_of(completeness({"orders": {**history(1000, window=W), W: 50}}))
    assert (alert.kind, alert.status, alert.topic, alert.tier, alert.window_start) == (
        "drop",
        "drop",
        "orders",
        "producer",
        pd.Timestamp(W),
    )
    assert (alert.expected, alert.observed, round(alert.completeness_pct, 1)) == (1000, 50, 5.0)
    assert alert.cause.startswith("traffic dropped: producer counted 50 in this window, 5.0% of the median 1,000")


@pytest.mark.parametrize(
    "levels, why",
    [
        ({"orders": {**history(1000, window=W), W: 500}}, "50 % is no drop"),
        ({"orders": {**history(0, window=W), W: 0, W + timedelta(minutes=10): 3}}, "no traffic then"),
        ({"orders": {W: 50}}, "no history at all"),
        ({"orders": {**history(1000, window=W, days=3), W: 50}}, "3 days of history: the median of 7 is 0"),
        ({"orders": {**history(1000, window=W - timedelta(minutes=10)), W: 50}}, "traffic at another time of day"),
    ],
)
def test_no_drop_alert(levels, why):
    assert alerts_of(completeness(levels)) == [], why


def test_a_topic_switched_off_gets_no_drop_alert():
    frame = completeness({"orders": {**history(1000, window=W), W: 50}, "clicks": {**history(1000, window=W), W: 5}})
    [alert] = alerts_of(frame, watched=lambda topic: topic != "dc1.clicks")
    assert alert.topic == "orders"


def test_a_window_not_final_yet_is_judged_later():
    frame = completeness({"orders": {**history(1000, window=W), W: 50}})
    frame.loc[frame["window_start"] == pd.Timestamp(W), "final"] = False
    assert alerts_of(frame) == []


def test_a_window_nobody_counted_anything_in_is_a_drop_once_the_origin_cluster_has_seen_past_it():
    frame = completeness({"orders": history(1000, window=W)})
    due = W + timedelta(minutes=10, seconds=300)
    assert alerts_of(frame, watermarks(orders=due - timedelta(seconds=1))) == []  # dc1 may still count some
    [alert] = alerts_of(frame, watermarks(orders=due))
    assert (alert.window_start, alert.observed, alert.expected, alert.tier) == (pd.Timestamp(W), 0, 1000, "producer")


def test_a_drop_lasting_several_windows_alerts_on_its_first_window_only():
    windows = [W + timedelta(minutes=10 * i) for i in range(4)]
    levels = {start: level for w in windows for start, level in history(1000, window=w).items()}
    levels |= {windows[0]: 800, windows[1]: 10, windows[2]: 20, windows[3]: 900}
    [alert] = alerts_of(completeness({"orders": levels}))
    assert alert.window_start == pd.Timestamp(windows[1])


def test_a_drop_that_began_before_the_lookback_is_not_alerted_again():
    start = pd.Timestamp(SINCE).floor("10min").to_pydatetime()  # before SINCE; the next one is after it
    windows = [start, start + timedelta(minutes=10)]
    levels = {s: level for w in windows for s, level in history(1000, window=w).items()} | {w: 0 for w in windows}
    assert alerts_of(completeness({"orders": levels})) == []
    assert len(alerts_of(completeness({"orders": levels | {start: 1000}}))) == 1  # the first in the lookback
