"""`kaudit maintain` and the [maintenance] settings: help, retention values refused naming the keys, the lease
(refused beside a holder, named), a dry run, and the passes `reconcile --continuous` makes between its runs."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from audit.contract.errors import ConfigError
from audit.contract.tables import AUDIT_RECORDS, COMPLETENESS
from audit.io import delta_io
from audit.io.lake import Lake
from audit.io.lease import LakeLease
from audit.settings import Settings, load_settings
from tests.audit.io.test_maintenance import TODAY, _row, small_files


def kaudit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_kaudit_maintain_explains_itself():
    result = kaudit("maintain", "--help")
    assert result.returncode == 0, result.stderr
    for words in ("usage: kaudit maintain", "--dry-run", "--budget-s", "--tables", "lease", "exit 2"):
        assert words in result.stdout, words


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[maintenance]\naudit_records_days = 3\n", ["maintenance.audit_records_days", "8 days"]),
        ("[maintenance]\ncompletenes_days = 30\n", ["maintenance.completenes_days", "completeness_days"]),
        ("[maintenance]\nvacuum_retention_hours = 0\n", ["maintenance.vacuum_retention_hours"]),
        ("[maintenance]\naudit_rejects_days = -1\n", ["maintenance.audit_rejects_days", "negative"]),
        ("[maintenance]\nbudget_s = 0\n", ["maintenance.budget_s"]),
        ("[maintenance]\nlog_retention_days = 3\n", ["maintenance.log_retention_days", "vacuum_retention_hours"]),
        ("[ui]\ndays = 40\n", ["maintenance.audit_records_days", "ui.days", "41 days"]),
        ("[maintenance]\ncompleteness_days = 7\n[ui]\ndays = 3\n", ["completeness_days", "alerts.drop_history_days"]),
        ("[maintenance]\nalerts_days = 2\n[alerts]\nlookback_hours = 72\n[ui]\ndays = 1\n", ["alerts.lookback_hours"]),
        ("[maintenance]\ntier_counts_days = 60\n", ["maintenance.tier_counts_days", "completeness_days"]),
        (
            "[maintenance]\ntier_counts_days = 60\ncompleteness_days = 90\n",
            ["maintenance.tier_counts_days", "maintenance.completeness_days keeps verdicts (90 days)"],
        ),
    ],
)
def test_a_retention_too_short_for_its_readers_is_refused_naming_both_keys(tmp_path, toml, named):
    path = tmp_path / "kaudit.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_settings(path, env={})
    for words in named:
        assert words in str(error.value), str(error.value)


def test_a_bad_retention_value_exits_2_naming_the_key(tmp_path):
    result = kaudit("maintain", env={"KAUDIT_MAINTENANCE_AUDIT_RECORDS_DAYS": "5"})
    assert result.returncode == 2 and "maintenance.audit_records_days" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_defaults_respect_every_reader_and_longer_retentions_load(tmp_path):
    defaults = Settings.default().maintenance
    assert (defaults.audit_records_days, defaults.completeness_days, defaults.tier_counts_days) == (30, 0, 0)
    assert (defaults.vacuum_retention_hours, defaults.log_retention_days) == (168, 7)
    path = tmp_path / "kaudit.toml"
    path.write_text("[maintenance]\ncompleteness_days = 400\ntier_counts_days = 400\nalerts_days = 8\n")
    assert load_settings(path, env={}).maintenance.completeness_days == 400


def books(tmp_path) -> tuple[Lake, str]:
    """A local lake with small files in audit_records, and a configuration naming it."""
    lake = Lake.of(tmp_path / "lake")
    small_files(lake, AUDIT_RECORDS, appends=8, days=2)
    config = tmp_path / "kaudit.toml"
    config.write_text(f'lake_path = "{lake.root}"\n')
    return lake, str(config)


def test_maintain_refuses_beside_the_books_lease_holder_naming_it_then_runs(tmp_path):
    lake, config = books(tmp_path)
    with LakeLease(lake, "books", purpose="reconcile --continuous"):
        refused = kaudit("--config", config, "maintain")
        assert refused.returncode == 2
        assert "'reconcile --continuous'" in refused.stderr and f"pid {os.getpid()}" in refused.stderr
        assert lake.version("audit_records") == 8  # nothing committed
    done = kaudit("--config", config, "maintain")
    assert done.returncode == 0, done.stderr
    assert "audit_records: files 8 -> 2, log entries 9 -> 12" in done.stdout  # + the properties, 2 compactions
    assert "maintained 1 tables" in done.stdout


def test_a_dry_run_says_what_is_due_and_changes_nothing(tmp_path):
    lake, config = books(tmp_path)
    result = kaudit("--config", config, "maintain", "--dry-run", "--tables", "audit_records,completeness")
    assert result.returncode == 0, result.stderr
    assert "audit_records: version 8, 8 files, 9 log entries; nothing to expire; 2 partitions" in result.stdout
    assert "completeness: no table yet" in result.stdout and lake.version("audit_records") == 8
    unknown = kaudit("--config", config, "maintain", "--tables", "bronze")
    assert unknown.returncode == 2 and "bronze is not a table of the books" in unknown.stderr


def test_maintain_on_a_lake_without_books_says_so(tmp_path):
    config = tmp_path / "kaudit.toml"
    config.write_text(f'lake_path = "{tmp_path / "nothing"}"\n')
    result = kaudit("--config", str(config), "maintain")
    assert result.returncode == 2 and "no kafka-audit tables" in result.stderr


class FakeRun:
    unreachable: dict = {}
    quiet = False

    def line(self) -> str:
        return "a reconcile-like run"


def test_reconcile_continuous_maintains_between_its_runs_in_the_lease_holder(tmp_path, monkeypatch, capsys):
    """The continuous loop with the books' run replaced by small appends: a maintenance pass between runs when due,
    in the lease holder (its check before each commit), its report printed."""
    import audit.books.run as books
    from audit.cli import spark_jobs

    lake = Lake.of(tmp_path / "lake")
    small_files(lake, COMPLETENESS, appends=6, days=1)
    runs = []

    def run(spark, settings, memory):
        runs.append(lake.version("completeness"))
        delta_io.append_from_driver(lake, COMPLETENESS, [_row(COMPLETENESS, 100 + len(runs), TODAY)])
        return FakeRun()

    monkeypatch.setattr(books, "reconcile", run)
    monkeypatch.setattr(spark_jobs, "stop_on_signals", lambda stop: None)  # pytest keeps its own handlers
    settings = Settings(lake_path=lake.root).replace(
        maintenance=Settings().maintenance.replace(interval_s=3600.0, budget_s=5.0, compact_every_runs=0)
    )
    checks = []
    with LakeLease(lake, "books", purpose="reconcile --continuous") as lease:
        monkeypatch.setattr(lease, "check", lambda: checks.append(lease.valid()))
        args = argparse.Namespace(continuous=True, no_alerts=True, max_runs=3, interval_s=0.0)
        assert spark_jobs._reconcile_runs(args, settings, None, lease) == 0

    out = capsys.readouterr().out
    assert out.count("a reconcile-like run") == 3 and out.count("maintained") == 1  # once: next due in an hour
    assert all(checks) and len(checks) > 3  # before each run and each maintenance commit
    assert lake.delta_table("completeness").metadata().configuration["delta.deletedFileRetentionDuration"]
