"""The verdict per (logical topic, window, tier): the tiers on each topic's path, and `classify` of
audit/contract/completeness.py (in its Spark form, audit/books/verdicts.py) applied to every window
touched or not yet final (`completeness`)."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from audit.contract.completeness import PENDING, threshold_for
from audit.contract.tables import (
    AUDIT_RECORDS,
    COMPLETENESS,
    PARTITION_STATUS,
    RESTATEMENTS,
    TIER_COUNTS,
    TIER_STATUS,
    arrow_table,
)
from audit.contract.tier_paths import PATH_DDL, paths_from
from audit.contract.watermark_points import WatermarkPoint
from audit.contract.windows import EPOCH, MS_PER_MINUTE, to_ms
from audit.io import delta_io
from audit.io.lake_read import read_arrow
from audit.io.spark import broadcast_when_small, local_frame

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from audit.settings import Settings

from audit.books.complete_through import PAIR, refresh_watermarks
from audit.books.judge_driver import due_and_windows, found_restatements, judged_frame, left_open, restatement_rows
from audit.books.restatements import store_restatements
from audit.books.run_records import held_by_driver, of_kind
from audit.books.tier_tables import WINDOW_DDL, WINDOW_KEY, Resummed, stored_points
from audit.books.verdicts import classified
from audit.io.lake import lake_of

log = logging.getLogger(__name__)

REPORTED = ("origin_cluster", "topic", "tier", "watermark", "last_status_at")  # what tier_paths reads of tier_status

# -- 3c. completeness --------------------------------------------------------------------------

# What the judging reads of `tier_counts`.
JUDGED_COUNTS = (*WINDOW_KEY, "tier", "count", "by_partition", "latency_p99_ms", "window_minutes")


def tier_paths(settings: Settings, counted: set[tuple[str, str, str]] | None = None):
    """Per (logical topic, tier on its path): reference tier, order, the tier's effective watermark
    (audit/contract/tier_paths.py holds the rule) and the topic's threshold, as rows of `PATHS_DDL` (`paths_frame`
    hands them to Spark), with the (origin_cluster, topic, tier) on the paths; None when no topic has a path. `counted`: the
    (origin_cluster, topic, tier) that `tier_counts` holds, when known (`counted_tiers`), else they are read
    from it. Computed in the driver: a few rows per topic."""
    counted = counted if counted is not None else counted_tiers(settings)
    paths = paths_from(
        counted, reported_points(settings), settings.tiers, settings.reference_tier, read_positions(settings)
    )
    if not paths:
        return None
    patterns = settings.threshold_patterns()
    thresholds = {topic: threshold_for(".".join(topic), patterns) for topic in {row[:2] for row in paths}}
    return [(*row, thresholds[row[:2]]) for row in paths], frozenset(row[:3] for row in paths)


PATHS_DDL = f"{PATH_DDL}, threshold_pct DOUBLE"


def paths_frame(spark: SparkSession, rows: list[tuple]):
    """`tier_paths`' rows as a frame, for the judging in Spark."""
    return local_frame(spark, rows, PATHS_DDL)


def reported_points(settings: Settings) -> list[tuple]:
    """(origin_cluster, topic, tier, kept points) of every tier that reported (`_tier_points`, written by the
    driver). A `tier_status` row without points (a lake written before they were kept) is one point of its
    newest watermark, with the tier before it unknown: its windows and those of the tiers after it are lagging
    until the reporters have reported again."""
    reported = {
        (origin, topic, tier): points for (tier, origin, topic), points in stored_points(lake_of(settings)).items()
    }
    status = read_arrow(lake_of(settings), TIER_STATUS.name, columns=REPORTED)  # written by the driver
    for origin, topic, tier, watermark, last_status_at in zip(*(status.column(c).to_pylist() for c in REPORTED)):
        if (origin, topic, tier) not in reported:
            newest = to_ms(last_status_at or EPOCH)
            reported[(origin, topic, tier)] = [
                WatermarkPoint(newest, None, None if watermark is None else to_ms(watermark))
            ]
    return [(*pair, points) for pair, points in reported.items()]


READ = ("origin_cluster", "topic", "tier", "cluster", "seen_topic", "partition", "position", "emitted_at")


def read_positions(settings: Settings) -> dict[tuple, dict[tuple, tuple[int, int]]]:
    """Per (origin_cluster, topic, tier), the (position, emitted_at ms) of each of its reporter partitions' newest
    status (`_partition_status`), by (cluster, seen_topic, partition): what `tier_paths.caught_up_at` compares."""
    status = read_arrow(lake_of(settings), PARTITION_STATUS.name, columns=READ)  # written by the driver
    positions: dict[tuple, dict[tuple, tuple[int, int]]] = defaultdict(dict)
    for origin, topic, tier, cluster, seen, partition, position, emitted in zip(
        *(status.column(c).to_pylist() for c in READ)
    ):
        if position is not None and emitted is not None:
            positions[(origin, topic, tier)][(cluster, seen, partition)] = (position, to_ms(emitted))
    return positions


def counted_tiers(settings: Settings, known=None, counts=None) -> set[tuple[str, str, str]]:
    """The (origin_cluster, topic, tier) that `tier_counts` holds. A session that knows them from its last run
    (`known`) adds those of the `tier_counts` rows this run summed (`counts`): a tier's counts are never
    removed. A new session reads them with `deltalake`: three columns, without a Spark query (0.4-0.5 s in a
    small run)."""
    if known is None:
        return _pairs(read_arrow(lake_of(settings), TIER_COUNTS.name, columns=PAIR))
    if counts is None:
        return known
    if isinstance(counts, pa.Table):  # summed in the driver
        return known | _pairs(counts)
    return known | {tuple(row) for row in counts.select(*PAIR).distinct().collect()}


def _pairs(counts: pa.Table) -> set[tuple[str, str, str]]:
    distinct = counts.select(list(PAIR)).group_by(list(PAIR)).aggregate([])
    return set(zip(*(distinct.column(name).to_pylist() for name in PAIR), strict=True))


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
    "completeness_pct": "DOUBLE",
    "threshold_pct": "DOUBLE",
    "status": "STRING",
    "final": "BOOLEAN",
    "window_end_ms": "BIGINT",
    "tier_watermark_ms": "BIGINT",
    "latency_p99_ms": "DOUBLE",
}


@dataclass(frozen=True)
class OpenBooks:
    """What a judge step leaves its session's next one, which then need not read `completeness` to find the
    windows to judge again: the windows it left open (`WINDOW_KEY`: not final, or pending or lagging) and the
    (origin_cluster, topic, tier) on the paths it judged with (a window judged since holds a row for each)."""

    windows: frozenset[tuple]
    path_tiers: frozenset[tuple]


# Open windows a session remembers at most; with more (a tier stalled for days) the next run reads them.
MAX_OPEN_WINDOWS = 100_000

# Windows (of a topic) up to which a run judges in the driver (audit/books/judge_driver.py), some tens of
# thousands of rows; more (a first run, some 200,000 windows) are judged by Spark.
DRIVER_WINDOWS = 10_000


@dataclass(frozen=True)
class Judgement:
    """What a judge step did: rows judged, and when the first pending verdict may turn by time alone."""

    windows: int
    # The earliest window end + grace of a pending row: before it, with no new record, no verdict can
    # change (pending -> lagging is the only change time makes). None: no row is pending.
    next_due_ms: int | None
    open_books: OpenBooks | None = None  # None: too many open windows to remember, or no path at all


def update_completeness(
    spark: SparkSession,
    settings: Settings,
    resummed: Resummed | None,
    *,
    now_ms: int,
    records=None,
    counted: set[tuple[str, str, str]] | None = None,
    known: OpenBooks | None = None,
    done=lambda step, **fields: None,
) -> Judgement:
    """Judge every window `resummed` (None: no count was read) and every window not yet final.

    Before merging the verdicts it appends the final windows they restate (`restatements`; `records`:
    the audit records the run read), after it refreshes the complete-through watermarks of their topics;
    `counted`: see `tier_paths`; `known`: what the session's last judge step left open (None: read from
    `completeness`); `done(step)` is told as each step is done.
    """
    from pyspark.sql import functions as F

    found = tier_paths(settings, counted)
    if found is None:
        return Judgement(windows=0, next_due_ms=None)
    path_rows, path_tiers = found
    done("tier paths")
    # A table with no verdict yet (a new lake) holds no open window and restates none: it is not read.
    first_verdicts = delta_io.is_empty(lake_of(settings), COMPLETENESS)
    grown = None if known is None else {(origin, topic) for origin, topic, _ in path_tiers - known.path_tiers}
    few = _windows_known(resummed, known, grown, first_verdicts=first_verdicts)
    if few is None or few.num_rows > DRIVER_WINDOWS:
        paths = paths_frame(spark, path_rows)
        if first_verdicts:
            again = local_frame(spark, [], WINDOW_DDL)
        else:
            again = _open_windows(spark, settings, paths, records, known, grown)
        touched = resummed.windows_frame(spark) if resummed is not None else local_frame(spark, [], WINDOW_DDL)
        windows = touched.select(*WINDOW_KEY).unionByName(again).distinct().localCheckpoint()  # read by two joins
        few = windows.limit(DRIVER_WINDOWS + 1).toArrow()
    done("windows to judge")
    grace_ms = int(settings.grace_s * 1000)
    if few.num_rows <= DRIVER_WINDOWS:
        judged = judged_frame(
            few,
            path_rows,
            _counts_in_driver(settings, few, resummed, first_verdicts=first_verdicts),
            minutes=settings.window_minutes,
            now_ms=now_ms,
            grace_ms=grace_ms,
        )
        return _store_judged(spark, settings, judged, path_tiers, records, first_verdicts, grace_ms, done)
    counts = _counts_at_hand(spark, settings, known, grown, resummed, first_verdicts=first_verdicts)
    result = _judged(spark, settings, windows, paths, now_ms, grace_ms, counts, resummed).localCheckpoint()
    pending_end = F.when(F.col("status") == PENDING, F.col("window_end_ms"))
    per_window = (  # one action for all three
        result.groupBy("date", "window_start").agg(F.count("*"), F.min(pending_end)).collect()
    )
    windows = [(row[0], row[1]) for row in per_window]
    judged = sum(row[2] for row in per_window)
    first_pending_end = min((row[3] for row in per_window if row[3] is not None), default=None)
    done("completeness judged", windows=judged)
    if not judged:
        return Judgement(0, None, OpenBooks(frozenset(), path_tiers))
    before = delta_io.in_windows(delta_io.read_table(spark, lake_of(settings), COMPLETENESS.name), windows)
    if not first_verdicts and len(windows) <= delta_io.MAX_NAMED_WINDOWS:  # read once: restatements and rewrite
        before = before.localCheckpoint()
    restated = 0 if first_verdicts else store_restatements(spark, settings, before, result, _as_frame(spark, records))
    done("restatements", restatements=restated)
    delta_io.replace_windows(spark, lake_of(settings), COMPLETENESS, result, windows=windows, existing=before)
    done("completeness stored", windows=judged)
    refresh_watermarks(spark, settings, result, judged, every_window=first_verdicts)
    done("completeness watermarks")
    left_open = _left_open(result, path_tiers)
    return Judgement(judged, None if first_pending_end is None else first_pending_end + grace_ms, left_open)


def _store_judged(
    spark: SparkSession,
    settings: Settings,
    judged: pd.DataFrame,
    path_tiers: frozenset,
    records,
    first_verdicts: bool,
    grace_ms: int,
    done,
) -> Judgement:
    """The rest of `update_completeness` for verdicts judged in the driver (audit/books/judge_driver.py):
    restatements, the rewrite of their windows, the watermarks; the same tables as the Spark form."""

    windows, first_pending_end = due_and_windows(judged)
    done("completeness judged", windows=len(judged))
    if judged.empty:
        return Judgement(0, None, OpenBooks(frozenset(), path_tiers))
    result = arrow_table(COMPLETENESS, judged[list(COMPLETENESS.column_names)])
    stored, found = result.schema.empty_table(), ()
    if not first_verdicts:  # a table with no verdict yet restates none
        stored = read_arrow(lake_of(settings), COMPLETENESS.name, filters=delta_io.window_filter(windows))
        found = found_restatements(stored.to_pandas(), judged)
    if len(found):
        counted = None
        if records is not None:
            counted = of_kind(records, "count")
            columns = [*WINDOW_KEY, "tier", "record_id"]
            counted = counted.select(columns) if held_by_driver(counted) else counted.select(*columns).toArrow()
        delta_io.insert_new_from_driver(lake_of(settings), RESTATEMENTS, restatement_rows(found, counted))
    done("restatements", restatements=len(found))
    delta_io.replace_windows_from_driver(spark, lake_of(settings), COMPLETENESS, result, windows=windows, stored=stored)
    done("completeness stored", windows=len(judged))
    refresh_watermarks(spark, settings, result, len(judged), every_window=first_verdicts)
    done("completeness watermarks")
    still_open = left_open(judged)
    books = OpenBooks(frozenset(still_open), path_tiers) if len(still_open) <= MAX_OPEN_WINDOWS else None
    return Judgement(len(judged), None if first_pending_end is None else first_pending_end + grace_ms, books)


def _windows_known(
    resummed: Resummed | None, known: OpenBooks | None, grown: set | None, *, first_verdicts: bool
) -> pa.Table | None:
    """The windows to judge (`WINDOW_KEY`, as Spark's `toArrow` gives them) when the driver knows them all: those
    re-summed (their keys collected) and, unless these are the first verdicts, those the session left open, when
    no path grew since. None: they must be found by Spark (a first run's, or a new session's, from `completeness`)."""
    touched = frozenset() if resummed is None else resummed.keys
    if touched is None or not (first_verdicts or (known is not None and not grown)):
        return None
    keys = touched if first_verdicts or known is None else touched | known.windows
    columns = list(zip(*keys, strict=True)) or [(), (), ()]
    return pa.table(
        {
            "origin_cluster": pa.array(columns[0], pa.string()),
            "topic": pa.array(columns[1], pa.string()),
            "window_start": pa.array(columns[2], pa.timestamp("us", tz="UTC")),
        }
    )


def _is_open():
    """A `completeness` row whose window is judged again by every run: not final, or pending or lagging."""
    from pyspark.sql import functions as F

    return ~F.col("final") | F.col("status").isin("pending", "lagging")


def _open_windows(spark: SparkSession, settings: Settings, paths, records, known: OpenBooks | None, grown: set | None):
    """The windows judged again whether touched or not: those `completeness` holds open, and those missing a
    tier of their path. From `known` when the session has it: a window can miss a tier only of a topic whose
    path grew since (`grown`), and only those topics' windows are read. Spark reads the table only then, as its
    first look at a version `deltalake` wrote costs it the log since its own last one."""
    from pyspark.sql import functions as F

    if known is not None and not grown:
        return local_frame(spark, list(known.windows), WINDOW_DDL)
    current = delta_io.read_table(spark, lake_of(settings), COMPLETENESS.name)
    if known is None:
        held_open = current.where(_is_open()).select(*WINDOW_KEY)
        return held_open.unionByName(_windows_missing_a_tier(current, paths, _as_frame(spark, records)))
    held_open = local_frame(spark, list(known.windows), WINDOW_DDL)
    topics = local_frame(spark, list(grown), "origin_cluster STRING, topic STRING")
    return held_open.unionByName(_windows_missing_a_tier(current, paths, topics=F.broadcast(topics)))


def _as_frame(spark: SparkSession, records):
    """The run's records as Spark reads them: a small run's (a pyarrow Table the driver holds) handed over."""
    return local_frame(spark, records, AUDIT_RECORDS.ddl()) if held_by_driver(records) else records


def _counts_at_hand(
    spark: SparkSession,
    settings: Settings,
    known: OpenBooks | None,
    grown: set | None,
    resummed: Resummed | None,
    *,
    first_verdicts: bool = False,
):
    """The tier counts of the windows to judge that this run holds without reading `tier_counts`: where the
    session knows every window to judge (no path grew), those it just re-summed, with the other open windows'
    counts read from the table; at the first verdicts (`first_verdicts`: the windows to judge are those
    re-summed, no other), those re-summed alone, without waiting for their write. None: every window's counts
    are read from the table."""
    from pyspark.sql import functions as F

    if resummed is None or resummed.counts is None:
        return None
    fresh = resummed.counts.select(*JUDGED_COUNTS)
    if first_verdicts:
        return fresh
    if known is None or grown or resummed.keys is None:
        return None
    others = known.windows - resummed.keys
    if not others:
        return fresh
    windows = local_frame(spark, list(others), WINDOW_DDL).withColumn("date", F.to_date("window_start"))
    return fresh.unionByName(_stored_counts(spark, settings, windows, resummed).select(*JUDGED_COUNTS))


def _counts_in_driver(settings: Settings, windows: pa.Table, resummed: Resummed | None, *, first_verdicts: bool):
    """The `tier_counts` rows (`JUDGED_COUNTS`) of `windows` (`WINDOW_KEY`, as Spark's `toArrow` gives them) and
    of other topics in the same windows, which the judging ignores: at the first verdicts those re-summed in the
    driver, else read by `deltalake` once this run's re-sums are stored."""
    if first_verdicts and resummed is not None and resummed.summed is not None:
        counts = resummed.summed.select(list(JUDGED_COUNTS))
    else:
        if resummed is not None:
            resummed.wait_stored()
        counts = read_arrow(
            lake_of(settings),
            TIER_COUNTS.name,
            columns=JUDGED_COUNTS,
            filters=delta_io.window_filter_of(windows["window_start"]),
        )
    index = counts.schema.get_field_index("window_start")
    return counts.set_column(
        index, "window_start", counts.column(index).cast(windows.schema.field("window_start").type)
    )


def _stored_counts(spark: SparkSession, settings: Settings, windows, resummed: Resummed | None):
    """The `tier_counts` rows of `windows` (`WINDOW_KEY` and `date`), once this run's re-sums are stored."""
    if resummed is not None:
        resummed.wait_stored()
    return delta_io.in_windows(
        delta_io.read_table(spark, lake_of(settings), TIER_COUNTS.name), delta_io.windows_of(windows)
    ).join(broadcast_when_small(windows), [*WINDOW_KEY, "date"], "left_semi")


def _left_open(result, path_tiers: frozenset) -> OpenBooks | None:
    """The windows of `result` (the rows just judged, now in `completeness`) left open; every other window
    of the table was final before this run and was not judged again, so it is not."""
    rows = result.where(_is_open()).select(*WINDOW_KEY).distinct().limit(MAX_OPEN_WINDOWS + 1).collect()
    if len(rows) > MAX_OPEN_WINDOWS:
        return None
    return OpenBooks(frozenset(tuple(row) for row in rows), path_tiers)


def _judged(
    spark: SparkSession,
    settings: Settings,
    windows,
    paths,
    now_ms: int,
    grace_ms: int,
    counts=None,
    resummed: Resummed | None = None,
):
    """`classify`'s verdict on each (window, tier on its topic's path), as `completeness` rows; `counts`: the
    windows' tier counts (`JUDGED_COUNTS`) when the run holds them, else they are read from `tier_counts`
    (once `resummed`'s are stored)."""
    from pyspark.sql import functions as F

    windows = windows.withColumn("date", F.to_date("window_start"))
    if counts is None:
        counts = _stored_counts(spark, settings, windows, resummed)
    counts = counts.select(*JUDGED_COUNTS).localCheckpoint()  # read twice below (observed, expected)
    grid = windows.join(F.broadcast(paths), ["origin_cluster", "topic"])
    observed = counts.select(
        *WINDOW_KEY,
        "tier",
        F.col("count").alias("observed"),
        F.col("by_partition").alias("observed_by_partition"),
        "latency_p99_ms",
        F.col("window_minutes").alias("tier_window_minutes"),
    )
    expected = counts.select(
        *WINDOW_KEY,
        F.col("tier").alias("reference_tier"),
        F.col("count").alias("expected"),
        F.col("by_partition").alias("expected_by_partition"),
        F.col("window_minutes").alias("reference_window_minutes"),
    )
    minutes = settings.window_minutes
    rows = (
        grid.join(observed, [*WINDOW_KEY, "tier"], "left")
        .join(expected, [*WINDOW_KEY, "reference_tier"], "left")
        .withColumn("expected", F.coalesce("expected", F.lit(0)))
        .withColumn("observed", F.coalesce("observed", F.lit(0)))
        .withColumn("window_minutes", F.coalesce("reference_window_minutes", "tier_window_minutes", F.lit(minutes)))
        .withColumn("window_end_ms", F.unix_millis("window_start") + F.col("window_minutes") * MS_PER_MINUTE)
    )
    judged = rows.select(
        *WINDOW_KEY,
        "window_minutes",
        "tier",
        "tier_order",
        "reference_tier",
        "expected",
        "observed",
        "expected_by_partition",
        "observed_by_partition",
        "window_end_ms",
        "tier_watermark_ms",
        "threshold_pct",
        "latency_p99_ms",
    )
    judged = classified(judged, now_ms=now_ms, grace_ms=grace_ms).select(
        *(F.col(name).cast(kind).alias(name) for name, kind in JUDGED_COLUMNS.items())
    )
    return (
        judged.withColumn("logical_topic", F.concat_ws(".", "origin_cluster", "topic"))
        .withColumn("window_end", F.timestamp_millis("window_end_ms"))
        .withColumn("tier_watermark", F.timestamp_millis("tier_watermark_ms"))
        .withColumn("updated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
    )


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
