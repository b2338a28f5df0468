"""The per-window sums of every tier (`tier_counts`), re-computed for the windows that received count records:
in Spark, or for a small run's records (audit/books/read/run_records.py) in the driver with pandas and `deltalake`."""

from __future__ import annotations

import logging
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.books.read.run_records import held_by_driver, of_kind
from audit.contract.arrow import arrow_table
from audit.contract.tables import AUDIT_RECORDS, TIER_COUNTS
from audit.io import delta_io
from audit.io.lake_read import read_arrow
from audit.io.spark import broadcast_when_small, local_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from audit.io.lake import Lake


log = logging.getLogger(__name__)

WINDOW_KEY = ("origin_cluster", "topic", "window_start")
WINDOW_DDL = "origin_cluster STRING, topic STRING, window_start TIMESTAMP"  # WINDOW_KEY's types
# What a re-sum reads of `audit_records`.
SUMMED = (*WINDOW_KEY, "date", "tier", "logical_topic", "window_minutes", "count", "bytes", "send_failed")
SUMMED += ("no_timestamp", "by_partition", "digest_by_partition", "latency_p99_ms", "latency_max_ms")
SUMMED += ("aborted", "unknown")
PARTITION_MAPS = ("by_partition", "digest_by_partition")  # summed per partition, the digests with wraparound


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
    lake: Lake,
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
        return _resummed_in_driver(spark, lake, new_records, background)
    if every_record:
        counts = of_kind(new_records, "count")
        windows, touched, named = delta_io.windows_of(counts), None, None
    else:
        keys, named, windows = _touched(new_records)
        touched = windows_frame(spark, keys)
        counts = (
            delta_io.in_windows(  # as literals: Delta reads only the files that can hold them
                delta_io.read_table(spark, lake, AUDIT_RECORDS.name), windows
            )
            .where(F.col("kind") == "count")
            .join(broadcast_when_small(touched, len(named)), [*WINDOW_KEY, "date"], "left_semi")
        )
    if not windows:
        return Resummed(windows_frame(spark, []), named, None)
    rows = _summed(counts)
    touched = touched if touched is not None else rows.select(*WINDOW_KEY, "date").distinct()
    write = partial(delta_io.replace_windows, spark, lake, TIER_COUNTS, rows, windows=windows)
    if background is None:
        write()
        return Resummed(touched, named, rows)
    return Resummed(touched, named, rows, background.submit(write))


def _resummed_in_driver(spark: SparkSession, lake: Lake, new_records, background: Executor | None) -> Resummed:
    """`update_tier_counts` of a small run: the touched windows' count records read by `deltalake`, summed in
    pandas (`summed_in_driver`) and their windows rewritten by `deltalake` (delta_io.replace_windows_from_driver).
    In Spark the same takes two queries and an overwrite, 3-5 s of planning for some thousands of rows."""
    _, named, windows = _touched(new_records)
    if not windows:
        return Resummed(None, named, None)
    topics = pa.array(sorted({topic for _, topic, _ in named}), pa.string())
    records = read_arrow(
        lake,
        AUDIT_RECORDS.name,
        columns=("kind", *SUMMED),
        filters=delta_io.window_filter(windows) & pc.field("topic").isin(topics) & (pc.field("kind") == "count"),
    )
    rows = summed_in_driver(records, named)
    stored = read_arrow(lake, TIER_COUNTS.name, filters=delta_io.window_filter(windows))  # all topics'
    write = partial(
        delta_io.replace_windows_from_driver,
        spark,
        lake,
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
    a Python function per window takes 1.4-1.7 s for 10,000 records."""
    keys = pd.DataFrame(list(windows), columns=list(WINDOW_KEY))
    keys["window_start"] = pd.to_datetime(keys["window_start"]).dt.tz_localize("UTC").astype("datetime64[us, UTC]")
    frame = counts.drop_columns(list(PARTITION_MAPS)).to_pandas()
    frame["window_start"] = frame["window_start"].astype("datetime64[us, UTC]")
    frame["row"] = np.arange(len(frame))
    frame = frame.merge(keys, on=list(WINDOW_KEY))  # the rows of `windows` only
    # Null in the records stored before transactions were counted: none aborted, none unknown.
    frame["aborted"] = frame["aborted"].fillna(0).astype(np.int64)
    frame["unknown"] = frame["unknown"].eq(True)
    grouped_by = [*WINDOW_KEY, "tier", "logical_topic"]
    frame["group"] = frame.groupby(grouped_by, sort=False, dropna=False).ngroup()
    group = frame.groupby("group", sort=True)
    sums = group[grouped_by].first()
    sums[["count", "bytes", "send_failed", "no_timestamp"]] = (
        group[["count", "bytes", "send_failed", "no_timestamp"]].sum(min_count=1).astype("Int64")
    )
    sums["window_minutes"] = group["window_minutes"].min()
    sums["aborted"] = group["aborted"].sum()
    sums["unknown"] = group["unknown"].any()
    sums["records"] = group.size()
    sums[["latency_p99_ms", "latency_max_ms"]] = group[["latency_p99_ms", "latency_max_ms"]].max()
    sums["updated_at"] = pd.Timestamp(datetime.now(UTC)).floor("us")
    sums["date"] = sums["window_start"].dt.date
    summed = arrow_table(TIER_COUNTS, sums.reset_index(drop=True))
    rows, groups = frame["row"].to_numpy(), frame["group"].to_numpy()
    for name in PARTITION_MAPS:
        maps = _summed_partition_maps(counts[name], rows, groups, len(sums), wrapping=name == "digest_by_partition")
        summed = summed.set_column(summed.schema.get_field_index(name), name, maps)
    return summed


def _summed_partition_maps(
    maps: pa.ChunkedArray, rows: np.ndarray, groups: np.ndarray, size: int, *, wrapping: bool = False
) -> pa.MapArray:
    """`summed_maps` per group: the key-wise sum of the partition maps of the records `rows` of `maps`, in the
    groups `groups` (0 to `size` - 1), null for a group where a record reported none. `wrapping`: summed modulo
    2**64 as signed 64-bit integers (`audit.contract.digest.merge`, `summed_digests`)."""
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
    if wrapping:  # unsigned sums wrap around modulo 2**64, and read as signed they are the digest
        entries["count"] = entries["count"].to_numpy().view(np.uint64)
    summed = entries.groupby(["group", "partition"], sort=True)["count"].sum()
    sums = summed.to_numpy().view(np.int64) if wrapping else summed.to_numpy()
    per_group = summed.groupby(level=0).size().reindex(range(size), fill_value=0).to_numpy()
    return pa.MapArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(per_group)]), pa.int32()),
        pa.array(summed.index.get_level_values("partition").to_numpy(), pa.int32()),
        pa.array(sums, pa.int64()),
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
            F.sum(F.coalesce("aborted", F.lit(0))).alias("aborted"),
            F.max(F.coalesce("unknown", F.lit(False))).alias("unknown"),
            F.count("*").alias("records"),
            F.count("by_partition").alias("with_partitions"),
            F.count("digest_by_partition").alias("with_digests"),
            F.max("latency_p99_ms").alias("latency_p99_ms"),
            F.max("latency_max_ms").alias("latency_max_ms"),
            F.collect_list("by_partition").alias("partition_maps"),
            F.collect_list("digest_by_partition").alias("digest_maps"),
        )
    )
    return (
        # Partition counts are only comparable when every record of the window reported them.
        sums.withColumn(
            "by_partition",
            F.when(F.col("with_partitions") == F.col("records"), summed_maps(F.col("partition_maps"))),
        )
        .withColumn(
            "digest_by_partition",
            F.when(F.col("with_digests") == F.col("records"), summed_digests(F.col("digest_maps"))),
        )
        .drop("partition_maps", "digest_maps", "with_partitions", "with_digests")
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


def summed_digests(maps: Column) -> Column:
    """The key-wise digest of an array of digest maps (partition -> digest): sums modulo 2**64 as signed BIGINTs,
    as `audit.contract.digest.merge` adds them; a single map as it is."""
    from pyspark.sql import functions as F

    def add(total: Column, digests: Column) -> Column:
        return F.map_zip_with(
            total, digests, lambda _key, a, b: wrapping_add(F.coalesce(a, F.lit(0)), F.coalesce(b, F.lit(0)))
        )

    empty = F.create_map().cast("MAP<INT, BIGINT>")
    return F.when(F.size(maps) == 1, maps[0]).otherwise(F.aggregate(maps, empty, add))


def wrapping_add(a: Column, b: Column) -> Column:
    """a + b modulo 2**64 as a signed BIGINT; in DECIMAL, so Spark's ANSI mode sees no overflow."""
    from pyspark.sql import functions as F

    half, modulus = (F.lit(Decimal(2**bits)).cast(_WIDE) for bits in (63, 64))
    total = a.cast(_WIDE) + b.cast(_WIDE)
    wrapped = F.when(total >= half, total - modulus).when(total < -half, total + modulus)
    return wrapped.otherwise(total).cast("bigint")


_WIDE = "DECIMAL(21,0)"  # holds any sum of two BIGINTs, and that sum plus or minus 2**64


def naive_utc(moment: datetime) -> datetime:
    """A TIMESTAMP as Arrow gives it (aware, UTC) in the form `collect` gives it (naive, the driver's zone: UTC)."""
    return moment.astimezone(UTC).replace(tzinfo=None)
