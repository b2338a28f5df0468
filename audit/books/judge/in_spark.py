"""The judge step in Spark, for a run of more than DRIVER_WINDOWS windows (a first run's hundreds of thousands):
the windows to judge, their tier counts, and `classify`'s verdicts in its Spark form (verdicts.py) on each
(window, tier on its topic's path). in_driver.py gives the same rows for a small run, as
tests/audit/books/judge/test_judge_driver.py holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.books.count.tier_counts import WINDOW_DDL, WINDOW_KEY, Resummed
from audit.books.judge.verdicts import classified
from audit.books.read.run_records import held_by_driver
from audit.contract.completeness import UNKNOWN
from audit.contract.tables import AUDIT_RECORDS, COMPLETENESS, TIER_COUNTS
from audit.contract.unknown_counts import CLEARED
from audit.contract.windows import MS_PER_MINUTE
from audit.io import delta_io
from audit.io.spark import broadcast_when_small, local_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.books.judge.open_books import OpenBooks
    from audit.io.lake import Lake

# What the judging reads of `tier_counts`.
JUDGED_COUNTS = (*WINDOW_KEY, "tier", "count", "by_partition", "digest_by_partition", "latency_p99_ms")
JUDGED_COUNTS += ("window_minutes", "unknown")

# What the judge step yields per (window, tier): `classify`'s verdict with times still in epoch ms.
JUDGED_COLUMNS = {
    "origin_cluster": "STRING",
    "topic": "STRING",
    "window_start": "TIMESTAMP",
    "window_minutes": "INT",
    "tier": "STRING",
    "tier_order": "INT",
    "reference_tier": "STRING",
    "expected": "BIGINT",
    "observed": "BIGINT",
    "missing": "BIGINT",
    "duplicated": "BIGINT",
    "mismatched_partitions": "ARRAY<INT>",
    "completeness_pct": "DOUBLE",
    "threshold_pct": "DOUBLE",
    "status": "STRING",
    "final": "BOOLEAN",
    "window_end_ms": "BIGINT",
    "tier_watermark_ms": "BIGINT",
    "latency_p99_ms": "DOUBLE",
}

# What `classified` takes of each (window, tier): the counts on both sides, the times and the threshold.
CLASSIFIED = (*WINDOW_KEY, "window_minutes", "tier", "tier_order", "reference_tier", "expected", "observed")
CLASSIFIED += ("expected_by_partition", "observed_by_partition", "window_end_ms", "tier_watermark_ms")
CLASSIFIED += ("expected_digest_by_partition", "observed_digest_by_partition")
CLASSIFIED += ("threshold_pct", "latency_p99_ms", "observed_unknown", "expected_unknown")


def is_open():
    """A `completeness` row whose window is judged again by every run: not final, or pending or lagging."""
    from pyspark.sql import functions as F

    return ~F.col("final") | F.col("status").isin("pending", "lagging")


def windows_to_judge(
    spark: SparkSession,
    lake: Lake,
    paths,
    resummed: Resummed | None,
    records,
    known: OpenBooks | None,
    grown: set | None,
    *,
    first_verdicts: bool,
):
    """The windows (`WINDOW_KEY`) a judge step finds with Spark: those re-summed and, unless these are the first
    verdicts (`completeness` holds no window yet), those judged again whether touched or not (`open_windows`)."""
    again = (
        local_frame(spark, [], WINDOW_DDL)
        if first_verdicts
        else open_windows(spark, lake, paths, records, known, grown)
    )
    touched = resummed.windows_frame(spark) if resummed is not None else local_frame(spark, [], WINDOW_DDL)
    return touched.select(*WINDOW_KEY).unionByName(again).distinct().localCheckpoint()  # read by two joins


def open_windows(spark: SparkSession, lake: Lake, paths, records, known: OpenBooks | None, grown: set | None):
    """The windows judged again whether touched or not: those `completeness` holds open, and those missing a
    tier of their path. From `known` when the session has it: a window can miss a tier only of a topic whose
    path grew since (`grown`), and only those topics' windows are read. Spark reads the table only then, as its
    first look at a version `deltalake` wrote costs it the log since its own last one."""
    from pyspark.sql import functions as F

    if known is not None and not grown:
        return local_frame(spark, list(known.windows), WINDOW_DDL)
    current = delta_io.read_table(spark, lake, COMPLETENESS.name)
    if known is None:
        held_open = current.where(is_open()).select(*WINDOW_KEY)
        return held_open.unionByName(_windows_missing_a_tier(current, paths, as_frame(spark, records)))
    held_open = local_frame(spark, list(known.windows), WINDOW_DDL)
    topics = local_frame(spark, list(grown), "origin_cluster STRING, topic STRING")
    return held_open.unionByName(_windows_missing_a_tier(current, paths, topics=F.broadcast(topics)))


def as_frame(spark: SparkSession, records):
    """The run's records as Spark reads them: a small run's (a pyarrow Table the driver holds) handed over."""
    return local_frame(spark, records, AUDIT_RECORDS.ddl()) if held_by_driver(records) else records


def counts_to_judge(
    spark: SparkSession,
    lake: Lake,
    windows,
    known: OpenBooks | None,
    grown: set | None,
    resummed: Resummed | None,
    *,
    first_verdicts: bool = False,
):
    """The tier counts (`JUDGED_COUNTS`) of `windows`: where the session knows every window to judge (no path
    grew), those it just re-summed, with the other open windows' counts read from the table; at the first
    verdicts (the windows to judge are those re-summed, no other), those re-summed alone, without waiting for
    their write. Else every window's counts are read from `tier_counts`, once this run's re-sums are stored."""
    from pyspark.sql import functions as F

    if resummed is not None and resummed.counts is not None:
        fresh = resummed.counts.select(*JUDGED_COUNTS)
        if first_verdicts:
            return fresh
        if known is not None and not grown and resummed.keys is not None:
            others = known.windows - resummed.keys
            if not others:
                return fresh
            held = local_frame(spark, list(others), WINDOW_DDL).withColumn("date", F.to_date("window_start"))
            return fresh.unionByName(stored_counts(spark, lake, held, resummed).select(*JUDGED_COUNTS))
    dated = windows.withColumn("date", F.to_date("window_start"))
    return stored_counts(spark, lake, dated, resummed)


def stored_counts(spark: SparkSession, lake: Lake, windows, resummed: Resummed | None):
    """The `tier_counts` rows of `windows` (`WINDOW_KEY` and `date`), once this run's re-sums are stored."""
    if resummed is not None:
        resummed.wait_stored()
    return delta_io.in_windows(delta_io.read_table(spark, lake, TIER_COUNTS.name), delta_io.windows_of(windows)).join(
        broadcast_when_small(windows), [*WINDOW_KEY, "date"], "left_semi"
    )


def judged_in_spark(windows, paths, counts, *, minutes: int, now_ms: int, grace_ms: int):
    """`classify`'s verdict on each (window, tier on its topic's path), as `completeness` rows; `counts`: the
    windows' tier counts (`JUDGED_COUNTS`, as `counts_to_judge` gives them); `minutes`: the window size of a
    window no tier counted."""
    from pyspark.sql import functions as F

    counts = counts.select(*JUDGED_COUNTS).localCheckpoint()  # read thrice (references, observed, expected)
    grid = _with_window_references(windows.join(F.broadcast(paths), ["origin_cluster", "topic"]), counts)
    judged = classified(_counted(grid, counts, minutes).select(*CLASSIFIED), now_ms=now_ms, grace_ms=grace_ms)
    judged = _with_unknown(judged)
    judged = judged.select(*(F.col(name).cast(kind).alias(name) for name, kind in JUDGED_COLUMNS.items()))
    return (
        judged.withColumn("logical_topic", F.concat_ws(".", "origin_cluster", "topic"))
        .withColumn("window_end", F.timestamp_millis("window_end_ms"))
        .withColumn("tier_watermark", F.timestamp_millis("tier_watermark_ms"))
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    )


def _with_window_references(grid, counts):
    """`grid` with each row's reference tier for its window: the origin cluster where the reference tier's counts
    of the window are unknown (`unknown_counts.window_references`)."""
    from pyspark.sql import functions as F

    unknown = counts.select(
        *WINDOW_KEY, F.col("tier").alias("reference_tier"), F.col("unknown").alias("reference_unknown")
    )
    fall_back = F.coalesce(F.col("reference_unknown"), F.lit(False))
    return (
        grid.join(unknown, [*WINDOW_KEY, "reference_tier"], "left")
        .withColumn("reference_tier", F.when(fall_back, F.col("origin_cluster")).otherwise(F.col("reference_tier")))
        .drop("reference_unknown")
    )


def _with_unknown(judged):
    """`unknown_counts.with_unknown`: the rows whose verdict rests on unknown counts, or that are their own
    reference, as status unknown with nothing missing or duplicated and no partition named."""
    from pyspark.sql import functions as F

    unknown = (
        F.coalesce(F.col("observed_unknown"), F.lit(False))
        | F.coalesce(F.col("expected_unknown"), F.lit(False))
        | F.coalesce(F.col("tier") == F.col("reference_tier"), F.lit(False))
    )
    judged = judged.withColumn("_unknown", unknown).withColumn(
        "status", F.when(F.col("_unknown"), F.lit(UNKNOWN)).otherwise(F.col("status"))
    )
    for name in CLEARED:
        judged = judged.withColumn(name, F.when(F.col("_unknown"), F.lit(0)).otherwise(F.col(name)))
    return judged.withColumn("mismatched_partitions", F.when(~F.col("_unknown"), F.col("mismatched_partitions"))).drop(
        "_unknown"
    )


def _counted(grid, counts, minutes: int):
    """Each (window, tier) of `grid` with the tier's count as observed and its reference tier's as expected (0
    where none counted), the window's length (the reference's, else the tier's, else `minutes`) and its end."""
    from pyspark.sql import functions as F

    observed = counts.select(
        *WINDOW_KEY,
        "tier",
        F.col("count").alias("observed"),
        F.col("by_partition").alias("observed_by_partition"),
        F.col("digest_by_partition").alias("observed_digest_by_partition"),
        "latency_p99_ms",
        F.col("window_minutes").alias("tier_window_minutes"),
        F.col("unknown").alias("observed_unknown"),
    )
    expected = counts.select(
        *WINDOW_KEY,
        F.col("tier").alias("reference_tier"),
        F.col("count").alias("expected"),
        F.col("by_partition").alias("expected_by_partition"),
        F.col("digest_by_partition").alias("expected_digest_by_partition"),
        F.col("window_minutes").alias("reference_window_minutes"),
        F.col("unknown").alias("expected_unknown"),
    )
    return (
        grid.join(observed, [*WINDOW_KEY, "tier"], "left")
        .join(expected, [*WINDOW_KEY, "reference_tier"], "left")
        .withColumn("expected", F.coalesce("expected", F.lit(0)))
        .withColumn("observed", F.coalesce("observed", F.lit(0)))
        .withColumn("window_minutes", F.coalesce("reference_window_minutes", "tier_window_minutes", F.lit(minutes)))
        .withColumn("window_end_ms", F.unix_millis("window_start") + F.col("window_minutes") * MS_PER_MINUTE)
    )


def open_windows_of(result, most: int) -> frozenset | None:
    """The windows of `result` (the rows just judged, now in `completeness`) left open, None when more than
    `most`; every other window of the table was final before this run and was not judged again, so it is not."""
    rows = result.where(is_open()).select(*WINDOW_KEY).distinct().limit(most + 1).collect()
    return None if len(rows) > most else frozenset(tuple(row) for row in rows)


def _windows_missing_a_tier(current, paths, records=None, topics=None):
    """Windows judged before a tier joined their topic's path (the lake's first count of a topic, say):
    a window the new tier holds nothing of gets no count record from it, so nothing else touches it.

    A path grows only by a record of its topic (a count or a status of a new tier), so with the
    `records` of the run only their topics are looked at; with `topics` (origin_cluster, topic), those;
    with neither, every topic."""
    from pyspark.sql import functions as F

    if records is not None:
        topics = F.broadcast(records.select("origin_cluster", "topic").distinct())
    if topics is not None:
        current = current.join(topics, ["origin_cluster", "topic"], "left_semi")
    tiers = paths.groupBy("origin_cluster", "topic").agg(F.count("*").alias("tiers"))
    judged = current.groupBy(*WINDOW_KEY).agg(F.count("*").alias("rows"))
    return judged.join(F.broadcast(tiers), ["origin_cluster", "topic"]).where("rows < tiers").select(*WINDOW_KEY)
