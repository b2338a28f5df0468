"""The reconciliation: every cluster's audit topic in, the books balanced into Delta tables.

One run (`reconcile(spark, settings)`), each step a package of audit/books:
1. read: what is new in the audit topic of EVERY configured cluster, its own and the replicated
   copies (`dc1._audit` on the aggregate), from the offsets the last run stored, so a stalled
   replicator cannot hide the producer's counts;
2. check: every message, against the contract and the deployment's expectations;
3. store: invalid messages into `audit_rejects` with their reason, valid ones into `audit_records` once per
   record_id (a record read twice, from two clusters or two runs, counts once), and the retention gaps they carry;
4. count: re-sums `tier_counts` for the windows that received records, refreshes each reporter's newest
   partition status and from it `tier_status`;
5. judge: re-judges `completeness` for those windows and for every window not yet final
   (audit/contract/completeness.py holds the rules), appends the final windows whose verdict changed to
   `restatements` and refreshes `completeness_watermarks`;
6. stores the offsets it read up to. A crash before that step only makes the next run read the
   same messages again, which the record_id and offset keys absorb.

A run of up to `DRIVER_MESSAGES` audit messages (every usual increment) reads them with confluent-kafka, checks
them with the Python checker and does steps 3 to 5 in the driver (pyarrow, pandas and `deltalake`): a dozen
Spark queries on a few thousand rows cost more in planning than in data (audit/books/read/run_records.py).

The lake is bound once, at the top of a run, and handed to each step with only the settings that step reads.
A long-lived session (`kaudit reconcile --continuous`) passes a `RunMemory` from run to run: the
offsets and cluster states it stored, the tiers `tier_counts` holds, the windows left open and the tiers
on each path (so step 5 need not scan `completeness` for them), and when the first pending window turns
due. A run that reads nothing new before that moment cannot change a verdict and skips steps 4 and 5; a new
process starts with an empty memory and does every step, so a restart gives the same tables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from audit.books.check.checked_rows import check_in_driver, check_messages
from audit.books.check.python_checker import RecordChecker
from audit.books.count.tier_counts import update_tier_counts
from audit.books.count.tier_status import update_tier_status
from audit.books.judge.completeness import Judgement, update_completeness
from audit.books.judge.open_books import OpenBooks
from audit.books.judge.paths import counted_tiers
from audit.books.judge.rules import JudgeRules
from audit.books.read.audit_topics import (
    audit_sources,
    offsets_read_up_to,
    read_new_messages,
    read_new_messages_in_driver,
    store_cluster_reads,
    store_offsets,
    stored_offsets,
)
from audit.books.read.run_records import DRIVER_MESSAGES
from audit.books.store.records import store_records_and_rejects
from audit.contract.names import DEFAULT_AUDIT_TOPIC
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
)
from audit.io import delta_io
from audit.io.lake import lake_of
from audit.io.spark import side_by_side

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.io.lake import Lake
    from audit.settings import Settings

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
    MAX_OPEN_WINDOWS windows (audit/books/judge/completeness.py; more and it is None), and `counted_tiers` what `tier_counts`
    holds, read again from the table once it is COUNTED_TIERS_MAX_AGE_MS old (`tiers_counted`)."""

    offsets: dict[tuple[str, str, int], int] | None = None  # as stored in source_offsets
    cluster_states: dict[str, tuple[bool, str | None]] | None = None  # as stored in cluster_reads
    judged: bool = False  # the last run judged, so `next_due_ms` holds
    next_due_ms: int | None = None  # see audit.books.judge.completeness.Judgement
    counted_tiers: set[tuple[str, str, str]] | None = None  # see audit.books.judge.paths.counted_tiers
    counted_read_ms: int | None = None  # when `counted_tiers` was last read from the table
    open_books: OpenBooks | None = None  # what the last judge step left open

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


class _Steps:
    """Logs each step of a run with its duration, so a slow run says where its time went."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def done(self, step: str, **fields) -> None:
        now = time.monotonic()
        log.info("reconcile step done", extra={"step": step, "seconds": round(now - self._last, 3), **fields})
        self._last = now


# Every table a run writes, created before its first step.
BOOKS_TABLES = (AUDIT_RECORDS, AUDIT_REJECTS, TIER_COUNTS, TIER_STATUS, COMPLETENESS, PARTITION_STATUS, TIER_POINTS)
BOOKS_TABLES += (SOURCE_OFFSETS, CLUSTER_READS, RETENTION_GAPS, COMPLETENESS_WATERMARKS, RESTATEMENTS)


def read_and_store(
    spark: SparkSession,
    settings: Settings,
    report: ReconcileReport,
    *,
    lake: Lake,
    now_ms: int,
    step: _Steps | None = None,
    memory: RunMemory | None = None,
):
    """Steps 1 to 3 of a run: read every audit topic from the stored offsets, check each message, store
    records and rejects. Returns (sources, the valid records read or None when nothing was new);
    `memory` is given the offsets and cluster states as they are stored now."""
    step = step or _Steps()
    memory = memory or RunMemory()
    delta_io.ensure_tables(lake, tuple(table.name for table in BOOKS_TABLES))
    step.done("tables ready")
    if memory.offsets is None:
        memory.offsets = stored_offsets(lake)
    sources = audit_sources(settings, memory.offsets, unreachable=report.unreachable)
    memory.cluster_states = store_cluster_reads(
        lake, settings.cluster_names, report.unreachable, now_ms, memory.cluster_states
    )
    report.read = sum(source.pending for source in sources)
    step.done("offsets", messages=report.read)
    if not report.read:
        return sources, None
    checker = RecordChecker.from_settings(settings, now_ms)
    if report.read <= DRIVER_MESSAGES:
        checked = check_in_driver(read_new_messages_in_driver(settings, sources), checker)
    else:
        checked = check_messages(read_new_messages(spark, settings, sources), checker)
    stored = store_records_and_rejects(spark, lake, checked, done=step.done)
    report.records, report.rejects, report.every_record = stored.new, stored.rejects, stored.every_record
    step.done("records stored", records=report.records, rejects=report.rejects)
    return sources, stored.records


def reconcile(
    spark: SparkSession,
    settings: Settings,
    *,
    now_ms: int | None = None,
    memory: RunMemory | None = None,
    lake: Lake | None = None,
) -> ReconcileReport:
    """One reconciliation run over everything new since the last one (see the module doc).

    `memory`: the session's memory of its previous runs, updated by this one; on an error it must be
    dropped (a new, empty one makes the next run do every step). `lake`: the settings' lake by default."""
    began = time.monotonic()
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    memory = memory if memory is not None else RunMemory()
    lake = lake if lake is not None else lake_of(settings)
    report = ReconcileReport()
    step = _Steps()
    sources, records = read_and_store(spark, settings, report, lake=lake, now_ms=now_ms, step=step, memory=memory)
    if records is None and memory.is_quiet(report.read, now_ms):
        report.quiet = True
        step.done("nothing new and no window due: not judged", next_due_ms=memory.next_due_ms)
    else:
        judging = _Judging(
            spark, lake, JudgeRules.from_settings(settings), settings.cluster_names, now_ms, settings.audit_topic
        )
        judgement = _count_and_judge(judging, records, step, memory, every_record=report.every_record)
        report.windows = judgement.windows
        store_offsets(lake, sources, known=memory.offsets)
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


@dataclass(frozen=True)
class _Judging:
    """What steps 4 and 5 of a run read: the lake and the settings they need."""

    spark: SparkSession
    lake: Lake
    rules: JudgeRules
    cluster_names: tuple[str, ...]
    now_ms: int
    audit_topic: str = DEFAULT_AUDIT_TOPIC


def _count_and_judge(
    judging: _Judging, records, step: _Steps, memory: RunMemory, *, every_record: bool = False
) -> Judgement:
    """Steps 4 and 5: the tier tables from the records read (None: nothing new; `every_record`: they are all that
    `audit_records` holds; a pyarrow Table: a small run's, re-summed in the driver), then completeness; `memory` is
    given the tiers `tier_counts` holds now. The tier counts are written in the background while the judging goes
    on with the counts just summed; what reads their rows waits for that write, and the step ends (the
    offsets are stored) only once it is done. The tiers counted need no wait: those this run wrote are the
    tiers of its own count records, whichever version of the table the rest are read from."""
    spark, lake, now_ms = judging.spark, judging.lake, judging.now_ms
    with ThreadPoolExecutor(max_workers=1) as background:
        resummed = None
        if records is not None:  # independent tables: side by side
            resummed, _ = side_by_side(
                lambda: update_tier_counts(spark, lake, records, background=background, every_record=every_record),
                lambda: update_tier_status(lake, judging.cluster_names, records, audit_topic=judging.audit_topic),
            )
            step.done("tier_counts summed and tier_status stored")
        # A new process (or a day on): those stored, before or after this run's write.
        memory.tiers_counted(now_ms, lambda: counted_tiers(lake))
        summed = None if resummed is None else resummed.summed if resummed.summed is not None else resummed.counts
        memory.counted_tiers = counted_tiers(lake, memory.counted_tiers, summed)  # and this run's
        judgement = update_completeness(
            spark,
            lake,
            judging.rules,
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
