"""What the pages show, computed from the Delta tables: cached reads and pure frame transforms.

`LakeCache` rereads a table when its Delta version changed and at most every `refresh_s` seconds, and
keeps only the last `days` days of partitioned tables. Everything else here is a pure function of
DataFrames (or pyarrow Tables), tested without a server.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.alerts.loss_partitions import describe, partition_losses
from audit.contract.completeness import STATUSES_BY_SEVERITY
from audit.contract.flows import is_placeholder, silent_cause
from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.naming import data_topic_rows
from audit.contract.watermarks import FIRST_REAL_WATERMARK as CONTRACT_FIRST_REAL_WATERMARK
from audit.io.lake import Lake
from audit.io.lake_read import read_arrow, table_version

# Worse last, as the books rank them: the counts balance in a mismatch, but its content differs, which may be a
# loss hidden by a duplicate.
STATUS_RANK = {status: rank for rank, status in enumerate(STATUSES_BY_SEVERITY, start=1)}
RANK_STATUS = {rank: status for status, rank in STATUS_RANK.items()}
RANGES = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "3d": timedelta(days=3),
    "7d": timedelta(days=7),
}
DEFAULT_RANGE = "24h"
HEATMAP_TOPICS = 25

# Columns each view needs: reading fewer columns is most of the speed.
OVERVIEW_COLUMNS = [
    "logical_topic",
    "window_start",
    "tier",
    "reference_tier",
    "status",
    "completeness_pct",
    "missing",
    "duplicated",
    "final",
]
NO_WATERMARK = "no watermark yet"
# A status with no positions leaves a watermark at (or near) the epoch: not a time, "not reported yet".
FIRST_REAL_WATERMARK = pd.Timestamp(CONTRACT_FIRST_REAL_WATERMARK)


def data_topics(rows: pd.DataFrame, settings: object) -> pd.DataFrame:
    """`rows` without those about the audit topic or a replicated copy of it (`dc1._audit`): never a data topic."""
    return data_topic_rows(rows, getattr(settings, "audit_topic", DEFAULT_AUDIT_TOPIC))


# Snapshots (and values derived from them) a LakeCache keeps at most: every (table, columns) the pages read,
# with room to spare; a caller asking for more evicts the least recently used.
MAX_CACHED = 64


class LakeCache:
    """Cached pyarrow snapshots of the tables of `lake`.

    Bounded whatever the lake's age and the pages asked: `_entries` and `_derived` hold at most MAX_CACHED
    snapshots and derived values each (least recently used out first), a snapshot of a partitioned table only its
    last `days` + 1 days, and a derived value only that of its table's current snapshot."""

    def __init__(self, lake: Lake, *, refresh_s: float, days: int, clock: Callable[[], float] = time.monotonic):
        self.lake, self.refresh_s, self.days, self.clock = lake, refresh_s, days, clock
        self._entries: OrderedDict[tuple, tuple[float, int | None, pa.Table]] = OrderedDict()
        self._derived: OrderedDict[tuple, tuple[pa.Table, object]] = OrderedDict()
        self._lock = threading.Lock()

    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        key = (name, tuple(columns or ()))
        now = self.clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry and now - entry[0] < self.refresh_s:
                self._entries.move_to_end(key)
                return entry[2]
        version = table_version(self.lake, name)
        if entry and entry[1] == version and version is not None:
            data = entry[2]
        else:
            since = (datetime.now(UTC) - timedelta(days=self.days + 1)).date()
            data = read_arrow(self.lake, name, columns=columns, since=since)
        with self._lock:
            _keep(self._entries, key, (now, version, data))
        return data

    def frame(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        return self.table(name, columns).to_pandas()

    def derived(self, name: str, columns: list[str] | None, compute: Callable[[pa.Table], object]):
        """`compute(table)` of the current snapshot, computed once per snapshot (so once per new version)."""
        snapshot = self.table(name, columns)
        key = (name, tuple(columns or ()), getattr(compute, "__qualname__", repr(compute)))
        with self._lock:
            cached = self._derived.get(key)
            if cached and cached[0] is snapshot:
                self._derived.move_to_end(key)
                return cached[1]
        value = compute(snapshot)
        with self._lock:
            _keep(self._derived, key, (snapshot, value))
        return value


def _keep(cache: OrderedDict, key: tuple, value: tuple) -> None:
    """`cache[key] = value` as its most recently used entry, the least recently used out beyond MAX_CACHED."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > MAX_CACHED:
        cache.popitem(last=False)


@dataclass(frozen=True)
class TimeRange:
    start: pd.Timestamp
    end: pd.Timestamp


def time_range(latest: pd.Timestamp | None, range_key: str | None, end: str | None = None) -> TimeRange:
    """The window range shown: `range_key` back from `end` (ISO), else from the newest window in the data."""
    span = RANGES.get(range_key or DEFAULT_RANGE, RANGES[DEFAULT_RANGE])
    anchor = parse_time(end) if end else latest
    if anchor is None or pd.isna(anchor):
        anchor = pd.Timestamp(datetime.now(UTC))
    anchor = pd.Timestamp(anchor)
    return TimeRange(start=anchor - span, end=anchor + pd.Timedelta(seconds=1))


def parse_time(text: str | None) -> pd.Timestamp | None:
    if not text:
        return None
    try:
        moment = pd.Timestamp(text)
    except ValueError:
        return None
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")


def latest_window(completeness: pa.Table) -> pd.Timestamp | None:
    if not completeness.num_rows:
        return None
    value = pc.max(completeness.column("window_start")).as_py()
    return None if value is None else pd.Timestamp(value)


CELL_COLUMNS = [
    "logical_topic",
    "window_start",
    "rank",
    "status",
    "completeness_pct",
    "missing",
    "duplicated",
    "final",
]


def all_cells(completeness: pa.Table) -> pd.DataFrame:
    """Worst status and lowest completeness per (topic, window) over the non-reference tiers, every window;
    `final` when every one of those tiers is final for it.

    Computed once per table snapshot (LakeCache.derived); `logical_topic` is categorical, for fast grouping.
    """
    table = completeness
    if not table.num_rows:
        return pd.DataFrame(columns=CELL_COLUMNS)
    table = table.filter(pc.not_equal(table["tier"], table["reference_tier"]))
    ranks = pc.coalesce(pc.index_in(table["status"], value_set=pa.array(list(STATUS_RANK))), -1)
    table = pa.table(
        {
            "logical_topic": table["logical_topic"],
            "window_start": table["window_start"],
            "rank": pc.add(ranks, 1),
            "completeness_pct": table["completeness_pct"],
            "missing": table["missing"],
            "duplicated": table["duplicated"],
            "final": pc.fill_null(table["final"], False),
        }
    )
    grouped = table.group_by(["logical_topic", "window_start"], use_threads=True).aggregate(
        [("rank", "max"), ("completeness_pct", "min"), ("missing", "max"), ("duplicated", "max"), ("final", "all")]
    )
    frame = grouped.to_pandas().rename(
        columns={
            "rank_max": "rank",
            "completeness_pct_min": "completeness_pct",
            "missing_max": "missing",
            "duplicated_max": "duplicated",
            "final_all": "final",
        }
    )
    frame["logical_topic"] = frame["logical_topic"].astype("category")
    frame["status"] = frame["rank"].map(RANK_STATUS)
    return frame[CELL_COLUMNS]


def filter_cells(cells: pd.DataFrame, window: TimeRange, search: str | None = None) -> pd.DataFrame:
    """The cells in the range whose topic contains `search` (case-insensitive)."""
    if cells.empty:
        return cells
    mask = (cells["window_start"] >= window.start) & (cells["window_start"] < window.end)
    if search:
        topics = pd.Series(
            cells["logical_topic"].cat.categories
            if hasattr(cells["logical_topic"], "cat")
            else cells["logical_topic"].unique()
        )
        wanted = topics[topics.str.contains(search.strip(), case=False, regex=False)]
        mask &= cells["logical_topic"].isin(wanted)
    return cells[mask]


def overview_cells(completeness: pa.Table, window: TimeRange, search: str | None = None) -> pd.DataFrame:
    """Worst status per (topic, window) over the non-reference tiers, in the range, matching the search."""
    return filter_cells(all_cells(completeness), window, search)


def worst_topics(cells: pd.DataFrame, limit: int = HEATMAP_TOPICS) -> pd.DataFrame:
    """Topics ordered worst first: most incomplete windows, then mismatch, then over, then the lowest completeness.

    Only final windows count: missing and the worst % of a window still in flight (not final for every
    tier) are not a verdict, so those windows are only counted apart, as `in_flight`."""
    columns = ["logical_topic", "incomplete", "mismatch", "over", "missing", "worst_pct", "in_flight", "latest_status"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    final = cells["final"].fillna(False).astype(bool)
    judged = cells.assign(
        incomplete=(cells["status"] == "incomplete") & final,
        mismatch=(cells["status"] == "mismatch") & final,
        over=(cells["status"] == "over") & final,
        missing=cells["missing"].where(final, 0),
        worst_pct=cells["completeness_pct"].where(final),
        in_flight=~final,
    )
    summary = judged.groupby("logical_topic", observed=True).agg(
        incomplete=("incomplete", "sum"),
        mismatch=("mismatch", "sum"),
        over=("over", "sum"),
        missing=("missing", "sum"),
        worst_pct=("worst_pct", "min"),
        in_flight=("in_flight", "sum"),
    )
    summary["latest_status"] = (
        cells.sort_values("window_start").groupby("logical_topic", observed=True)["status"].last()
    )
    summary = summary.reset_index().sort_values(
        ["incomplete", "mismatch", "over", "worst_pct", "logical_topic"], ascending=[False, False, False, True, True]
    )
    return summary[columns].head(limit).reset_index(drop=True)


def fast_worst_topic_names(cells: pd.DataFrame, limit: int = HEATMAP_TOPICS) -> list[str]:
    """The `limit` worst topics by (incomplete, mismatch and over windows, lowest final pct): vectorized, for
    1,000s."""
    if cells.empty:
        return []
    flags = cells.assign(
        incomplete=(cells["rank"] == STATUS_RANK["incomplete"]).astype(int),
        mismatch=(cells["rank"] == STATUS_RANK["mismatch"]).astype(int),
        over=(cells["rank"] == STATUS_RANK["over"]).astype(int),
        final_pct=cells["completeness_pct"].where(cells["final"].fillna(False).astype(bool)),
    )
    summary = flags.groupby("logical_topic", sort=False, observed=True).agg(
        incomplete=("incomplete", "sum"), mismatch=("mismatch", "sum"), over=("over", "sum"), worst=("final_pct", "min")
    )
    summary = summary.sort_values(["incomplete", "mismatch", "over", "worst"], ascending=[False, False, False, True])
    return [str(name) for name in summary.index[:limit]]


def overview_data(
    completeness: pa.Table,
    tier_status: pd.DataFrame,
    *,
    range_key: str | None,
    search: str | None,
    end: str | None = None,
    limit: int = HEATMAP_TOPICS,
    cells: pd.DataFrame | None = None,
) -> dict:
    """Everything the overview page draws: heatmap cells of the worst topics, the worst list, tier health.

    `cells`: `all_cells(completeness)` when the caller has it cached.
    """
    window = time_range(latest_window(completeness), range_key, end)
    cells = filter_cells(all_cells(completeness) if cells is None else cells, window, search)
    names = fast_worst_topic_names(cells, limit)
    shown = cells[cells["logical_topic"].isin(names)].copy()
    shown["logical_topic"] = shown["logical_topic"].astype(str)
    return {
        "range": window,
        "cells": shown,
        "order": names,
        "worst": worst_topics(shown, limit),
        "health": tier_health(tier_status),
        "topics": int(cells["logical_topic"].nunique()),
    }


def tier_health(tier_status: pd.DataFrame, now: pd.Timestamp | None = None) -> pd.DataFrame:
    """Per tier: the oldest watermark over its topics (NO_WATERMARK while none has reported one), how far
    behind that is, total lag, stalled topics, the topics with no watermark yet, and the cause of those that
    declared flows expect and nothing has reached (`silent_cause`, the first and how many more)."""
    columns = ["tier", "watermark", "behind_min", "lag", "stalled", "topics", "without_watermark", "cause"]
    if tier_status.empty:
        return pd.DataFrame(columns=columns)
    now = now or tier_status["updated_at"].max()
    watermarks = pd.to_datetime(tier_status["watermark"], utc=True)
    known = with_causes(tier_status.assign(watermark=watermarks.where(watermarks >= FIRST_REAL_WATERMARK)))
    health = known.groupby("tier", sort=False).agg(
        watermark=("watermark", "min"),
        lag=("lag", "sum"),
        stalled=("stalled", "sum"),
        topics=("topic", "nunique"),
        without_watermark=("watermark", lambda w: int(w.isna().sum())),
        cause=("cause", _first_and_more),
    )
    health["behind_min"] = ((now - health["watermark"]) / pd.Timedelta(minutes=1)).round(1)
    health["stalled"] = health["stalled"].astype(int)
    health["watermark"] = [
        NO_WATERMARK if pd.isna(w) else w.strftime("%Y-%m-%d %H:%M:%S UTC") for w in health["watermark"]
    ]
    return health.reset_index()[columns]


def with_causes(tier_status: pd.DataFrame) -> pd.DataFrame:
    """`tier_status` rows with a `cause`: for the placeholder of a tier a declared flow expects and nothing has
    reached, what the LAG alert says of it (`silent_cause`); empty otherwise."""
    reporters = tier_status["reporters"] if "reporters" in tier_status else pd.Series(None, index=tier_status.index)
    causes = [
        silent_cause(tier, topic) if is_placeholder(who) else ""
        for tier, topic, who in zip(tier_status["tier"], tier_status["logical_topic"], reporters, strict=True)
    ]
    return tier_status.assign(cause=causes)


def _first_and_more(causes: pd.Series) -> str:
    found = [cause for cause in causes if cause]
    if len(found) > 1:
        return f"{found[0]} (and {len(found) - 1} more topics)"
    return found[0] if found else ""


def topic_rows(frame: pd.DataFrame, logical_topic: str | None, window: TimeRange) -> pd.DataFrame:
    """The rows of one topic in the range, sorted by window and tier (none when there is no topic)."""
    if frame.empty:
        return frame
    rows = frame[
        (frame["logical_topic"] == logical_topic)
        & (frame["window_start"] >= window.start)
        & (frame["window_start"] < window.end)
    ]
    sort = ["window_start", "tier_order"] if "tier_order" in rows else ["window_start", "tier"]
    return rows.sort_values(sort)


def with_partition_losses(rows: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Completeness `rows` with `missing_by_partition`: how many messages each partition a tier is short in
    lacks against the reference tier (`40 in partition 2, 5 in partition 0`), from the tier counts."""
    return rows.assign(
        missing_by_partition=[describe(partition_losses(counts, row)) for row in rows.itertuples(index=False)]
    )


def restated_changes(restatements: pd.DataFrame) -> pd.DataFrame:
    """Per restated (window, tier): its changes as text, oldest first (`incomplete -> complete, observed
    1,106 -> 1,111`), joined by `; `: what the topic page shows beside the window's verdict."""
    if restatements.empty:  # typed as the table is, so merging on window_start still works
        return restatements[["window_start", "tier"]].assign(restated=pd.Series(dtype=object))
    ordered = restatements.sort_values("restated_at")
    text = (
        ordered["before_status"]
        + " -> "
        + ordered["after_status"]
        + ", observed "
        + ordered["before_observed"].map("{:,}".format)
        + " -> "
        + ordered["after_observed"].map("{:,}".format)
    )
    changes = ordered.assign(restated=text).groupby(["window_start", "tier"], sort=True)["restated"].agg("; ".join)
    return changes.reset_index()


def status_history(records: pd.DataFrame, window: TimeRange, search: str | None = None) -> pd.DataFrame:
    """Status records in the range, with how far behind each watermark was when emitted (minutes)."""
    if records.empty:
        return records.assign(behind_min=pd.Series(dtype=float))
    rows = records[
        (records["kind"] == "status") & (records["emitted_at"] >= window.start) & (records["emitted_at"] < window.end)
    ]
    if search:
        rows = rows[rows["logical_topic"].str.contains(search, case=False, regex=False, na=False)]
    return rows.assign(behind_min=(rows["emitted_at"] - rows["watermark"]) / pd.Timedelta(minutes=1))
