"""[maintenance]: how the lake's Delta tables are kept small and fast for years, and how long the books keep rows.

One table, not a [retention] and a [maintenance], because it is one job's settings: what `kaudit maintain` (and
`reconcile --continuous` between its runs) does, and when. Expiring old rows is one of its steps, beside
compaction, checkpoints, VACUUM and the Delta log's cleanup, all run under the books' lease at the same moment.

A table's `*_days` is how many days of `date` partitions it keeps (0: forever); each must cover what its readers
read, which `check_retention` enforces against the keys that set those readers' lookbacks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, StrictBool, StrictInt, model_validator

from audit.settings.errors import invalid
from audit.settings.fields import PositiveSeconds, SettingsModel, setting

if TYPE_CHECKING:
    from audit.settings.alerts import AlertSettings
    from audit.settings.ui import UiSettings

DEFAULT_VACUUM_RETENTION_HOURS = 168  # Delta's own `delta.deletedFileRetentionDuration`
# Delta's own `delta.logRetentionDuration` is 30 days; past the VACUUM window an old version's files are gone, so
# a longer log only holds history, while each run of `reconcile --continuous` commits (8,640 a day every 10 s).
DEFAULT_LOG_RETENTION_DAYS = 7
# A count record can arrive for a window as long as Kafka keeps a message of it (7 days by default), and its
# window's records are then summed again from `audit_records`: they must still be there, so a week and a day.
MIN_RECORD_DAYS = 8
# The table each `*_days` key keeps, in the order `kaudit maintain` expires them.
KEPT_BY: dict[str, str] = {
    "audit_records": "audit_records_days",
    "audit_rejects": "audit_rejects_days",
    "tier_counts": "tier_counts_days",
    "completeness": "completeness_days",
    "restatements": "restatements_days",
    "alerts": "alerts_days",
}


def _days(days: int) -> int:
    if days < 0:
        raise invalid(f"{days} is negative: a number of days >= 1, or 0 to keep every row")
    return days


def _record_days(days: int) -> int:
    if 0 < days < MIN_RECORD_DAYS:
        raise invalid(
            f"{days} is shorter than {MIN_RECORD_DAYS} days: a late count record (as old as Kafka keeps a message, "
            f"7 days by default) makes the reconciliation sum its window's records again; 0 keeps them forever"
        )
    return _days(days)


def _hours(hours: int) -> int:
    if hours < 1:
        raise invalid(f"{hours} must be a number of hours >= 1 (Delta's default: 168)")
    return hours


def _log_days(days: int) -> int:
    if days < 1:
        raise invalid(f"{days} must be a number of days >= 1 (Delta's default: 30)")
    return days


def _runs(runs: int) -> int:
    if runs < 0:
        raise invalid(f"{runs} is negative: a number of runs >= 1, or 0 to compact in the full pass only")
    return runs


Days = Annotated[StrictInt, AfterValidator(_days)]


class MaintenanceSettings(SettingsModel):
    """What `kaudit maintain` does to the Delta tables of the books, and how `reconcile --continuous` schedules it."""

    key_prefix = "maintenance."

    enabled: StrictBool = setting(
        "reconcile --continuous maintains the tables between its runs (kaudit maintain runs whenever asked)", True
    )
    interval_s: PositiveSeconds = setting("seconds from the start of one maintenance pass to the next", 3600.0)
    compact_every_runs: Annotated[StrictInt, AfterValidator(_runs)] = setting(
        "between full passes, a compaction pass after this many runs that wrote, so the small file and commit each "
        "run leaves do not slow the runs after it until the next full pass (0: compaction in the full pass only)",
        10,
    )
    budget_s: PositiveSeconds = setting(
        "seconds a pass inside reconcile --continuous may hold the next run back (it first uses the wait before "
        "it); a step starts only when its estimated time fits, what is left waits for the next pass",
        60.0,
    )
    vacuum_retention_hours: Annotated[StrictInt, AfterValidator(_hours)] = setting(
        "VACUUM deletes data files unreferenced for longer than this (delta.deletedFileRetentionDuration): "
        "readers and time travel within it are safe",
        DEFAULT_VACUUM_RETENTION_HOURS,
    )
    log_retention_days: Annotated[StrictInt, AfterValidator(_log_days)] = setting(
        "days of Delta log kept behind the newest checkpoint (delta.logRetentionDuration): how far back time "
        "travel reaches; at least vacuum_retention_hours",
        DEFAULT_LOG_RETENTION_DAYS,
    )
    audit_records_days: Annotated[StrictInt, AfterValidator(_record_days)] = setting(
        f"days of audit_records kept (by date partition; 0: forever); at least {MIN_RECORD_DAYS} and ui.days + 1, "
        "and never past the oldest window the books still judge",
        30,
    )
    audit_rejects_days: Days = setting("days of audit_rejects kept (by ingest date; 0: forever)", 30)
    tier_counts_days: Days = setting(
        "days of tier_counts kept (0: forever); the judging reads them for every window completeness holds, so "
        "0 or at least completeness_days (never 0 while completeness_days is not)",
        0,
    )
    completeness_days: Days = setting(
        "days of completeness kept (0: forever); at least ui.days + 1 and alerts.lookback_hours plus "
        "alerts.drop_history_days",
        0,
    )
    restatements_days: Days = setting("days of restatements kept (0: forever); at least the UI's and alerts' days", 0)
    alerts_days: Days = setting(
        "days of the alerts log kept, by window date (0: forever); at least alerts.lookback_hours and ui.days + 1",
        0,
    )

    @model_validator(mode="after")
    def _log_covers_vacuum(self) -> MaintenanceSettings:
        if self.log_retention_days * 24 < self.vacuum_retention_hours:
            raise invalid(
                f"{self.log_retention_days} days is shorter than vacuum_retention_hours "
                f"({self.vacuum_retention_hours} h): time travel inside the VACUUM window needs its log too",
                "log_retention_days",
            )
        return self

    def kept_days(self, table: str) -> int:
        """Days of `table` kept; 0 for a table kept whole (the state tables and the others not named)."""
        return getattr(self, KEPT_BY[table]) if table in KEPT_BY else 0


def reader_needs(ui: UiSettings, alerts: AlertSettings) -> Iterator[tuple[str, int, str]]:
    """(table, days its readers read, the key that says so) for every reader of a table kept by days."""
    ui_days = ui.days + 1  # the UI reads `days` whole date partitions back from today's (dashboards/data.py)
    lookback = math.ceil(alerts.lookback_hours / 24) + 1  # by date partition, as the alerts read
    drops = lookback + alerts.drop_history_days  # traffic drops read that much history before it
    for table in ("audit_records", "tier_counts", "completeness", "restatements", "alerts"):
        yield table, ui_days, "ui.days"
    for table in ("tier_counts", "restatements", "alerts"):
        yield table, lookback, "alerts.lookback_hours"
    yield "completeness", drops, "alerts.drop_history_days"


def check_retention(policy: MaintenanceSettings, ui: UiSettings, alerts: AlertSettings) -> None:
    """Refuse a retention shorter than a reader of its table needs (the UI's and the alerts' lookbacks), naming
    both keys."""
    for table, needed, reader in reader_needs(ui, alerts):
        kept = policy.kept_days(table)
        if kept and kept < needed:
            raise invalid(
                f"{kept} days is shorter than the {needed} days of {table} that {reader} makes its readers read; "
                f"keep at least {needed} (or 0: forever)",
                "maintenance",
                KEPT_BY[table],
            )
    counts, verdicts = policy.tier_counts_days, policy.completeness_days
    if counts and (not verdicts or counts < verdicts):
        held = "forever (0)" if not verdicts else f"{verdicts} days"
        raise invalid(
            f"{counts} days is shorter than maintenance.completeness_days keeps verdicts ({held}): a window judged "
            f"again (a tier joining a topic's path) is judged from its tier_counts, so keep them as long (or 0)",
            "maintenance",
            "tier_counts_days",
        )
