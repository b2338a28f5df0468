"""Keeping the books' Delta tables small and fast for years: one implementation, with `deltalake`, whichever
engine wrote a table (Spark's MERGEs and the driver's `deltalake` writes alike).

Per table, in this order (`plan_table` says what is due, `maintain` does it within a time budget):
1. table properties: `delta.logRetentionDuration` and `delta.deletedFileRetentionDuration` as the policy says,
   `delta.checkpointInterval` (a metadata commit, only when they differ), so Spark's own VACUUM and log cleanup
   agree with ours;
2. expiry: rows older than the table's `*_days` deleted by `date` partition (whole files: nothing rewritten);
   `audit_records` and `tier_counts` never past the oldest window the books still judge (not final, pending or
   lagging), which the next run sums or judges again from them;
3. compaction of the date partitions holding `min_small_files` small files or more, newest first;
4. VACUUM (in full) of the data files unreferenced for longer than `vacuum_retention_hours`: every reader, and time
   travel to a version inside it, reads files younger than that;
5. a checkpoint of the version reached, then the log behind it cleaned up past `log_retention_hours`.

Each run of `reconcile --continuous` leaves a small file and a commit in most tables, and every later read pays for
them until the next compaction and checkpoint: on an object store a table load replays each commit since the
checkpoint and a read opens each file. So two things keep a run's cost flat between the full passes, whatever
`interval_s` is: every writer checkpoints each `CHECKPOINT_INTERVAL` commits (a table property, which deltalake
and Spark both follow), and every `compact_every_runs` runs that wrote, a compaction pass (step 3 alone, from a
plan that reads no log listing and no verdicts) rewrites the small files those runs left.

Safe beside a concurrent run because it never runs beside one: a `deltalake` commit (optimize, delete, the
properties) is a conditional put, safe against another `deltalake` writer but not against a Spark driver's commit
on S3, which could be lost. So the caller holds the books' lease (`audit/io/lease.py`): `kaudit maintain` takes it
and refuses while a reconcile or alert holds it; `reconcile --continuous` runs maintenance in the lease holder
between its runs (`MaintenanceSchedule`). Maintenance and runs take turns, and `lease.check()` comes before each
commit step. The state tables (`tier_status`, `_partition_status`, offsets, ...) hold one row per key, not per
day: they are compacted and vacuumed, never expired (a reporter's last status holds its tier's watermark).
`bronze` is the lake job's, under its own lease: not maintained here.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from audit.contract.tables import EVERY_TABLE
from audit.io.lake import Lake

if TYPE_CHECKING:
    from audit.io.lease import LakeLease
    from audit.settings import Settings
    from audit.settings.maintenance import MaintenanceSettings

log = logging.getLogger(__name__)

BOOKS: tuple[str, ...] = tuple(name for name in EVERY_TABLE if name != "bronze")
OPEN = ("pending", "lagging")  # statuses judged again whether final or not (audit/books/judge/in_spark.py, `is_open`)
GUARDED = ("audit_records", "tier_counts")  # summed or judged again for open windows: kept back to the oldest
SMALL_FILE_BYTES = 32 * 1024 * 1024  # a file below this is small: a partition's count of them triggers compaction
TARGET_BYTES = 100 * 1024 * 1024  # deltalake's target file size: it rewrites the files below it
MIN_SMALL_FILES = 4  # a partition holding fewer small files waits: each compaction is a commit and a rewrite
# Spark's default; deltalake's is 100, and a table load on an object store replays each commit since the newest
# checkpoint (about a millisecond each on loopback), so a table written every run would cost up to 100 of them.
CHECKPOINT_INTERVAL = 10
FIRST_BYTES_PER_S = 20e6  # compaction speed assumed until one is measured (a laptop: 50-200 MB/s)
COMMIT = re.compile(r"^(\d{20})\.json$")
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


@dataclass(frozen=True)
class MaintenancePolicy:
    """What maintenance does, in the units `deltalake` takes; `of(settings.maintenance)` for the configured one.
    Built by hand (tests, benches) it is not checked: a 0-hour vacuum is allowed here, never in the configuration."""

    kept_days: Mapping[str, int] = field(default_factory=dict)  # table -> days of date partitions kept; 0: all
    vacuum_retention_hours: int = 168
    log_retention_hours: int = 7 * 24
    min_small_files: int = MIN_SMALL_FILES
    small_file_bytes: int = SMALL_FILE_BYTES

    @classmethod
    def of(cls, settings: MaintenanceSettings) -> MaintenancePolicy:
        from audit.settings.maintenance import KEPT_BY

        kept = {table: settings.kept_days(table) for table in KEPT_BY}
        return cls(kept, settings.vacuum_retention_hours, settings.log_retention_days * 24)

    def properties(self) -> dict[str, str]:
        return {
            "delta.logRetentionDuration": f"interval {self.log_retention_hours} hours",
            "delta.deletedFileRetentionDuration": f"interval {self.vacuum_retention_hours} hours",
            "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
        }


@dataclass(frozen=True)
class TablePlan:
    """What is due for one table: read from its log (and `completeness` for the guard), nothing changed."""

    table: str
    version: int
    files: int
    log_entries: int
    set_properties: bool
    expire_before: date | None  # rows with an earlier date go; None: nothing to expire
    compact: tuple[tuple[date | None, int], ...]  # (partition, bytes of its files below the target), newest first
    checkpoint: bool  # the current version has none
    compact_only: bool = False  # a compaction pass between full ones: no VACUUM, no checkpoint


@dataclass
class TableReport:
    table: str
    files_before: int = 0
    files_after: int = 0
    log_entries_before: int = 0
    log_entries_after: int = 0
    rows_expired: int = 0
    partitions_compacted: int = 0
    files_vacuumed: int = 0
    seconds: float = 0.0
    done: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # steps the budget did not reach: the next pass does them


@dataclass
class MaintenanceReport:
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def unfinished(self) -> tuple[str, ...]:
        return tuple(t.table for t in self.tables if t.left)

    def line(self) -> str:
        files = sum(t.files_before for t in self.tables), sum(t.files_after for t in self.tables)
        entries = sum(t.log_entries_before for t in self.tables), sum(t.log_entries_after for t in self.tables)
        text = (
            f"maintained {len(self.tables)} tables in {self.seconds:.1f} s: files {files[0]:,} -> {files[1]:,}, "
            f"log entries {entries[0]:,} -> {entries[1]:,}, {sum(t.rows_expired for t in self.tables):,} rows expired"
        )
        return text + (f"; left for the next pass: {', '.join(self.unfinished)}" if self.unfinished else "")


class Budget:
    """The time a pass may take: a step starts only when its estimate fits in what is left. A step cannot be
    stopped once started, so a pass overruns by at most one step's misestimate."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self.deadline = clock, math.inf if seconds is None else clock() + seconds
        self.bytes_per_s = FIRST_BYTES_PER_S

    def fits(self, estimate_s: float = 0.0) -> bool:
        return self.deadline - self.clock() > estimate_s

    def learn(self, rewritten: int, seconds: float) -> None:
        if rewritten > 1_000_000 and seconds > 0:
            self.bytes_per_s = rewritten / seconds


def log_listing(lake: Lake, name: str) -> tuple[list[int], list[int]]:
    """The versions of the commits and of the checkpoints in table `name`'s `_delta_log`, listed through
    deltalake's own object store (`DeltaStorageHandler`), on disk and on S3 alike. No `DeltaTable` method of
    deltalake 1.6 lists them: `history()` reads every commit, and nothing gives the checkpoints."""
    from deltalake.exceptions import TableNotFoundError
    from deltalake.fs import DeltaStorageHandler
    from pyarrow.fs import FileSelector

    try:
        store = DeltaStorageHandler(lake.uri(name), options=lake.storage_options())
    except TableNotFoundError:  # a local table's folder that does not exist
        return [], []
    names = [info.base_name for info in store.get_file_info_selector(FileSelector("_delta_log", allow_not_found=True))]
    commits = sorted(int(m[1]) for m in map(COMMIT.match, names) if m)
    return commits, sorted({int(m[1]) for m in map(CHECKPOINT.match, names) if m})


def _partition_files(delta) -> dict[date | None, list[int]]:
    """The sizes of the current files of `delta` per date partition (None: an unpartitioned table)."""
    import pyarrow as pa

    actions = pa.table(delta.get_add_actions(flatten=True))
    sizes = actions.column("size_bytes").to_pylist()
    dates = actions.column("partition.date").to_pylist() if "partition.date" in actions.column_names else None
    found: dict[date | None, list[int]] = {}
    for index, size in enumerate(sizes):
        found.setdefault(dates[index] if dates else None, []).append(size)
    return found


def oldest_open_date(lake: Lake, dates: Sequence[date]) -> date | None:
    """The first of `dates` holding a `completeness` row the books judge again (not final, pending or lagging)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake.exceptions import TableNotFoundError

    if not dates:
        return None
    try:
        verdicts = lake.delta_table("completeness").to_pyarrow_table(
            columns=["date", "final", "status"], filters=[("date", "in", sorted(dates))]
        )
    except TableNotFoundError:
        return None
    is_open = pc.or_(
        pc.invert(pc.fill_null(verdicts["final"], False)), pc.is_in(verdicts["status"], value_set=pa.array(OPEN))
    )
    return pc.min(verdicts.filter(is_open)["date"]).as_py()


def expiry_cutoff(lake: Lake, name: str, days: int, partitions: Sequence[date | None], today: date) -> date | None:
    """The date before which `name`'s rows go (None: none), kept back to the oldest open window when guarded."""
    if not days or EVERY_TABLE[name].partition_by not in (("date",), ()):
        return None
    cutoff = today - timedelta(days=days)
    old = [d for d in partitions if d is not None and d < cutoff]
    if EVERY_TABLE[name].partition_by and not old:
        return None
    if name in GUARDED:
        held = oldest_open_date(lake, old)
        cutoff = min(cutoff, held) if held else cutoff
        if not any(d < cutoff for d in old):
            return None
    return cutoff


def plan_table(
    lake: Lake, name: str, policy: MaintenancePolicy, today: date, *, compact_only: bool = False
) -> TablePlan | None:
    """What maintenance would do to table `name` now; None when it does not exist. `compact_only`: the partitions
    to compact alone, from the table's snapshot (no log listing, no verdicts read for the expiry)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = lake.delta_table(name)
    except TableNotFoundError:
        return None
    partitions = _partition_files(delta)
    due = [
        (partition, sum(size for size in sizes if size < TARGET_BYTES))
        for partition, sizes in partitions.items()
        if sum(size < policy.small_file_bytes for size in sizes) >= policy.min_small_files
    ]
    plan = TablePlan(
        table=name,
        version=delta.version(),
        files=sum(len(s) for s in partitions.values()),
        log_entries=0,
        set_properties=False,
        expire_before=None,
        compact=tuple(sorted(due, key=lambda item: item[0] or date.min, reverse=True)),
        checkpoint=False,
        compact_only=compact_only,
    )
    if compact_only:
        return plan
    commits, checkpoints = log_listing(lake, name)
    configured = delta.metadata().configuration
    return replace(
        plan,
        log_entries=len(commits),
        set_properties=any(configured.get(k) != v for k, v in policy.properties().items()),
        expire_before=expiry_cutoff(lake, name, policy.kept_days.get(name, 0), list(partitions), today),
        checkpoint=not checkpoints or checkpoints[-1] < delta.version(),
    )


def _expire(delta, plan: TablePlan, report: TableReport) -> None:
    assert plan.expire_before is not None  # only due with a cutoff (`_steps`)
    metrics = delta.delete(f"\"date\" < '{plan.expire_before.isoformat()}'")
    report.rows_expired = int(metrics.get("num_deleted_rows") or 0)


def _compact(delta, plan: TablePlan, report: TableReport, budget: Budget, check: Callable[[], None]) -> bool:
    """Compact the due partitions, newest first, while each one's estimate fits; False when some are left."""
    for partition, rewritten in plan.compact:
        if not budget.fits(rewritten / budget.bytes_per_s):
            return False
        check()
        started = time.monotonic()
        filters = None if partition is None else [("date", "=", partition.isoformat())]
        metrics = delta.optimize.compact(partition_filters=filters)
        budget.learn(rewritten, time.monotonic() - started)
        report.partitions_compacted += int(metrics.get("partitionsOptimized") or 0)
    return True


def _steps(delta, plan: TablePlan, policy: MaintenancePolicy, report: TableReport, budget: Budget, check):
    """The steps due for one table, in order, each only while the budget lasts."""
    if plan.set_properties:
        yield "properties", lambda: delta.alter.set_table_properties(policy.properties())
    if plan.expire_before is not None:
        yield "expire", lambda: _expire(delta, plan, report)
    if plan.compact:
        yield "compact", lambda: _compact(delta, plan, report, budget, check)
    if not plan.compact_only:
        yield "vacuum", lambda: _vacuum(delta, policy, report)
        yield "checkpoint", lambda: _checkpoint(delta, plan)


def _checkpoint(delta, plan: TablePlan) -> None:
    """A checkpoint of the version now current, then the log behind it cleaned up past its retention."""
    if plan.checkpoint or delta.version() != plan.version:
        delta.create_checkpoint()
    delta.cleanup_metadata()


def _vacuum(delta, policy: MaintenancePolicy, report: TableReport) -> None:
    """VACUUM in full: every file of the table's folder that no version inside the retention references and
    older than it goes, whichever writer left it (a killed one's too). Not deltalake's lite mode, which knows only
    the removals still in the newest checkpoint: a checkpoint Spark writes (every 10 commits) drops the expired
    ones, and their files would stay forever. The table's deletedFileRetentionDuration was set to the same hours
    first, so Spark's VACUUM agrees."""
    removed = delta.vacuum(
        retention_hours=policy.vacuum_retention_hours, enforce_retention_duration=False, dry_run=False, full=True
    )
    report.files_vacuumed = len(removed)


def maintain_table(
    lake: Lake, plan: TablePlan, policy: MaintenancePolicy, budget: Budget, check: Callable[[], None]
) -> TableReport:
    """Do what `plan` says is due for its table, step by step while `budget` lasts."""
    started = time.monotonic()
    report = TableReport(plan.table, files_before=plan.files, log_entries_before=plan.log_entries)
    delta = lake.delta_table(plan.table)
    for step, run in _steps(delta, plan, policy, report, budget, check):
        if not budget.fits():
            report.left.append(step)
            continue
        if step != "compact":
            check()  # before every commit (the compaction checks before each partition's)
        finished = run()
        (report.done if finished is not False else report.left).append(step)
    after = lake.delta_table(plan.table)
    report.files_after = len(after.file_uris())
    report.log_entries_after = plan.log_entries if plan.compact_only else len(log_listing(lake, plan.table)[0])
    report.seconds = round(time.monotonic() - started, 3)
    log.info("maintenance: table done", extra={**_fields(report), "version": after.version()})
    return report


def _fields(report: TableReport) -> dict:
    return {
        "table": report.table,
        "files": f"{report.files_before}->{report.files_after}",
        "log_entries": f"{report.log_entries_before}->{report.log_entries_after}",
        "rows_expired": report.rows_expired,
        "partitions_compacted": report.partitions_compacted,
        "files_vacuumed": report.files_vacuumed,
        "seconds": report.seconds,
        "done": ",".join(report.done),
        "left": ",".join(report.left),
    }


def maintain(
    lake: Lake,
    policy: MaintenancePolicy | MaintenanceSettings,
    *,
    lease: LakeLease | None = None,
    budget_s: float | None = None,
    tables: Sequence[str] | None = None,
    today: date | None = None,
    compact_only: bool = False,
) -> MaintenanceReport:
    """Maintain the books' tables of `lake` (all of `BOOKS`, or `tables`, in that order) within `budget_s`
    (None: no limit). Its optimize, DELETE and property changes are `deltalake` commits of their own (conditional
    puts), which on S3 could make a concurrent Spark commit be lost: the caller holds the books' lease, so runs and
    maintenance take turns (module doc); with `lease`, `lease.check()` runs before every commit, and a lost lease
    stops the pass with a LakeError. `today` (UTC) dates the expiry. `compact_only`: the compaction pass between
    full ones (module doc); a table with nothing to compact is left unreported."""
    if not isinstance(policy, MaintenancePolicy):
        policy = MaintenancePolicy.of(policy)
    today = today or datetime.now(UTC).date()
    budget, started = Budget(budget_s), time.monotonic()
    check = lease.check if lease is not None else (lambda: None)
    report = MaintenanceReport()
    for name in tables or BOOKS:
        if not budget.fits():
            report.tables.append(TableReport(name, left=["all"]))
            continue
        plan = plan_table(lake, name, policy, today, compact_only=compact_only)
        if plan is not None and (plan.compact or not compact_only):
            report.tables.append(maintain_table(lake, plan, policy, budget, check))
    report.seconds = round(time.monotonic() - started, 3)
    log.info(
        "maintenance: pass done", extra={"lake": lake.root, "compact_only": compact_only, "summary": report.line()}
    )
    return report


class MaintenanceSchedule:
    """Maintenance inside `reconcile --continuous`, between runs, in the lease holder: a full pass every
    `maintenance.interval_s`, and between full passes a compaction pass every `compact_every_runs` runs that
    wrote (module doc). A pass may use the wait before the next run plus `budget_s`; tables a full pass did not
    finish go first in the next one, which is then due at once (the backlog of a first pass on an old lake takes
    several)."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        from audit.io.lake import lake_of

        self.lake, self.config, self.clock = lake_of(settings), settings.maintenance, clock
        self.next_at = clock()  # due after the first run
        self.first: tuple[str, ...] = ()  # the tables the last full pass did not finish
        self.runs_written = 0  # runs that wrote since the last pass

    def between_runs(self, lease: LakeLease | None, wait_s: float, *, wrote: bool = True) -> MaintenanceReport | None:
        """The pass due after a run (`wrote`: it committed to the books), within `wait_s + budget_s`; None when
        none is due or maintenance is disabled. A failure is logged and left for the next pass, except a lost
        lease (a LakeError), which must stop the holder."""
        if not self.config.enabled:
            return None
        self.runs_written += wrote
        started = self.clock()
        budget_s = max(wait_s, 0) + self.config.budget_s
        if started >= self.next_at:
            order = (*self.first, *(name for name in BOOKS if name not in self.first))
            report = self._pass(lease, budget_s, tables=order)
            self.first = report.unfinished if report else ()
            self.next_at = self.clock() if report and report.unfinished else started + self.config.interval_s
        elif self.config.compact_every_runs and self.runs_written >= self.config.compact_every_runs:
            report = self._pass(lease, budget_s, compact_only=True)
        else:
            return None
        self.runs_written = 0
        return report

    def _pass(self, lease: LakeLease | None, budget_s: float, **what) -> MaintenanceReport | None:
        from audit.contract.errors import LakeError

        try:
            return maintain(self.lake, self.config, lease=lease, budget_s=budget_s, **what)
        except LakeError:
            raise
        except Exception as exc:  # maintenance must never stop the books from being balanced
            log.error("maintenance failed; tried again at the next pass", extra={"error": str(exc)[:500]})
            return None
