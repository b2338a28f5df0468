"""The reconciliation: every cluster's audit topic in, the books balanced into Delta tables.

One run (`reconcile(spark, settings)`):
1. reads what is new in the audit topic of EVERY configured cluster, its own and the replicated
   copies (`dc1._audit` on the aggregate), from the offsets the last run stored, so a stalled
   replicator cannot hide the producer's counts;
2. checks every message (audit/books/record_check.py) on the executors: invalid ones go to
   `audit_rejects` with their reason, valid ones are inserted into `audit_records` once per record_id
   (a record read twice, from two clusters or two runs, counts once);
3. re-sums `tier_counts` for the windows that received records, refreshes each reporter's newest
   partition status and from it `tier_status`, and re-judges `completeness` for those windows and
   for every window not yet final (audit/contract/completeness.py holds the rules), appends the
   final windows whose verdict changed to `restatements` and refreshes `completeness_watermarks`;
4. stores the offsets it read up to. A crash before that step only makes the next run read the
   same messages again, which the record_id and offset keys absorb.

A run of up to `DRIVER_MESSAGES` audit messages (every usual increment) reads them with confluent-kafka, checks
them with the Python checker and does the rest of steps 2 and 3 in the driver (pyarrow, pandas and `deltalake`):
a dozen Spark queries on a few thousand rows cost more in planning than in data (audit/books/run_records.py).
tests/audit/books/test_record_columns.py and test_judge_driver.py hold each driver form to its Spark form.

A long-lived session (`kaudit reconcile --continuous`) passes a `RunMemory` from run to run: the
offsets and cluster states it stored, the tiers `tier_counts` holds, the windows left open and the tiers
on each path (so step 3 need not scan `completeness` for them), and when the first pending window turns
due. A run that reads nothing new before that moment cannot change a verdict and skips step 3; a new
process starts with an empty memory and does every step, so a restart gives the same tables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from audit.books.record_check import (
    CHECKED_COLUMNS,
    CHECKED_DDL,
    SOURCE_COLUMNS,
    TYPED_CHECKED,
    TYPED_NESTED,
    RecordChecker,
)
from audit.books.record_columns import FAST, checked_natively
from audit.contract.arrow import ddl_schema
from audit.contract.tables import (
    AUDIT_RECORDS,
    AUDIT_REJECTS,
    CLUSTER_READS,
    COMPLETENESS,
    COMPLETENESS_WATERMARKS,
    PARTITION_STATUS,
    RESTATEMENTS,
    RETENTION_GAPS,
    SOURCE_OFFSETS,
    TIER_COUNTS,
    TIER_POINTS,
    TIER_STATUS,
    arrow_table,
)
from audit.contract.windows import EPOCH
from audit.io import delta_io
from audit.io.lake_read import read_arrow
from audit.io.spark import BROADCAST_MAX_NUMBERS, broadcast_when_small, local_frame, side_by_side

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from audit.settings import Settings


from audit.books.audit_read import (
    audit_sources,
    offsets_read_up_to,
    read_new_messages,
    read_new_messages_in_driver,
    store_cluster_reads,
    store_offsets,
    stored_offsets,
)
from audit.books.judge import Judgement, OpenBooks, counted_tiers, update_completeness
from audit.books.retention_gaps import carried_gaps, store_retention_gaps
from audit.books.run_records import DRIVER_MESSAGES, held_by_driver
from audit.books.tier_tables import update_tier_counts, update_tier_status
from audit.io.lake import lake_of

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    read: int = 0
    records: int = 0
    rejects: int = 0
    every_record: bool = False  # audit_records held none before this run: its records are all the table holds
    windows: int = 0
    unreachable: dict[str, str] = field(default_factory=dict)  # cluster -> error
    seconds: float = 0.0
    quiet: bool = False  # nothing new and no window due: nothing judged

    def line(self) -> str:
        judged = "nothing new, no window due, none judged" if self.quiet else f"{self.windows:,} windows judged"
        text = (
            f"read {self.read:,} audit messages: {self.records:,} new records, {self.rejects:,} rejected; "
            f"{judged} in {self.seconds:.1f} s"
        )
        if self.unreachable:
            text += "; UNREACHABLE: " + ", ".join(f"{c} ({e})" for c, e in self.unreachable.items())
        return text


# How long a session keeps the tiers counted it read from `tier_counts` before reading them again: rows that
# maintenance deleted (`maintenance.tier_counts_days`) leave its memory within a day, as they would a new process's.
COUNTED_TIERS_MAX_AGE_MS = 24 * 3_600_000


@dataclass
class RunMemory:
    """What one session remembers of its last successful run (see the module doc); empty: nothing yet.

    Bounded by the deployment as the lake holds it now, never by the session's age: `offsets` one entry per
    partition of the audit topics it reads, `cluster_states` one per configured cluster, `open_books` at most
    MAX_OPEN_WINDOWS windows (audit/books/judge.py; more and it is None), and `counted_tiers` what `tier_counts`
    holds, read again from the table once it is COUNTED_TIERS_MAX_AGE_MS old (`tiers_counted`)."""

    offsets: dict[tuple[str, str, int], int] | None = None  # as stored in source_offsets
    cluster_states: dict[str, tuple[bool, str | None]] | None = None  # as stored in cluster_reads
    judged: bool = False  # the last run judged, so `next_due_ms` holds
    next_due_ms: int | None = None  # see audit.books.judge.Judgement
    counted_tiers: set[tuple[str, str, str]] | None = None  # see audit.books.judge.counted_tiers
    counted_read_ms: int | None = None  # when `counted_tiers` was last read from the table
    open_books: OpenBooks | None = None  # what the last judge step left open (audit.books.judge.OpenBooks)

    def tiers_counted(self, now_ms: int, read: Callable[[], set[tuple[str, str, str]]]) -> set[tuple[str, str, str]]:
        """`counted_tiers`, from `read()` (the table) when the session has none yet or has had them for
        COUNTED_TIERS_MAX_AGE_MS: a run adds its own, the table may lose some to maintenance."""
        if (
            self.counted_tiers is None
            or self.counted_read_ms is None
            or now_ms - self.counted_read_ms >= COUNTED_TIERS_MAX_AGE_MS
        ):
            self.counted_tiers, self.counted_read_ms = read(), now_ms
        return self.counted_tiers

    def is_quiet(self, read: int, now_ms: int) -> bool:
        """True when a run that read `read` messages at `now_ms` cannot change a verdict."""
        return read == 0 and self.judged and (self.next_due_ms is None or now_ms < self.next_due_ms)

    def seconds_to_next_run(self, interval_s: float, now_ms: int, status_delay_ms: int) -> float:
        """How long a session waits before its next run: `interval_s`, unless the first pending window turns
        due before that. Then the next run starts `status_delay_ms` after that moment (the reporters'
        statuses that make it final take up to three flushes: the tier before's, then the tier's own after it, and
        for a cluster tier its counter's after its replicator's),
        so a loss in that window is judged one run after it could be, not up to one interval plus one run later."""
        if not self.judged or self.next_due_ms is None:
            return interval_s
        until_due_s = (self.next_due_ms + status_delay_ms - now_ms) / 1000
        return max(0.0, min(interval_s, until_due_s))


# -- 2. checked records and rejects --------------------------------------------------------------


# Numbers every message a run checked, in the checkpoint that holds it (so the same row has the same number in
# every query): the copies of one record_id are told apart by this one BIGINT (once_per_record_id).
ROW = "_row"


def check_messages(messages, checker: RecordChecker, *, native: bool = True):
    """The checker's rows, typed as the tables want them (times as TIMESTAMP, nested fields parsed), each with
    its number in `ROW`.

    `native`: records written the canonical way are checked by Spark's own JSON reader and column
    expressions (audit/books/record_columns.py), the rest in Python; False checks all in Python.
    Each part is computed once (checkpointed): the messages are read from Kafka once and the Python
    check runs once, however many steps use the rows."""
    from pyspark.sql import functions as F

    number = F.monotonically_increasing_id()
    if native:
        natively = checked_natively(messages, checker).withColumn(ROW, number).localCheckpoint()
        checked = natively.where(F.col(FAST)).select(*(name for name, _ in TYPED_CHECKED), ROW)
        rest = natively.where(~F.col(FAST)).select(*SOURCE_COLUMNS)
        if not rest.isEmpty():  # else no Python worker is started (seconds in a new session)
            by_python = _typed_nested(rest.mapInPandas(checker.check_batches, CHECKED_DDL))
            checked = checked.unionByName(by_python.withColumn(ROW, -1 - number).localCheckpoint())  # apart
    else:
        checked = _typed_nested(messages.mapInPandas(checker.check_batches, CHECKED_DDL))
        checked = checked.withColumn(ROW, number).localCheckpoint()
    at = F.timestamp_millis
    return (
        checked.withColumn("window_start", at("window_start_ms"))
        .withColumn("emitted_at", at("emitted_at_ms"))
        .withColumn("watermark", at("watermark_ms"))
        .withColumn("ingested_at", F.lit(datetime.now(UTC)))  # one moment for every query that reads the rows
        .withColumn("date", F.to_date(F.coalesce("window_start", "emitted_at", "ingested_at")))
    )


# The rows `check_messages` yields, and `check_in_driver` as a pyarrow Table of this schema.
CHECKED_ROWS_DDL = ", ".join(
    [
        *(f"{name} {kind}" for name, kind in TYPED_CHECKED),
        f"{ROW} BIGINT",
        *(f"{name} TIMESTAMP" for name in ("window_start", "emitted_at", "watermark", "ingested_at")),
        "date DATE",
    ]
)


def check_in_driver(messages: pd.DataFrame, checker: RecordChecker) -> pa.Table:
    """`check_messages` of a small run's messages (SOURCE_COLUMNS, as `read_new_messages_in_driver` gives them),
    all checked by the Python checker in this process: the same rows, as a pyarrow Table (`CHECKED_ROWS_DDL`)."""
    schema = ddl_schema(CHECKED_ROWS_DDL)
    checked = checker.check(messages, nested_as_text=False)
    nested = {name: checked.pop(name) for name in TYPED_NESTED}
    flat = pa.schema([field for field in ddl_schema(CHECKED_DDL) if field.name not in TYPED_NESTED])
    text = pa.Table.from_pandas(checked, schema=flat, preserve_index=False)
    columns = {name: text[name] for name in text.column_names}
    for name, (typed, _) in TYPED_NESTED.items():
        values = [None if value is None else _nested(name, value) for value in nested[name]]
        columns[typed] = pa.array(values, schema.field(typed).type)
    columns[ROW] = pa.array(range(text.num_rows), pa.int64())
    for name in ("window_start", "emitted_at", "watermark"):
        columns[name] = pc.cast(text[f"{name}_ms"], pa.timestamp("ms", tz="UTC"))
    columns["ingested_at"] = pa.repeat(pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC")), text.num_rows)
    dated = pc.coalesce(columns["window_start"], columns["emitted_at"], columns["ingested_at"])
    columns["date"] = pc.cast(pc.cast(dated, pa.timestamp("us", tz="UTC")), pa.date32())
    return pa.table({name: columns[name] for name in schema.names}).cast(schema)


def _nested(name: str, parsed):
    """A nested field as the Python checker holds it before writing its JSON text, in `TYPED_NESTED`'s type (as
    `_typed_nested` gives it in Spark): partition maps as pairs, partition times as moments."""
    if name == "by_partition_json":
        return list(parsed.items())
    return [
        {
            **{key: status[key] for key in ("partition", "position", "end_offset", "lag")},
            "last_audit_time": None
            if status["last_audit_time_ms"] is None
            else EPOCH + timedelta(milliseconds=status["last_audit_time_ms"]),
        }
        for status in parsed
    ]


def _typed_nested(checked):
    """The Python checker's rows (CHECKED_DDL) with their nested fields' JSON text parsed, as TYPED_CHECKED."""
    from pyspark.sql import functions as F

    partitions_type = (
        "ARRAY<STRUCT<partition: INT, position: BIGINT, end_offset: BIGINT, lag: BIGINT, last_audit_time_ms: BIGINT>>"
    )
    by_partition = F.transform_keys(F.from_json("by_partition_json", "MAP<STRING,BIGINT>"), lambda k, _v: k.cast("int"))
    partitions = F.transform(
        F.from_json("partitions_json", partitions_type),
        lambda p: F.struct(
            *(p[name].alias(name) for name in ("partition", "position", "end_offset", "lag")),
            F.timestamp_millis(p["last_audit_time_ms"]).alias("last_audit_time"),
        ),
    )
    parsed = {"by_partition_json": by_partition, "partitions_json": partitions}
    return checked.select(
        *(
            parsed[text].alias(TYPED_NESTED[text][0]) if text in TYPED_NESTED else F.col(text)
            for text in CHECKED_COLUMNS
        )
    )


def store_records_and_rejects(
    spark: SparkSession, settings: Settings, checked, report: ReconcileReport, step: _Steps | None = None
):
    """Insert new records (once per record_id) and rejects (once per audit-topic offset).

    Returns every valid record read, not only the new ones: the updates after this step must see the
    records of a run that was killed after inserting them (its offsets were not stored, so this run
    read them again), else their windows would never be re-summed. Re-summing a window is idempotent.
    `checked`: the rows of `check_messages`, or of `check_in_driver` for a small run, whose records are
    deduplicated and appended in the driver (`_new_in_driver`) and returned as a pyarrow Table, which the
    steps after this one take as the sign of a small run and handle in the driver too (audit/books/run_records.py).
    """
    from pyspark.sql import functions as F

    step = step or _Steps()
    step.done("records read and checked")
    rows = checked if held_by_driver(checked) else None
    if rows is None:  # one job counts both, for the rest of the run
        report.rejects, gaps = checked.agg(F.count("reason"), F.count(carried_gaps())).first()
    else:
        report.rejects = rows.num_rows - rows["reason"].null_count
        gaps = rows.num_rows - rows["retention_gaps_json"].null_count
    if rows is not None and (gaps or report.rejects):
        checked = local_frame(spark, rows, CHECKED_ROWS_DDL)  # retention gaps or rejects, rare: stored by Spark
    if gaps:
        store_retention_gaps(spark, settings, checked)
    step.done("retention gaps")
    report.every_record = delta_io.is_empty(lake_of(settings), AUDIT_RECORDS)
    if rows is not None:
        records, new_records = _new_in_driver(settings, rows, every_record=report.every_record)
        report.records = new_records.num_rows
        step.done("records deduplicated", records=report.records, rejects=report.rejects)
        if report.records:
            delta_io.append_from_driver(lake_of(settings), AUDIT_RECORDS, new_records)
    else:
        records, distinct = once_per_record_id(checked.where(F.col("reason").isNull()))
        new_records = records if report.every_record else _not_stored(spark, settings, records)
        report.records = distinct if report.every_record else new_records.count()
        step.done("records deduplicated", records=report.records, rejects=report.rejects)
        if report.records:  # new by the join above: appended, not merged (a second look at the same keys)
            delta_io.append(lake_of(settings), AUDIT_RECORDS, new_records)
    if report.rejects:  # a small run's `checked` was handed to Spark above
        rejects = _rejects(checked)
        delta_io.insert_new(spark, lake_of(settings), AUDIT_REJECTS, rejects, prune=False)
        for row in rejects.select("read_from_cluster", "read_from_offset", "reason").limit(5).collect():
            log.warning(
                "audit record rejected",
                extra={"cluster": row.read_from_cluster, "offset": row.read_from_offset, "reason": row.reason},
            )
    return records


def _rejects(checked):
    """The rows of `checked` (a frame) that are not valid records, as `audit_rejects` dates them."""
    from pyspark.sql import functions as F

    return checked.where(F.col("reason").isNotNull()).drop(ROW).withColumn("date", F.to_date("ingested_at"))


def once_per_record_id(valid):
    """`valid` records (AUDIT_RECORDS columns, ROW and more) with one row per record_id, as AUDIT_RECORDS columns,
    and how many rows that is.

    Not `dropDuplicates`: its `first` of every column keeps string buffers, which Spark aggregates by sorting
    all the rows (a million records: 11-15 s). Here only each record_id and its rows' numbers are aggregated,
    by hashing, and counted in the same job; only when a record_id came twice (a copy was read) are the rows
    kept picked by their number, in a join. A million records without copies: one job, no join.
    Without copies the result is a projection of `valid`, computed again by each query that reads it."""
    from pyspark.sql import functions as F

    per_id = valid.groupBy("record_id").agg(F.min(ROW).alias(ROW), F.count("*").alias("copies"))
    rows, ids = per_id.agg(F.sum("copies"), F.count("*")).first()
    if ids < (rows or 0):
        kept = per_id.select(ROW).localCheckpoint()
        valid = valid.join(broadcast_when_small(kept, ids, limit=BROADCAST_MAX_NUMBERS), ROW, "left_semi")
        return valid.select(*AUDIT_RECORDS.column_names).localCheckpoint(), ids
    return valid.select(*AUDIT_RECORDS.column_names), ids


def _new_in_driver(settings: Settings, checked: pa.Table, *, every_record: bool) -> tuple[pa.Table, pa.Table]:
    """`once_per_record_id` and `_not_stored` of a small run's checked rows, in the driver: (every valid record
    read, those `audit_records` does not hold yet), as AUDIT_RECORDS columns. The record_ids stored before are
    read by `deltalake` from the files that can hold the windows read (and for status records, the dates)."""
    valid = checked.filter(pc.is_null(checked["reason"]))
    first_rows = valid.group_by("record_id").aggregate([(ROW, "min")]).column(f"{ROW}_min")
    records = arrow_table(
        AUDIT_RECORDS, valid.filter(pc.is_in(valid[ROW], value_set=first_rows)).select(list(AUDIT_RECORDS.column_names))
    )
    if every_record or not records.num_rows:
        return records, records
    stored = pc.is_in(_id_and_date(records), value_set=_stored_record_ids(settings, records))
    return records, records.filter(pc.invert(pc.fill_null(stored, False)))


def _id_and_date(rows: pa.Table) -> pa.ChunkedArray:
    """Each row's record_id and date as one string: the key `_not_stored` joins on."""
    return pc.binary_join_element_wise(pc.cast(rows["record_id"], pa.string()), pc.cast(rows["date"], pa.string()), "|")


def _stored_record_ids(settings: Settings, records: pa.Table) -> pa.Array:
    """The record_ids and dates (`_id_and_date`) `audit_records` holds in the windows of `records`, and for their
    status records (no window) on their dates."""
    windowed = records.filter(pc.is_valid(records["window_start"]))
    windowless = records.filter(pc.is_null(records["window_start"]))
    filters = []
    if windowed.num_rows:
        filters.append(delta_io.window_filter_of(windowed["window_start"]))
    if windowless.num_rows:
        dates = pa.array(sorted(set(windowless["date"].to_pylist())), pa.date32())
        filters.append(pc.field("date").isin(dates) & pc.field("window_start").is_null())
    found = [
        _id_and_date(read_arrow(lake_of(settings), AUDIT_RECORDS.name, columns=("record_id", "date"), filters=where))
        for where in filters
    ]
    return pa.chunked_array([chunk for keys in found for chunk in keys.chunks], pa.string()).combine_chunks()


def _not_stored(spark: SparkSession, settings: Settings, records):
    """The records whose record_id `audit_records` does not hold yet.

    A record stored before has the same window (none for a status record) and date as its copy read now,
    so only the files that can hold the windows read, or no window, are read of `audit_records`."""
    windows = delta_io.windows_of(records)
    with_window = delta_io.window_predicate(windows)
    windowless = delta_io.date_predicate(d for d, w in windows if w is None)
    if windowless is not None:
        windowless += " AND `window_start` IS NULL"
    where = " OR ".join(f"({named})" for named in (with_window, windowless) if named is not None) or "false"
    existing = delta_io.read_table(spark, lake_of(settings), AUDIT_RECORDS.name).where(where)
    return records.join(existing.select("record_id", "date"), ["record_id", "date"], "left_anti").localCheckpoint()


# -- the run -------------------------------------------------------------------------------------


class _Steps:
    """Logs each step of a run with its duration, so a slow run says where its time went."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def done(self, step: str, **fields) -> None:
        now = time.monotonic()
        log.info("reconcile step done", extra={"step": step, "seconds": round(now - self._last, 1), **fields})
        self._last = now


def read_and_store(
    spark: SparkSession,
    settings: Settings,
    report: ReconcileReport,
    *,
    now_ms: int,
    step: _Steps | None = None,
    memory: RunMemory | None = None,
):
    """The first steps of a run: read every audit topic from the stored offsets, check each message,
    store records and rejects. Returns (sources, the valid records read or None when nothing was new);
    `memory` is given the offsets and cluster states as they are stored now."""
    step = step or _Steps()
    memory = memory or RunMemory()
    delta_io.ensure_tables(
        lake_of(settings),
        (
            AUDIT_RECORDS.name,
            AUDIT_REJECTS.name,
            TIER_COUNTS.name,
            TIER_STATUS.name,
            COMPLETENESS.name,
            PARTITION_STATUS.name,
            TIER_POINTS.name,
            SOURCE_OFFSETS.name,
            CLUSTER_READS.name,
            RETENTION_GAPS.name,
            COMPLETENESS_WATERMARKS.name,
            RESTATEMENTS.name,
        ),
    )
    step.done("tables ready")
    if memory.offsets is None:
        memory.offsets = stored_offsets(settings)
    sources = audit_sources(settings, memory.offsets, unreachable=report.unreachable)
    memory.cluster_states = store_cluster_reads(settings, report.unreachable, now_ms, memory.cluster_states)
    report.read = sum(source.pending for source in sources)
    step.done("offsets", messages=report.read)
    if not report.read:
        return sources, None
    checker = RecordChecker.from_settings(settings, now_ms)
    if report.read <= DRIVER_MESSAGES:
        checked = check_in_driver(read_new_messages_in_driver(settings, sources), checker)
    else:
        checked = check_messages(read_new_messages(spark, settings, sources), checker)
    records = store_records_and_rejects(spark, settings, checked, report, step)
    step.done("records stored", records=report.records, rejects=report.rejects)
    return sources, records


def reconcile(
    spark: SparkSession, settings: Settings, *, now_ms: int | None = None, memory: RunMemory | None = None
) -> ReconcileReport:
    """One reconciliation run over everything new since the last one (see the module doc).

    `memory`: the session's memory of its previous runs, updated by this one; on an error it must be
    dropped (a new, empty one makes the next run do every step)."""
    began = time.monotonic()
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    memory = memory if memory is not None else RunMemory()
    report = ReconcileReport()
    step = _Steps()
    sources, records = read_and_store(spark, settings, report, now_ms=now_ms, step=step, memory=memory)
    if records is None and memory.is_quiet(report.read, now_ms):
        report.quiet = True
        step.done("nothing new and no window due: not judged", next_due_ms=memory.next_due_ms)
    else:
        judgement = _judge(spark, settings, records, now_ms, step, memory, every_record=report.every_record)
        report.windows = judgement.windows
        store_offsets(settings, sources, known=memory.offsets)
        step.done("offsets stored")
        memory.offsets = {**memory.offsets, **offsets_read_up_to(sources)}
        memory.judged, memory.next_due_ms = True, judgement.next_due_ms
    report.seconds = time.monotonic() - began
    log.info(
        "reconciled",
        extra={
            "read": report.read,
            "records": report.records,
            "rejects": report.rejects,
            "windows": report.windows,
            "quiet": report.quiet,
            "seconds": round(report.seconds, 1),
            "unreachable": ",".join(report.unreachable) or None,
        },
    )
    return report


def _judge(
    spark: SparkSession,
    settings: Settings,
    records,
    now_ms: int,
    step: _Steps,
    memory: RunMemory,
    *,
    every_record: bool = False,
) -> Judgement:
    """Step 3: the tier tables from the records read (None: nothing new; `every_record`: they are all that
    `audit_records` holds; a pyarrow Table: a small run's, re-summed in the driver), then completeness; `memory` is given
    the tiers `tier_counts` holds now. The tier counts are written in the background while the judging goes
    on with the counts just summed; what reads their rows waits for that write, and the step ends (the
    offsets are stored) only once it is done. The tiers counted need no wait: those this run wrote are the
    tiers of its own count records, whichever version of the table the rest are read from."""
    with ThreadPoolExecutor(max_workers=1) as background:
        resummed = None
        if records is not None:  # independent tables: side by side
            resummed, _ = side_by_side(
                lambda: update_tier_counts(spark, settings, records, background=background, every_record=every_record),
                lambda: update_tier_status(spark, settings, records),
            )
            step.done("tier_counts summed and tier_status stored")
        # A new process (or a day on): those stored, before or after this run's write.
        memory.tiers_counted(now_ms, lambda: counted_tiers(settings))
        summed = None if resummed is None else resummed.summed if resummed.summed is not None else resummed.counts
        memory.counted_tiers = counted_tiers(settings, memory.counted_tiers, summed)  # and this run's
        judgement = update_completeness(
            spark,
            settings,
            resummed,
            now_ms=now_ms,
            records=records,
            counted=memory.counted_tiers,
            known=memory.open_books,
            done=step.done,
        )
        if resummed is not None:
            waiting = resummed.stored is not None and not resummed.stored.done()
            resummed.wait_stored()  # raises the write's error
            if waiting:  # logged only when the run waits for it here
                step.done("tier_counts stored")
    memory.open_books = judgement.open_books
    return judgement
