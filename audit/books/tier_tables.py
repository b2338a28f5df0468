"""The per-window sums of every tier (`tier_counts`) and where each tier stands (`tier_status`),
re-computed for the windows that received records."""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.books.run_records import held_by_driver, of_kind
from audit.contract.tables import (
    AUDIT_RECORDS,
    PARTITION_STATUS,
    TIER_COUNTS,
    TIER_POINTS,
    TIER_STATUS,
    arrow_table,
)
from audit.contract.watermark_points import KEPT_POINTS, WatermarkPoint, kept, replayed, reporter
from audit.contract.watermarks import tier_watermark
from audit.io import delta_io
from audit.io.lake import Lake, lake_of
from audit.io.lake_read import read_arrow
from audit.io.spark import broadcast_when_small, local_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from audit.settings import Settings


log = logging.getLogger(__name__)

# -- 3a. tier counts ---------------------------------------------------------------------------


WINDOW_KEY = ("origin_cluster", "topic", "window_start")
WINDOW_DDL = "origin_cluster STRING, topic STRING, window_start TIMESTAMP"  # WINDOW_KEY's types
STATUS_PAIR = TIER_STATUS.key  # (tier, origin_cluster, topic), also the key of _tier_points
# What a re-sum reads of `audit_records`.
SUMMED = (*WINDOW_KEY, "date", "tier", "logical_topic", "window_minutes", "count", "bytes", "send_failed")
SUMMED += ("no_timestamp", "by_partition", "latency_p99_ms", "latency_max_ms")


@dataclass(frozen=True)
class Resummed:
    """The (topic, window)s a run re-summed: as a frame (`WINDOW_KEY` and `date`; None for a small run's, see
    `windows_frame`), in the driver (None when not collected), and their `tier_counts` rows as written: by Spark
    (`counts`, checkpointed) or by the driver (`summed`, a pyarrow Table); both None when there were none."""

    windows: DataFrame | None
    keys: frozenset[tuple] | None
    counts: DataFrame | None
    stored: Future | None = None  # the write of the rows into tier_counts, when it runs in the background
    summed: pa.Table | None = None

    def windows_frame(self, spark: SparkSession) -> DataFrame:
        """`windows`, handed to Spark from `keys` when the driver re-summed them (only a Spark judging needs it)."""
        return self.windows if self.windows is not None else windows_frame(spark, list(self.keys or ()))

    def wait_stored(self) -> None:
        """Return once the re-summed rows are in `tier_counts`; raises the write's error."""
        if self.stored is not None:
            self.stored.result()


def update_tier_counts(
    spark: SparkSession,
    settings: Settings,
    new_records,
    *,
    background: Executor | None = None,
    every_record: bool = False,
) -> Resummed:
    """Re-sum every (topic, window) that received count records; with `background`, their rows are written
    there while the caller goes on (see `Resummed.wait_stored`). `every_record`: `new_records` are all the
    records `audit_records` holds (a first run, into a table that held none), so they are summed as they are,
    not read back from the table for the windows they touch. A small run's records (a pyarrow Table the
    driver holds) are summed and written in the driver (`_resummed_in_driver`)."""
    from pyspark.sql import functions as F

    if held_by_driver(new_records):
        return _resummed_in_driver(spark, settings, new_records, background)
    if every_record:
        counts = of_kind(new_records, "count")
        windows, touched, named = delta_io.windows_of(counts), None, None
    else:
        keys, named, windows = _touched(new_records)
        touched = windows_frame(spark, keys)
        counts = (
            delta_io.in_windows(  # as literals: Delta reads only the files that can hold them
                delta_io.read_table(spark, lake_of(settings), AUDIT_RECORDS.name), windows
            )
            .where(F.col("kind") == "count")
            .join(broadcast_when_small(touched, len(named)), [*WINDOW_KEY, "date"], "left_semi")
        )
    if not windows:
        return Resummed(windows_frame(spark, []), named, None)
    rows = _summed(counts)
    touched = touched if touched is not None else rows.select(*WINDOW_KEY, "date").distinct()
    write = partial(delta_io.replace_windows, spark, lake_of(settings), TIER_COUNTS, rows, windows=windows)
    if background is None:
        write()
        return Resummed(touched, named, rows)
    return Resummed(touched, named, rows, background.submit(write))


def _resummed_in_driver(spark: SparkSession, settings: Settings, new_records, background: Executor | None) -> Resummed:
    """`update_tier_counts` of a small run: the touched windows' count records read by `deltalake`, summed in
    pandas (`summed_in_driver`) and their windows rewritten by `deltalake` (delta_io.replace_windows_from_driver).
    In Spark the same took two queries and an overwrite, 3-5 s of planning for some thousands of rows."""
    _, named, windows = _touched(new_records)
    if not windows:
        return Resummed(None, named, None)
    topics = pa.array(sorted({topic for _, topic, _ in named}), pa.string())
    records = read_arrow(
        lake_of(settings),
        AUDIT_RECORDS.name,
        columns=("kind", *SUMMED),
        filters=delta_io.window_filter(windows) & pc.field("topic").isin(topics) & (pc.field("kind") == "count"),
    )
    rows = summed_in_driver(records, named)
    stored = read_arrow(lake_of(settings), TIER_COUNTS.name, filters=delta_io.window_filter(windows))  # all topics'
    write = partial(
        delta_io.replace_windows_from_driver,
        spark,
        lake_of(settings),
        TIER_COUNTS,
        rows,
        windows=windows,
        stored=stored,
    )
    if background is None:
        write()
        return Resummed(None, named, None, summed=rows)
    return Resummed(None, named, None, background.submit(write), summed=rows)


def summed_in_driver(counts: pa.Table, windows: frozenset[tuple]) -> pa.Table:
    """`_summed` in pandas: the `tier_counts` rows of the count records `counts` (`SUMMED` columns at least)
    that fall in `windows` (`WINDOW_KEY` tuples, window_start naive UTC). Vectorized, partition maps included:
    a Python function per window took 1.4-1.7 s for 10,000 records."""
    keys = pd.DataFrame(list(windows), columns=list(WINDOW_KEY))
    keys["window_start"] = pd.to_datetime(keys["window_start"]).dt.tz_localize("UTC").astype("datetime64[us, UTC]")
    frame = counts.drop_columns(["by_partition"]).to_pandas()
    frame["window_start"] = frame["window_start"].astype("datetime64[us, UTC]")
    frame["row"] = np.arange(len(frame))
    frame = frame.merge(keys, on=list(WINDOW_KEY))  # the rows of `windows` only
    grouped_by = [*WINDOW_KEY, "tier", "logical_topic"]
    frame["group"] = frame.groupby(grouped_by, sort=False, dropna=False).ngroup()
    group = frame.groupby("group", sort=True)
    sums = group[grouped_by].first()
    sums[["count", "bytes", "send_failed", "no_timestamp"]] = (
        group[["count", "bytes", "send_failed", "no_timestamp"]].sum(min_count=1).astype("Int64")
    )
    sums["window_minutes"] = group["window_minutes"].min()
    sums["records"] = group.size()
    sums[["latency_p99_ms", "latency_max_ms"]] = group[["latency_p99_ms", "latency_max_ms"]].max()
    sums["updated_at"] = pd.Timestamp(datetime.now(UTC)).floor("us")
    sums["date"] = sums["window_start"].dt.date
    summed = arrow_table(TIER_COUNTS, sums.reset_index(drop=True))
    maps = _summed_partition_maps(counts["by_partition"], frame["row"].to_numpy(), frame["group"].to_numpy(), len(sums))
    return summed.set_column(summed.schema.get_field_index("by_partition"), "by_partition", maps)


def _summed_partition_maps(maps: pa.ChunkedArray, rows: np.ndarray, groups: np.ndarray, size: int) -> pa.MapArray:
    """`summed_maps` per group: the key-wise sum of the partition maps of the records `rows` of `maps`, in the
    groups `groups` (0 to `size` - 1), null for a group where a record reported none."""
    taken = maps.combine_chunks().take(pa.array(rows))
    reported = pd.Series(taken.is_valid().to_numpy(zero_copy_only=False)).groupby(groups).all()
    reported = reported.reindex(range(size), fill_value=False).to_numpy()
    offsets = taken.offsets.to_numpy()
    entries = pd.DataFrame(
        {
            "group": np.repeat(groups, np.diff(offsets)),
            "partition": taken.keys.slice(offsets[0], offsets[-1] - offsets[0]).to_numpy(),
            "count": taken.items.slice(offsets[0], offsets[-1] - offsets[0]).fill_null(0).to_numpy(),
        }
    )
    entries = entries[reported[entries["group"].to_numpy()]]
    summed = entries.groupby(["group", "partition"], sort=True)["count"].sum()
    per_group = summed.groupby(level=0).size().reindex(range(size), fill_value=0).to_numpy()
    return pa.MapArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(per_group)]), pa.int32()),
        pa.array(summed.index.get_level_values("partition").to_numpy(), pa.int32()),
        pa.array(summed.to_numpy(), pa.int64()),
        mask=pa.array(~reported),
    )


def _touched(new_records):
    """The (topic, window)s that received count records: as an Arrow table (`WINDOW_KEY`), in the driver, and
    their (date, window_start)s; in one action."""
    counts = of_kind(new_records, "count")
    if held_by_driver(counts):
        keys = counts.select(list(WINDOW_KEY)).group_by(list(WINDOW_KEY)).aggregate([])
    else:
        keys = counts.select(*WINDOW_KEY).distinct().toArrow()
    named = frozenset(
        (origin, topic, naive_utc(start))
        for origin, topic, start in zip(*(keys.column(c).to_pylist() for c in WINDOW_KEY), strict=True)
    )
    return keys, named, {(start.date(), start) for _, _, start in named}


def windows_frame(spark: SparkSession, keys) -> DataFrame:
    """(topic, window)s (`WINDOW_KEY`: an Arrow table or tuples) as a frame Spark knows the size of, with `date`."""
    from pyspark.sql import functions as F

    return local_frame(spark, keys, WINDOW_DDL).withColumn("date", F.to_date("window_start"))


def _summed(counts):
    """`tier_counts` rows of the count records `counts`, computed once (checkpointed)."""
    from pyspark.sql import functions as F

    # One aggregation: logical_topic follows from the key, so it is grouped by, not taken `first` (a string
    # buffer that makes Spark sort every row), and the partition counts are summed from each window's maps
    # (most windows hold one record per tier), not exploded, grouped twice and joined back.
    sums = (
        counts.select(*SUMMED)
        .groupBy(*WINDOW_KEY, "tier", "logical_topic")
        .agg(
            F.min("window_minutes").alias("window_minutes"),
            F.sum("count").alias("count"),
            F.sum("bytes").alias("bytes"),
            F.sum("send_failed").alias("send_failed"),
            F.sum("no_timestamp").alias("no_timestamp"),
            F.count("*").alias("records"),
            F.count("by_partition").alias("with_partitions"),
            F.max("latency_p99_ms").alias("latency_p99_ms"),
            F.max("latency_max_ms").alias("latency_max_ms"),
            F.collect_list("by_partition").alias("partition_maps"),
        )
    )
    return (
        # Partition counts are only comparable when every record of the window reported them.
        sums.withColumn(
            "by_partition",
            F.when(F.col("with_partitions") == F.col("records"), summed_maps(F.col("partition_maps"))),
        )
        .drop("partition_maps")
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    ).localCheckpoint()


def summed_maps(maps: Column) -> Column:
    """The key-wise sum of an array of maps (partition -> count); a single map as it is."""
    from pyspark.sql import functions as F

    def add(total: Column, counts: Column) -> Column:
        return F.map_zip_with(total, counts, lambda _key, a, b: F.coalesce(a, F.lit(0)) + F.coalesce(b, F.lit(0)))

    empty = F.create_map().cast("MAP<INT, BIGINT>")
    return F.when(F.size(maps) == 1, maps[0]).otherwise(F.aggregate(maps, empty, add))


def naive_utc(moment: datetime) -> datetime:
    """A TIMESTAMP as Arrow gives it (aware, UTC) in the form `collect` gives it (naive, the driver's zone: UTC)."""
    return moment.astimezone(UTC).replace(tzinfo=None)


# -- 3b. tier status ---------------------------------------------------------------------------


def update_tier_status(spark: SparkSession, settings: Settings, new_records) -> None:
    """Keep each reporter partition's newest status, then sum them up per tier and logical topic: for the
    (tier, topic) pairs that received status records, the only ones whose sums can change. Each pair's
    statuses are replayed in the order they were emitted, and the tier's watermark after each moment kept
    (`_tier_points`, audit/contract/watermark_points.py).

    The tables are small (one row per reporter partition, per tier and topic) and Spark does not read them
    during a run, so they are kept in the driver and written by `deltalake` (delta_io.upsert_from_driver):
    Spark's MERGE took 1-2 s each, mostly its own bookkeeping."""

    statuses = of_kind(new_records, "status")
    if held_by_driver(statuses):
        recent = recent_statuses_in_driver(statuses).to_pylist()
    else:
        recent = _recent_partition_statuses(statuses).toArrow().to_pylist()
    if not recent:
        return
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    for row in recent:
        by_pair[tuple(row[c] for c in STATUS_PAIR)].append(row)
    states: dict[tuple, dict[tuple, dict]] = defaultdict(dict)
    for row in read_arrow(lake_of(settings), PARTITION_STATUS.name).to_pylist():
        pair = tuple(row[c] for c in STATUS_PAIR)
        if pair in by_pair:
            states[pair][reporter(row)] = row
    stored = stored_points(lake_of(settings))
    changed, points = [], []
    for pair, statuses in by_pair.items():
        state = states[pair]
        before = stored.get(pair, ())
        watermark = partial(tier_watermark, pair[0], settings.cluster_names)
        new_points, reporters = replayed(state, statuses, watermark, stored=before)
        changed += [state[key] for key in reporters]
        points.append({**dict(zip(STATUS_PAIR, pair, strict=True)), "points": kept(before, new_points)})
    delta_io.upsert_from_driver(lake_of(settings), PARTITION_STATUS, changed, ignore=(), update_when=NEWER_STATUS)
    now = datetime.now(UTC)
    partitions = [row for state in states.values() for row in state.values()]
    delta_io.upsert_from_driver(
        lake_of(settings), TIER_STATUS, tier_status_rows(partitions, settings.cluster_names, now)
    )
    delta_io.upsert_from_driver(lake_of(settings), TIER_POINTS, [_as_stored(row) for row in points], ignore=())


# `replayed`'s order of a reporter partition's statuses, for the stored newest one (deltalake's SQL).
NEWER_STATUS = 's."emitted_at" > t."emitted_at" OR (s."emitted_at" = t."emitted_at" AND s."record_id" > t."record_id")'


def stored_points(lake: Lake | str) -> dict[tuple, list[WatermarkPoint]]:
    """Every (tier, origin_cluster, topic)'s kept points (`_tier_points`), read column by column: 6,000 tiers'
    32 points each took 3.5 s through pyarrow's nested `to_pylist`, 0.3 s as tuples from the flat columns."""
    import pyarrow.compute as pc

    table = read_arrow(lake, TIER_POINTS.name).combine_chunks()
    pairs = zip(*(table.column(c).to_pylist() for c in STATUS_PAIR), strict=True)
    points = table.column("points").chunks[0] if table.num_rows else None
    if points is None:
        return {}
    flat = pc.list_flatten(points)
    every = list(map(WatermarkPoint._make, zip(*(flat.field(name).to_pylist() for name in WatermarkPoint._fields))))
    bounds = [offset - points.offsets[0].as_py() for offset in points.offsets.to_pylist()]
    return {pair: every[bounds[index] : bounds[index + 1]] for index, pair in enumerate(pairs)}


def _as_stored(row: dict) -> dict:
    return {**row, "points": [point._asdict() for point in row["points"]]}


def _recent_partition_statuses(statuses):
    """Up to `KEPT_POINTS` rows per reporter partition (the `_partition_status` key): the newest of `statuses`,
    exploded. Older ones would only make points older than those kept."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    exploded = (
        statuses.select(
            "tier",
            "cluster",
            "seen_topic",
            "service",
            "origin_cluster",
            "topic",
            "logical_topic",
            "stalled",
            "emitted_at",
            "record_id",
            F.explode("partitions").alias("p"),
        )
        .select("*", "p.*")
        .drop("p")
    )
    newest = Window.partitionBy(*PARTITION_STATUS.key).orderBy(F.col("emitted_at").desc(), F.col("record_id").desc())
    return (
        exploded.withColumn("rank", F.row_number().over(newest))
        .where(F.col("rank") <= KEPT_POINTS)
        .drop("rank")
        .withColumn(
            "partition_watermark",
            F.when(F.col("lag") == 0, F.col("emitted_at")).otherwise(
                F.coalesce("last_audit_time", F.timestamp_millis(F.lit(0)))
            ),
        )
    )


STATUS_COLUMNS = ("tier", "cluster", "seen_topic", "service", "origin_cluster", "topic", "logical_topic", "stalled")
STATUS_COLUMNS += ("emitted_at", "record_id")


def recent_statuses_in_driver(statuses: pa.Table) -> pa.Table:
    """`_recent_partition_statuses` of status records the driver holds (AUDIT_RECORDS columns, pyarrow)."""
    parents = pc.list_parent_indices(statuses["partitions"])
    partitions = pc.list_flatten(statuses["partitions"])
    exploded = statuses.select(list(STATUS_COLUMNS)).take(parents)
    for member in partitions.type:
        exploded = exploded.append_column(member.name, pc.struct_field(partitions, member.name))
    order = exploded.select([*PARTITION_STATUS.key, "emitted_at", "record_id"]).to_pandas()
    order["row"] = range(len(order))
    order = order.sort_values(["emitted_at", "record_id"], ascending=False, kind="stable")
    newest = order[order.groupby(list(PARTITION_STATUS.key), dropna=False).cumcount() < KEPT_POINTS]
    recent = exploded.take(pa.array(newest["row"].to_numpy()))
    caught_up = pc.fill_null(pc.equal(recent["lag"], 0), False)
    since_epoch = pc.fill_null(
        recent["last_audit_time"], pa.scalar(datetime.fromtimestamp(0, UTC), recent["emitted_at"].type)
    )
    return recent.append_column("partition_watermark", pc.if_else(caught_up, recent["emitted_at"], since_epoch))


def tier_status_rows(partitions: list[dict], cluster_names: tuple[str, ...], now: datetime) -> list[dict]:
    """`tier_status` rows (written at `now`) summed from `_partition_status` rows."""
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    for row in partitions:
        by_pair[tuple(row[c] for c in STATUS_PAIR)].append(row)
    return [_tier_status(pair, rows, cluster_names, now) for pair, rows in by_pair.items()]


def _tier_status(pair: tuple, rows: list[dict], cluster_names: tuple[str, ...], now: datetime) -> dict:
    lags = [row["lag"] for row in rows if row["lag"] is not None]
    stalls = [row["stalled"] for row in rows if row["stalled"] is not None]
    reporters = {
        f"{row['service']}@{row['cluster']}"
        for row in rows
        if row["service"] is not None and row["cluster"] is not None
    }
    return {
        **dict(zip(STATUS_PAIR, pair, strict=True)),
        "logical_topic": rows[0]["logical_topic"],
        "watermark": tier_watermark(pair[0], cluster_names, rows),
        "lag": sum(lags) if lags else None,
        "stalled": any(stalls) if stalls else None,
        "reporters": ", ".join(sorted(reporters)),
        "last_status_at": _highest(row["emitted_at"] for row in rows),
        "updated_at": now,
    }


def _highest(moments):
    return max((m for m in moments if m is not None), default=None)
