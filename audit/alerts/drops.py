"""Traffic drops: a final window whose reference count fell far below what that time of day usually holds.

Completeness cannot see traffic that vanished before the first counting point: 100 % of nothing is still
100 %. So per logical topic, a window's reference count (the `expected` of its completeness rows; 0 when
nobody counted anything) is compared with the median of the same time of day over the previous
`history_days` days (a day with no rows counts as 0). Below `fraction` of that median, and the median
above 0 (the topic had traffic then), the window is a drop. A drop lasting several windows alerts once,
on its first window.

A window with rows is final when any of its tiers is (the tiers' watermarks include every tier
upstream, so the first one's is the highest); a window with no rows at all when the origin cluster's
own watermark for the topic has passed its end plus the grace period: its counter has seen everything
up to then, and counted nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from audit.alerts.rules import Alert

DROP = "drop"
TOPIC_KEY = ["origin_cluster", "topic"]
WINDOW = [*TOPIC_KEY, "window_start"]
# The completeness columns the rule reads (reading fewer is most of the speed over days of history).
COLUMNS = [*WINDOW, "window_minutes", "tier", "reference_tier", "expected", "final"]


@dataclass(frozen=True)
class DropRule:
    """A count is a drop when it is below `fraction` of the median of its history and that median is above 0."""

    fraction: float = 0.1
    history_days: int = 7

    def drops(self, counts: np.ndarray, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(drop?, usual) per row: `counts` one per row, `history` a row of earlier counts each (0: no traffic)."""
        history = np.asarray(history, dtype=np.float64).reshape(len(counts), -1)
        usual = np.median(history, axis=1) if history.shape[1] else np.zeros(len(counts))
        return (usual > 0) & (np.asarray(counts, dtype=np.float64) < self.fraction * usual), usual

    def is_drop(self, count: int, history: Sequence[int]) -> bool:
        return bool(self.drops(np.array([count]), np.array([list(history)]))[0][0])


def reference_windows(completeness: pd.DataFrame) -> pd.DataFrame:
    """Per (origin_cluster, topic, window_start): the reference tier, its count and whether the window is final."""
    if completeness.empty:
        return pd.DataFrame(columns=[*WINDOW, "window_minutes", "reference_tier", "expected", "final"])
    return (
        completeness.assign(final=completeness["final"].fillna(False).astype(bool))
        .groupby(WINDOW, as_index=False, sort=True)
        .agg(
            window_minutes=("window_minutes", "max"),
            reference_tier=("reference_tier", "first"),
            expected=("expected", "max"),
            final=("final", "any"),
        )
    )


def _candidates(windows: pd.DataFrame, *, since: pd.Timestamp, now: pd.Timestamp, days: int) -> pd.DataFrame:
    """The windows to judge: those with rows since `since`, and those a day of the history says should have
    had traffic (they may have no rows at all)."""
    day = pd.Timedelta(days=1)
    shifted = [windows[WINDOW].assign(window_start=windows["window_start"] + k * day) for k in range(1, days + 1)]
    every = pd.concat([windows[WINDOW], *shifted], ignore_index=True).drop_duplicates()
    return every[(every["window_start"] >= since) & (every["window_start"] < now)]


def _with_history(candidates: pd.DataFrame, windows: pd.DataFrame, days: int) -> pd.DataFrame:
    """Each candidate with its own row's figures (0 counted when it has none) and columns d1..d<days>: the
    reference count of the same time of day 1..days days before (0 when none)."""
    own = windows[[*WINDOW, "window_minutes", "reference_tier", "expected", "final"]]
    frame = candidates.merge(own, on=WINDOW, how="left", indicator="rows")
    frame["has_rows"] = frame.pop("rows") == "both"
    frame["expected"] = frame["expected"].fillna(0).astype("int64")
    # A window with no rows has the reference tier of its topic's other windows.
    topic_reference = windows.groupby(TOPIC_KEY)["reference_tier"].last().rename("topic_reference")
    frame = frame.merge(topic_reference, left_on=TOPIC_KEY, right_index=True, how="left")
    frame["reference_tier"] = frame["reference_tier"].fillna(frame.pop("topic_reference"))
    counts = windows[[*WINDOW, "expected"]]
    for k in range(1, days + 1):
        earlier = counts.assign(window_start=counts["window_start"] + pd.Timedelta(days=k))
        frame = frame.merge(earlier.rename(columns={"expected": f"d{k}"}), on=WINDOW, how="left")
    return frame


def _final_without_rows(
    frame: pd.DataFrame, tier_status: pd.DataFrame, *, window_minutes: int, grace_s: float
) -> pd.Series:
    """For windows nobody counted anything in: the origin cluster's own watermark passed end + grace."""
    if tier_status.empty:
        return pd.Series(False, index=frame.index)
    origin = tier_status[tier_status["tier"] == tier_status["origin_cluster"]][[*TOPIC_KEY, "watermark"]]
    watermark = frame[TOPIC_KEY].merge(origin, on=TOPIC_KEY, how="left")["watermark"].set_axis(frame.index)
    due = frame["window_start"] + pd.Timedelta(minutes=window_minutes) + pd.Timedelta(seconds=grace_s)
    return watermark.notna() & (watermark >= due)


def drop_alerts(
    completeness: pd.DataFrame,
    tier_status: pd.DataFrame,
    *,
    now: datetime,
    since: datetime,
    rule: DropRule,
    watched: Callable[[str], bool],
    window_minutes: int,
    grace_s: float,
) -> list[Alert]:
    """A `drop` alert per topic `watched` for the first final window of each drop starting since `since`.

    `completeness` must reach `rule.history_days` days before `since` (it holds the history); see the module
    doc for what is a drop and when a window is final.
    """
    windows = reference_windows(completeness)
    if windows.empty:
        return []
    windows = windows[(windows["origin_cluster"] + "." + windows["topic"]).map(watched)]
    size = pd.Timedelta(minutes=window_minutes)
    # From the window before `since`: a drop that began before it is not a new one.
    candidates = _candidates(windows, since=pd.Timestamp(since) - size, now=pd.Timestamp(now), days=rule.history_days)
    if candidates.empty:
        return []
    frame = _with_history(candidates, windows, rule.history_days)
    without_rows = _final_without_rows(frame, tier_status, window_minutes=window_minutes, grace_s=grace_s)
    frame["final"] = np.where(frame["has_rows"], frame["final"].eq(True), without_rows)
    history = frame[[f"d{k}" for k in range(1, rule.history_days + 1)]].fillna(0).to_numpy(dtype=np.float64)
    low, frame["usual"] = rule.drops(frame["expected"].to_numpy(), history)
    frame["drop"] = frame["final"] & low
    dropped = set(map(tuple, frame.loc[frame["drop"], WINDOW].itertuples(index=False)))
    alerts = []
    for row in frame[frame["drop"] & (frame["window_start"] >= pd.Timestamp(since))].itertuples(index=False):
        if (row.origin_cluster, row.topic, row.window_start - size) in dropped:
            continue
        alerts.append(_alert(row, rule))
    return alerts


def _alert(row, rule: DropRule) -> Alert:
    tier = row.reference_tier
    pct = 100.0 * row.expected / row.usual
    return Alert(
        kind=DROP,
        origin_cluster=row.origin_cluster,
        topic=row.topic,
        window_start=row.window_start,
        tier=tier,
        status=DROP,
        expected=round(row.usual),
        observed=int(row.expected),
        completeness_pct=pct,
        cause=(
            f"traffic dropped: {tier} counted {int(row.expected):,} in this window, {pct:.1f}% of the median "
            f"{row.usual:,.0f} at this time of day over the previous {rule.history_days} days "
            f"(alerts below {100 * rule.fraction:g}%)"
        ),
    )
