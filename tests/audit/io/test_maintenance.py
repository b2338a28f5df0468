"""Maintenance of the books' Delta tables (audit/io/maintenance.py) on real tables: compaction keeps every row,
VACUUM keeps what time travel inside its retention reads, expiry removes old date partitions and nothing else, a
pass keeps to its budget, and beside a Spark writer under the books' lease no result changes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest

from audit.contract.errors import LakeError
from audit.contract.tables import ALERTS, AUDIT_RECORDS, AUDIT_REJECTS, COMPLETENESS, TIER_COUNTS, Table
from audit.io import delta_io
from audit.io.lake import Lake
from audit.io.lease import LakeLease
from audit.io.maintenance import (
    CHECKPOINT_INTERVAL,
    Budget,
    MaintenancePolicy,
    MaintenanceSchedule,
    log_listing,
    maintain,
    plan_table,
)
from audit.settings import Settings
from audit.settings.maintenance import MaintenanceSettings

TODAY = datetime.now(UTC).date()  # `kaudit maintain` expires by the real date
KEEP_ALL = MaintenancePolicy(min_small_files=2)


def _row(table: Table, i: int, day: date, **more) -> dict:
    window = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(minutes=10 * (i % 144))
    keys = {
        "audit_records": {"record_id": f"r{i}", "kind": "count", "tier": "dc1", "count": i},
        "audit_rejects": {"read_from_cluster": "dc1", "read_from_topic": "_audit", "read_from_partition": 0},
        "tier_counts": {"tier": "dc1", "count": i},
        "completeness": {"tier": "lake", "final": True, "status": "complete", "observed": i},
        "alerts": {"alert_id": f"a{i}", "kind": "loss"},
    }[table.name]
    if table.name == "audit_rejects":
        keys["read_from_offset"] = i
    elif table.name != "alerts":
        keys |= {"origin_cluster": "dc1", "topic": f"t{i % 3}", "window_start": window}
    return {**keys, "date": day, **({"window_start": window} if table.name == "alerts" else {}), **more}


def small_files(lake: Lake, table: Table, appends: int, days: int, *, at_once: bool = False, **more) -> None:
    """`appends` rows over the `days` dates up to TODAY: appended one by one (a file and a commit each), or
    `at_once` (one commit, a file per date)."""
    delta_io.ensure_table(lake, table)
    made = [_row(table, i, TODAY - timedelta(days=i % days), **more) for i in range(appends)]
    for batch in [made] if at_once else [[row] for row in made]:
        delta_io.append_from_driver(lake, table, batch)


def rows(lake: Lake, name: str, version: int | None = None) -> list[tuple]:
    delta = lake.delta_table(name)
    if version is not None:
        delta.load_as_version(version)
    return sorted(tuple(str(v) for v in row.values()) for row in delta.to_pyarrow_table().to_pylist())


def by_date(lake: Lake, name: str) -> Counter:
    return Counter(lake.delta_table(name).to_pyarrow_table(columns=["date"])["date"].to_pylist())


def test_compaction_brings_many_small_files_down_to_few_and_every_row_is_unchanged(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    for table in (AUDIT_RECORDS, COMPLETENESS, ALERTS):
        small_files(lake, table, appends=16, days=4)
    before = {name: rows(lake, name) for name in ("audit_records", "completeness", "alerts")}

    report = maintain(lake, KEEP_ALL, tables=tuple(before), today=TODAY)

    tables = {t.table: t for t in report.tables}
    for name, table in tables.items():
        assert table.files_before == 16 and table.log_entries_before == 17, table
        assert table.files_after == (1 if name == "alerts" else 4), table  # one file per date partition
        assert rows(lake, name) == before[name], name
        assert table.done == ["properties", "compact", "vacuum", "checkpoint"] and not table.left
    assert lake.delta_table("audit_records").metadata().configuration["delta.logRetentionDuration"] == (
        "interval 168 hours"
    )
    versions = {name: lake.version(name) for name in before}
    again = maintain(lake, KEEP_ALL, tables=tuple(before), today=TODAY)
    assert {name: lake.version(name) for name in before} == versions  # a maintained table: nothing to commit
    assert [t.done for t in again.tables] == [["vacuum", "checkpoint"]] * 3


def test_vacuum_keeps_what_time_travel_inside_its_retention_reads_and_removes_the_rest(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    small_files(lake, TIER_COUNTS, appends=20, days=2)
    old_version, old_rows = lake.version("tier_counts"), rows(lake, "tier_counts")

    inside = maintain(lake, KEEP_ALL, tables=("tier_counts",), today=TODAY)  # 168 h: the small files stay
    assert inside.tables[0].files_after == 2 and inside.tables[0].files_vacuumed == 0
    assert rows(lake, "tier_counts", version=old_version) == old_rows  # time travel to before the compaction

    outside = maintain(lake, MaintenancePolicy(vacuum_retention_hours=0), tables=("tier_counts",), today=TODAY)
    assert outside.tables[0].files_vacuumed == 20  # the compacted-away files, unreferenced for > 0 h
    assert rows(lake, "tier_counts") == old_rows
    with pytest.raises(FileNotFoundError):
        rows(lake, "tier_counts", version=old_version)


def test_a_short_log_retention_leaves_the_checkpoint_and_little_log(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    small_files(lake, AUDIT_REJECTS, appends=30, days=3)
    before, version = rows(lake, "audit_rejects"), lake.version("audit_rejects")

    report = maintain(lake, MaintenancePolicy(log_retention_hours=0), tables=("audit_rejects",), today=TODAY)

    assert (report.tables[0].log_entries_before, report.tables[0].log_entries_after) == (31, 1)
    commits, checkpoints = log_listing(lake, "audit_rejects")
    assert commits == checkpoints == [lake.version("audit_rejects")]
    assert rows(lake, "audit_rejects") == before
    with pytest.raises(Exception, match="No files in log segment"):  # outside the log's retention: gone
        rows(lake, "audit_rejects", version=version)


def test_expired_rows_are_gone_and_nothing_else(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    for table in (AUDIT_RECORDS, AUDIT_REJECTS, TIER_COUNTS, COMPLETENESS, ALERTS):
        small_files(lake, table, appends=60, days=20, at_once=True)
    counts = {name: by_date(lake, name) for name in ("audit_records", "audit_rejects", "completeness", "alerts")}
    kept = {"audit_records": 8, "audit_rejects": 12, "alerts": 15}  # completeness: 0, forever

    report = maintain(lake, MaintenancePolicy(kept_days=kept), today=TODAY)

    expired = {t.table: t.rows_expired for t in report.tables}
    for name, before in counts.items():
        cutoff = TODAY - timedelta(days=kept.get(name, 0)) if name in kept else date.min
        assert by_date(lake, name) == Counter({d: n for d, n in before.items() if d >= cutoff}), name
        assert expired[name] == sum(n for d, n in before.items() if d < cutoff), name
    assert min(by_date(lake, "audit_records")) == TODAY - timedelta(days=8)
    assert expired["completeness"] == expired["tier_counts"] == 0


def test_the_summed_tables_are_kept_back_to_the_oldest_window_still_judged(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    for table in (AUDIT_RECORDS, AUDIT_REJECTS, TIER_COUNTS, COMPLETENESS):
        small_files(lake, table, appends=40, days=20, at_once=True)
    lagging = TODAY - timedelta(days=15)  # a tier stuck for 15 days: its windows are judged again every run
    delta_io.append_from_driver(lake, COMPLETENESS, [_row(COMPLETENESS, 999, lagging, final=False, status="lagging")])
    kept = {"audit_records": 8, "audit_rejects": 8, "tier_counts": 8, "completeness": 10}

    maintain(lake, MaintenancePolicy(kept_days=kept), today=TODAY)

    assert min(by_date(lake, "audit_records")) == min(by_date(lake, "tier_counts")) == lagging
    assert min(by_date(lake, "audit_rejects")) == TODAY - timedelta(days=8)  # not summed again: not held
    assert min(by_date(lake, "completeness")) == TODAY - timedelta(days=10)


def test_a_pass_keeps_to_its_budget_and_compacts_the_newest_partitions_first(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    small_files(lake, COMPLETENESS, appends=12, days=4)
    small_files(lake, COMPLETENESS, appends=1, days=1)  # a fourth file on TODAY

    plan = plan_table(lake, "completeness", MaintenancePolicy(min_small_files=4), TODAY)
    assert [partition for partition, _ in plan.compact] == [TODAY]  # three files elsewhere: they wait
    plan = plan_table(lake, "completeness", KEEP_ALL, TODAY)
    assert [partition for partition, _ in plan.compact] == [TODAY - timedelta(days=d) for d in range(4)]

    version = lake.version("completeness")
    spent = maintain(lake, KEEP_ALL, budget_s=0.0, today=TODAY)
    assert lake.version("completeness") == version and all(t.left == ["all"] for t in spent.tables)
    assert "left for the next pass: audit_records" in spent.line()

    now = [0.0]
    budget = Budget(10.0, clock=lambda: now[0])
    assert budget.fits(9.0) and not budget.fits(10.0)
    now[0] = 9.5
    assert budget.fits() and not budget.fits(1.0)
    budget.learn(50_000_000, 0.5)
    assert budget.bytes_per_s == 100_000_000


def test_the_configured_policy_is_what_deltalake_is_given():
    policy = MaintenancePolicy.of(MaintenanceSettings(audit_records_days=10, log_retention_days=8))
    assert policy.kept_days["audit_records"] == 10 and policy.kept_days["completeness"] == 0
    assert policy.properties() == {
        "delta.logRetentionDuration": "interval 192 hours",
        "delta.deletedFileRetentionDuration": "interval 168 hours",
        "delta.checkpointInterval": "10",
    }


def test_once_a_pass_set_the_properties_every_writer_checkpoints_each_interval_of_commits(tmp_path):
    """A table load replays the commits since the newest checkpoint: without the property deltalake's writes
    checkpoint every 100 commits, and a table written each run would replay up to 100."""
    lake = Lake.of(tmp_path / "lake")
    small_files(lake, COMPLETENESS, appends=1, days=1)
    maintain(lake, KEEP_ALL, tables=["completeness"], today=TODAY)
    small_files(lake, COMPLETENESS, appends=3 * CHECKPOINT_INTERVAL, days=1)
    _commits, checkpoints = log_listing(lake, "completeness")
    version = lake.version("completeness")
    assert version > 3 * CHECKPOINT_INTERVAL
    assert version - checkpoints[-1] < CHECKPOINT_INTERVAL, (version, checkpoints)
    assert sum(c > 1 for c in checkpoints) >= 3


def test_between_full_passes_a_compaction_pass_follows_every_compact_every_runs_runs_that_wrote(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    maintenance = Settings().maintenance.replace(interval_s=100.0, compact_every_runs=3)
    now = [0.0]
    schedule = MaintenanceSchedule(Settings(lake_path=lake.root).replace(maintenance=maintenance), lambda: now[0])
    small_files(lake, COMPLETENESS, appends=2, days=1)
    first = schedule.between_runs(None, 0.0)
    assert first is not None and "vacuum" in first.tables[0].done and "checkpoint" in first.tables[0].done

    small_files(lake, COMPLETENESS, appends=6, days=1)  # small files of runs since
    now[0] = 50.0
    assert schedule.between_runs(None, 0.0) is None
    assert schedule.between_runs(None, 0.0, wrote=False) is None  # a quiet run left nothing
    assert schedule.between_runs(None, 0.0) is None
    compaction = schedule.between_runs(None, 0.0)
    assert compaction is not None
    assert [(t.table, t.done) for t in compaction.tables] == [("completeness", ["compact"])]
    assert compaction.tables[0].files_before > 1 and compaction.tables[0].files_after == 1

    now[0] = 100.0
    full = schedule.between_runs(None, 0.0, wrote=False)
    assert full is not None and "vacuum" in full.tables[0].done


def lake_commits(lake: Lake) -> int:
    return len(log_listing(lake, "tier_counts")[0])


# -- beside a writer ---------------------------------------------------------------------------------------


BATCHES = 4


def _batches(spark, count: int):
    """Reconcile-like increments of tier_counts: each re-sums some windows already stored and adds new ones."""
    for batch in range(count):
        empty = dict.fromkeys(TIER_COUNTS.column_names)
        yield spark.createDataFrame(
            [
                empty | _row(TIER_COUNTS, i, TODAY - timedelta(days=i % 3), count=i * 10 + batch, records=batch)
                for i in range(batch * 4, batch * 4 + 8)
            ],
            delta_io.spark_schema(TIER_COUNTS),
        ).select(*TIER_COUNTS.column_names)


def _write(spark, lake: Lake, batch) -> None:
    delta_io.upsert(spark, lake, TIER_COUNTS, batch, ignore=(), dates=[TODAY - timedelta(days=d) for d in range(3)])


@pytest.mark.spark
def test_maintenance_beside_a_spark_writer_under_the_lease_changes_no_result(spark, tmp_path):
    """A reconcile-like writer (Spark MERGEs through audit.io.delta_io, each run under the books' lease) and
    `kaudit maintain` processes started while it runs: while one holds the lease the other refuses, naming it
    (maintain exits 2; the writer's run is refused and done again, as the next run of a schedule would), and
    afterwards the table holds exactly what a clean run without maintenance holds."""
    clean, busy = Lake.of(tmp_path / "clean"), Lake.of(tmp_path / "busy")
    for batch in _batches(spark, BATCHES):
        _write(spark, clean, batch)
    config = tmp_path / "kaudit.toml"
    config.write_text(f'lake_path = "{busy.root}"\n[maintenance]\nvacuum_retention_hours = 1\nlog_retention_days = 1\n')
    delta_io.ensure_table(busy, TIER_COUNTS)
    refused, done = [], threading.Event()

    def writer() -> None:
        for batch in _batches(spark, BATCHES):
            while True:
                try:
                    with LakeLease(busy, "books", purpose="reconcile (test writer)") as lease:
                        lease.check()
                        _write(spark, busy, batch)
                    break
                except LakeError as error:
                    refused.append(str(error))
                    time.sleep(0.2)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    exits = []
    while not done.is_set():
        result = subprocess.run(
            [sys.executable, "-m", "audit.cli", "--config", str(config), "maintain"], capture_output=True, text=True
        )
        exits.append(result.returncode)
        assert result.returncode in (0, 2), result.stderr
        if result.returncode == 2:
            assert "'reconcile (test writer)'" in result.stderr and "another writer holds the lake" in result.stderr
    thread.join()
    final = subprocess.run(
        [sys.executable, "-m", "audit.cli", "--config", str(config), "maintain"], capture_output=True, text=True
    )
    assert final.returncode == 0, final.stderr

    assert 2 in exits, exits  # maintain was refused at least once beside the writer
    assert all("'maintain'" in error for error in refused)  # the writer was refused only by maintain
    assert rows(busy, "tier_counts") == rows(clean, "tier_counts")
    assert lake_commits(busy) > lake_commits(clean)  # maintenance committed in between (properties, vacuums)


# -- on the object store -----------------------------------------------------------------------------------


@pytest.mark.object_store
def test_maintenance_on_the_object_store(object_store, s3_lake):
    from audit.settings import Settings
    from audit.settings.storage import StorageSettings

    storage = StorageSettings(
        endpoint=object_store.endpoint,
        access_key_id=object_store.access_key_id,
        secret_access_key=object_store.secret_access_key,
    )
    lake = Lake.from_settings(Settings(lake_path=s3_lake(), storage=storage))
    small_files(lake, AUDIT_RECORDS, appends=24, days=12)
    before = by_date(lake, "audit_records")
    policy = MaintenancePolicy({"audit_records": 8}, vacuum_retention_hours=0, log_retention_hours=0, min_small_files=2)

    report = maintain(lake, policy, tables=("audit_records",), today=TODAY).tables[0]

    assert (report.files_before, report.log_entries_before) == (24, 25)
    assert (report.files_after, report.log_entries_after) == (9, 1)  # one file a date kept, the checkpoint's commit
    assert by_date(lake, "audit_records") == Counter(
        {d: n for d, n in before.items() if d >= TODAY - timedelta(days=8)}
    )
    assert report.rows_expired == 6 and report.files_vacuumed == 24  # the expired files and the compacted ones
