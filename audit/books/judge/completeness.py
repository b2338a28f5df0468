"""The verdict per (logical topic, window, tier): `classify` of audit/contract/completeness.py applied to every
window touched or not yet final, along the tiers on each topic's path (paths.py), into `completeness`; then the
final windows whose verdict changed (`restatements`) and the complete-through watermarks.

A run that judges up to DRIVER_WINDOWS windows (every usual increment) does it in the driver with the contract's
own pandas rules (in_driver.py); a larger one (a first run) in Spark (in_spark.py, verdicts.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from audit.books.count.tier_counts import WINDOW_KEY, Resummed
from audit.books.count.tier_status import declare_silent_tiers
from audit.books.judge.complete_through import refresh_watermarks
from audit.books.judge.in_driver import due_and_windows, found_restatements, judged_frame, left_open, restatement_rows
from audit.books.judge.in_spark import (
    JUDGED_COUNTS,
    as_frame,
    counts_to_judge,
    judged_in_spark,
    open_windows_of,
    windows_to_judge,
)
from audit.books.judge.open_books import OpenBooks
from audit.books.judge.paths import paths_frame, tier_paths
from audit.books.judge.restatements import store_restatements
from audit.books.read.run_records import held_by_driver, of_kind
from audit.contract.arrow import arrow_table
from audit.contract.completeness import PENDING
from audit.contract.tables import COMPLETENESS, RESTATEMENTS, TIER_COUNTS
from audit.io import delta_io
from audit.io.lake_read import read_arrow

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from audit.books.judge.rules import JudgeRules
    from audit.io.lake import Lake


# Open windows a session remembers at most; with more (a tier stalled for days) the next run reads them.
MAX_OPEN_WINDOWS = 100_000

# Windows (of a topic) up to which a run judges in the driver (in_driver.py), some tens of thousands of rows;
# more (a first run, some 200,000 windows) are judged by Spark.
DRIVER_WINDOWS = 10_000


@dataclass(frozen=True)
class Judgement:
    """What a judge step did: rows judged, and when the first pending verdict may turn by time alone."""

    windows: int
    # The earliest window end + grace of a pending row: before it, with no new record, no verdict can
    # change (pending -> lagging is the only change time makes). None: no row is pending.
    next_due_ms: int | None
    open_books: OpenBooks | None = None  # None: too many open windows to remember, or no path at all


@dataclass(frozen=True)
class _Step:
    """What every part of one judge step reads."""

    spark: SparkSession
    lake: Lake
    rules: JudgeRules
    records: Any  # the audit records the run read (see update_completeness)
    path_tiers: frozenset
    first_verdicts: bool  # `completeness` holds no verdict yet: no window is open and none is restated
    done: Callable[..., None]

    def judgement(self, judged: int, first_pending_end: int | None, still_open: frozenset | None) -> Judgement:
        due = None if first_pending_end is None else first_pending_end + self.rules.grace_ms
        return Judgement(judged, due, None if still_open is None else OpenBooks(still_open, self.path_tiers))


def update_completeness(
    spark: SparkSession,
    lake: Lake,
    rules: JudgeRules,
    resummed: Resummed | None,
    *,
    now_ms: int,
    records=None,
    counted: set[tuple[str, str, str]] | None = None,
    known: OpenBooks | None = None,
    done: Callable[..., None] = lambda step, **fields: None,
) -> Judgement:
    """Judge every window `resummed` (None: no count was read) and every window not yet final.

    Before merging the verdicts it appends the final windows they restate (`restatements`; `records`:
    the audit records the run read), after it refreshes the complete-through watermarks of their topics;
    `counted`: see `tier_paths`; `known`: what the session's last judge step left open (None: read from
    `completeness`); `done(step)` is told as each step is done.
    """
    found = tier_paths(lake, rules, counted)
    if found is None:
        return Judgement(windows=0, next_due_ms=None)
    path_rows, path_tiers = found.rows, found.tiers
    declare_silent_tiers(lake, found.silent, found.placeholders)
    done("tier paths")
    # A table with no verdict yet (a new lake) holds no open window and restates none: it is not read.
    first_verdicts = delta_io.is_empty(lake, COMPLETENESS)
    step = _Step(spark, lake, rules, records, path_tiers, first_verdicts, done)
    grown = None if known is None else {(origin, topic) for origin, topic, _ in path_tiers - known.path_tiers}
    few = _windows_known(resummed, known, grown, first_verdicts=first_verdicts)
    windows = None
    if few is None or few.num_rows > DRIVER_WINDOWS:
        paths = paths_frame(spark, path_rows)
        windows = windows_to_judge(spark, lake, paths, resummed, records, known, grown, first_verdicts=first_verdicts)
        few = windows.limit(DRIVER_WINDOWS + 1).toArrow()
    done("windows to judge")
    if windows is None or few.num_rows <= DRIVER_WINDOWS:
        counts = _counts_in_driver(lake, few, resummed, first_verdicts=first_verdicts)
        minutes = rules.window_minutes
        judged = judged_frame(few, path_rows, counts, minutes=minutes, now_ms=now_ms, grace_ms=rules.grace_ms)
        return _store_judged_in_driver(step, judged)
    counts = counts_to_judge(spark, lake, windows, known, grown, resummed, first_verdicts=first_verdicts)
    options = {"minutes": rules.window_minutes, "now_ms": now_ms, "grace_ms": rules.grace_ms}
    return _store_judged_in_spark(step, judged_in_spark(windows, paths, counts, **options).localCheckpoint())


def _store_judged_in_driver(step: _Step, judged: pd.DataFrame) -> Judgement:
    """The rest of `update_completeness` for verdicts judged in the driver (in_driver.py): restatements, the
    rewrite of their windows, the watermarks; the same tables as the Spark form."""
    windows, first_pending_end = due_and_windows(judged)
    step.done("completeness judged", windows=len(judged))
    if judged.empty:
        return step.judgement(0, None, frozenset())
    result = arrow_table(COMPLETENESS, judged[list(COMPLETENESS.column_names)])
    stored, found = result.schema.empty_table(), ()
    if not step.first_verdicts:  # a table with no verdict yet restates none
        stored = read_arrow(step.lake, COMPLETENESS.name, filters=delta_io.window_filter(windows))
        found = found_restatements(stored.to_pandas(), judged)
    if len(found):
        counted = None
        if step.records is not None:
            counted = of_kind(step.records, "count")
            columns = [*WINDOW_KEY, "tier", "record_id"]
            counted = counted.select(columns) if held_by_driver(counted) else counted.select(*columns).toArrow()
        delta_io.insert_new_from_driver(step.lake, RESTATEMENTS, restatement_rows(found, counted))
    step.done("restatements", restatements=len(found))
    delta_io.replace_windows_from_driver(step.spark, step.lake, COMPLETENESS, result, windows=windows, stored=stored)
    step.done("completeness stored", windows=len(judged))
    refresh_watermarks(step.spark, step.lake, result, len(judged), every_window=step.first_verdicts)
    step.done("completeness watermarks")
    still_open = frozenset(left_open(judged))
    return step.judgement(len(judged), first_pending_end, still_open if len(still_open) <= MAX_OPEN_WINDOWS else None)


def _store_judged_in_spark(step: _Step, result) -> Judgement:
    """The rest of `update_completeness` for verdicts judged in Spark (`result`, checkpointed): restatements, the
    rewrite of their windows, the watermarks."""
    from pyspark.sql import functions as F

    spark, lake = step.spark, step.lake
    pending_end = F.when(F.col("status") == PENDING, F.col("window_end_ms"))
    per_window = (  # one action for all three
        result.groupBy("date", "window_start").agg(F.count("*"), F.min(pending_end)).collect()
    )
    windows = [(row[0], row[1]) for row in per_window]
    judged = sum(row[2] for row in per_window)
    first_pending_end = min((row[3] for row in per_window if row[3] is not None), default=None)
    step.done("completeness judged", windows=judged)
    if not judged:
        return step.judgement(0, None, frozenset())
    before = delta_io.in_windows(delta_io.read_table(spark, lake, COMPLETENESS.name), windows)
    if not step.first_verdicts and len(windows) <= delta_io.MAX_NAMED_WINDOWS:  # read once: restatements, rewrite
        before = before.localCheckpoint()
    restated = 0
    if not step.first_verdicts:
        restated = store_restatements(lake, before, result, as_frame(spark, step.records))
    step.done("restatements", restatements=restated)
    delta_io.replace_windows(spark, lake, COMPLETENESS, result, windows=windows, existing=before)
    step.done("completeness stored", windows=judged)
    refresh_watermarks(spark, lake, result, judged, every_window=step.first_verdicts)
    step.done("completeness watermarks")
    return step.judgement(judged, first_pending_end, open_windows_of(result, MAX_OPEN_WINDOWS))


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


def _counts_in_driver(lake: Lake, windows: pa.Table, resummed: Resummed | None, *, first_verdicts: bool):
    """The `tier_counts` rows (`JUDGED_COUNTS`) of `windows` (`WINDOW_KEY`, as Spark's `toArrow` gives them) and
    of other topics in the same windows, which the judging ignores: at the first verdicts those re-summed in the
    driver, else read by `deltalake` once this run's re-sums are stored."""
    if first_verdicts and resummed is not None and resummed.summed is not None:
        counts = resummed.summed.select(list(JUDGED_COUNTS))
    else:
        if resummed is not None:
            resummed.wait_stored()
        counts = read_arrow(
            lake, TIER_COUNTS.name, columns=JUDGED_COUNTS, filters=delta_io.window_filter_of(windows["window_start"])
        )
    index = counts.schema.get_field_index("window_start")
    return counts.set_column(
        index, "window_start", counts.column(index).cast(windows.schema.field("window_start").type)
    )
