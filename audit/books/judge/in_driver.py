"""The judge step of a small run in the driver: the same verdicts, restatements and rewrite as the Spark form
(in_spark.py), computed by the contract's own pandas rules (`classify`, `restatements`) on the few
thousand rows a usual run judges.

In Spark a small run's judging is a dozen queries on a few thousand rows: each one's planning, not its data, is
the cost (the bench's increment: 7-8 s of 14-16 s in "completeness judged", "restatements" and "completeness
stored"). Here the windows and their counts are collected once each, the verdicts and the rows to rewrite are
computed in pandas, and `deltalake` reads the windows' stored rows and writes them again
(delta_io.replace_windows_from_driver). tests/audit/books/judge/test_judge_driver.py holds the two forms to the
same rows, and tests/audit/books/judge/test_restated_books.py runs both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.books.count.tier_counts import WINDOW_KEY
from audit.books.judge.restatements import KEY
from audit.contract.arrow import arrow_table
from audit.contract.completeness import LAGGING, PENDING, classify
from audit.contract.restatements import RESTATEMENT_COLUMNS, restatements
from audit.contract.tables import COMPLETENESS, RESTATEMENTS
from audit.contract.unknown_counts import window_references, with_unknown
from audit.contract.windows import MS_PER_MINUTE

PATH_COLUMNS = ("origin_cluster", "topic", "tier", "tier_order", "reference_tier", "tier_watermark_ms", "threshold_pct")


def judged_frame(
    windows: pa.Table, paths: Iterable[tuple], counts: pa.Table, *, minutes: int, now_ms: int, grace_ms: int
) -> pd.DataFrame:
    """`classify`'s verdict on each (window of `windows`, tier on its topic's path), as `completeness` columns
    and `window_end_ms`; `paths`: rows of `PATH_COLUMNS`; `counts`: the windows' `tier_counts` rows (at least
    WINDOW_KEY, tier, count, by_partition, digest_by_partition, latency_p99_ms, window_minutes, unknown).
    `judged_in_spark` (in_spark.py) in pandas: the same joins, defaults and casts, and the same rule of unknown
    counts (audit/contract/unknown_counts.py)."""
    path_frame = pd.DataFrame(list(paths), columns=list(PATH_COLUMNS))
    grid = windows.select(list(WINDOW_KEY)).to_pandas().merge(path_frame, on=["origin_cluster", "topic"])
    tier_counts = counts.to_pandas()
    references = tier_counts[[*WINDOW_KEY, "tier", "unknown"]]
    grid = grid.merge(
        references.rename(columns={"tier": "reference_tier", "unknown": "reference_unknown"}),
        on=[*WINDOW_KEY, "reference_tier"],
        how="left",
    )
    grid["reference_tier"] = window_references(grid)
    sides = [*WINDOW_KEY, "tier", "count", "by_partition", "digest_by_partition", "window_minutes", "unknown"]
    observed = tier_counts[[*sides, "latency_p99_ms"]].rename(
        columns={
            "count": "observed",
            "by_partition": "observed_by_partition",
            "digest_by_partition": "observed_digest_by_partition",
            "window_minutes": "tier_window_minutes",
            "unknown": "observed_unknown",
        }
    )
    expected = tier_counts[sides].rename(
        columns={
            "tier": "reference_tier",
            "count": "expected",
            "by_partition": "expected_by_partition",
            "digest_by_partition": "expected_digest_by_partition",
            "window_minutes": "reference_window_minutes",
            "unknown": "expected_unknown",
        }
    )
    rows = grid.merge(observed, on=[*WINDOW_KEY, "tier"], how="left").merge(
        expected, on=[*WINDOW_KEY, "reference_tier"], how="left"
    )
    rows["expected"] = rows["expected"].fillna(0).astype(np.int64)
    rows["observed"] = rows["observed"].fillna(0).astype(np.int64)
    rows["window_minutes"] = (
        rows["reference_window_minutes"].fillna(rows["tier_window_minutes"]).fillna(minutes).astype(np.int64)
    )
    start_ms = (rows["window_start"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    rows["window_end_ms"] = start_ms.astype(np.int64) + rows["window_minutes"] * MS_PER_MINUTE
    rows["tier_watermark_ms"] = rows["tier_watermark_ms"].astype("Float64").astype(np.float64)
    judged = with_unknown(classify(rows, now_ms=now_ms, grace_ms=grace_ms))
    judged["logical_topic"] = judged["origin_cluster"] + "." + judged["topic"]
    judged["window_end"] = pd.to_datetime(judged["window_end_ms"], unit="ms", utc=True)
    watermark = judged["tier_watermark_ms"]
    judged["tier_watermark"] = pd.to_datetime(watermark.where(watermark.notna()), unit="ms", utc=True)
    judged["tier_watermark_ms"] = watermark.astype("Int64")
    judged["updated_at"] = pd.Timestamp(datetime.now(UTC)).floor("us")
    judged["date"] = judged["window_start"].dt.date
    return judged[[*COMPLETENESS.column_names, "window_end_ms", "tier_watermark_ms"]]


def due_and_windows(judged: pd.DataFrame) -> tuple[set[tuple], int | None]:
    """The (date, window_start) pairs of `judged` rows, and the earliest end of a pending one's window."""
    windows = set(zip(judged["date"], _naive(judged["window_start"]), strict=True))
    pending = judged.loc[judged["status"] == PENDING, "window_end_ms"]
    return windows, (int(pending.min()) if len(pending) else None)


def left_open(judged: pd.DataFrame) -> set[tuple]:
    """The windows (WINDOW_KEY) of `judged` rows left open: not final, or pending or lagging."""
    open_rows = judged[~judged["final"] | judged["status"].isin([PENDING, LAGGING])]
    return set(zip(open_rows["origin_cluster"], open_rows["topic"], _naive(open_rows["window_start"]), strict=True))


def _naive(moments: pd.Series) -> list[datetime]:
    """UTC timestamps in the form `collect` gives them (naive, the driver's zone: UTC)."""
    return moments.dt.tz_convert(UTC).dt.tz_localize(None).to_numpy().astype("datetime64[us]").tolist()


def found_restatements(before: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """The contract's `restatements` of `judged` (new verdicts) against `before` (the `completeness` rows of
    their windows as stored), in RESTATEMENT_COLUMNS."""
    old = before[[*KEY, "final", "expected", "observed", "status", "updated_at"]]
    old = old.rename(columns={name: f"before_{name}" for name in old.columns if name not in KEY})
    new = judged[[*KEY, "logical_topic", "window_minutes", "reference_tier", "expected", "observed", "status", "final"]]
    new = new.rename(columns={name: f"after_{name}" for name in ("expected", "observed", "status", "final")})
    old["window_start"], new["window_start"] = _utc_micros(old["window_start"]), _utc_micros(new["window_start"])
    return restatements(new.merge(old, on=list(KEY)))[list(RESTATEMENT_COLUMNS)]


def restatement_rows(found: pd.DataFrame, count_records: pa.Table | None) -> pa.Table:
    """`found` restatements as `restatements` rows, each with the ids of the count records read for its window
    at its tier or its reference tier (`count_records`: WINDOW_KEY, tier, record_id; None: the run read none)."""
    ids: dict[tuple, set[str]] = defaultdict(set)
    if count_records is not None:
        starts = pc.cast(count_records.column("window_start").cast(pa.timestamp("us", tz="UTC")), pa.int64())
        columns = [count_records.column(c).to_pylist() for c in ("origin_cluster", "topic", "tier", "record_id")]
        for origin, topic, tier, record_id, start in zip(*columns, starts.to_pylist(), strict=True):
            ids[(origin, topic, start, tier)].add(record_id)
    rows = found.copy()
    rows["window_start"] = _utc_micros(rows["window_start"])
    keys = zip(
        rows["origin_cluster"],
        rows["topic"],
        rows["window_start"].astype("int64"),
        rows["tier"],
        rows["reference_tier"],
    )
    none: set[str] = set()
    rows["record_ids"] = [
        sorted(ids.get((origin, topic, start, tier), none) | ids.get((origin, topic, start, reference), none))
        for origin, topic, start, tier, reference in keys
    ]
    rows["restated_at"] = pd.Timestamp(datetime.now(UTC)).floor("us")
    rows["date"] = rows["window_start"].dt.date
    return arrow_table(RESTATEMENTS, rows[list(RESTATEMENTS.column_names)])


def _utc_micros(moments: pd.Series) -> pd.Series:
    """Timestamps as UTC microseconds, whatever zone and unit Arrow or pandas gave them: comparable keys."""
    return pd.to_datetime(moments, utc=True).astype("datetime64[us, UTC]")
