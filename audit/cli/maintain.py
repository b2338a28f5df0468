"""`kaudit maintain`: compaction, checkpoints, VACUUM, log and row retention of the books' Delta tables, once.

The same pass `reconcile --continuous` makes between its runs (audit/io/maintenance.py), under the same lease:
beside a running reconcile or alert it refuses (exit 2) naming the holder.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.settings import Settings


def add_command(commands) -> None:
    maintain = commands.add_parser(
        "maintain",
        help="compact, checkpoint, vacuum and expire old rows of the books' Delta tables",
        description="One maintenance pass over the books' Delta tables under lake_path, as [maintenance] says: rows "
        "older than a table's *_days deleted by date partition, small files of the newest partitions compacted "
        "first, a checkpoint, the Delta log cleaned up past log_retention_days, and VACUUM of files unreferenced "
        "for vacuum_retention_hours. It takes the books' lease: while a reconcile or alert holds it, it refuses "
        "(exit 2) naming the holder; reconcile --continuous does the same work between its runs.",
    )
    maintain.add_argument("--tables", help="comma-separated tables to maintain (default: every table of the books)")
    maintain.add_argument(
        "--budget-s", type=float, help="start no step after this many seconds; the rest is left (default: no limit)"
    )
    maintain.add_argument("--dry-run", action="store_true", help="print what is due per table; change nothing")
    maintain.set_defaults(handler=run_maintain)


def _tables(text: str | None) -> tuple[str, ...]:
    from audit.contract.errors import LakeError
    from audit.io.maintenance import BOOKS

    names = tuple(name.strip() for name in (text or "").split(",") if name.strip())
    unknown = [name for name in names if name not in BOOKS]
    if unknown:
        raise LakeError(f"--tables: {', '.join(unknown)} is not a table of the books (known: {', '.join(BOOKS)})")
    return names or BOOKS


def run_maintain(args: argparse.Namespace, settings: Settings) -> int:
    from audit.io.lake import lake_of
    from audit.io.lease import LakeLease
    from audit.io.maintenance import maintain

    tables, lake = _tables(args.tables), lake_of(settings).require_books()
    if args.dry_run:
        return _dry_run(settings, tables)
    with LakeLease(lake, "books", purpose="maintain") as lease:
        report = maintain(lake, settings.maintenance, lease=lease, budget_s=args.budget_s, tables=tables)
    for table in report.tables:
        print(
            f"{table.table}: files {table.files_before:,} -> {table.files_after:,}, log entries "
            f"{table.log_entries_before:,} -> {table.log_entries_after:,}, {table.rows_expired:,} rows expired, "
            f"{table.partitions_compacted} partitions compacted, {table.files_vacuumed} files vacuumed, "
            f"{table.seconds:.1f} s" + (f"; left: {', '.join(table.left)}" if table.left else "")
        )
    print(report.line(), flush=True)
    return 0


def _dry_run(settings: Settings, tables: tuple[str, ...]) -> int:
    from datetime import UTC, datetime

    from audit.io.lake import lake_of
    from audit.io.maintenance import MaintenancePolicy, plan_table

    policy, today = MaintenancePolicy.of(settings.maintenance), datetime.now(UTC).date()
    for name in tables:
        plan = plan_table(lake_of(settings), name, policy, today)
        if plan is None:
            print(f"{name}: no table yet")
            continue
        expire = f"rows before {plan.expire_before}" if plan.expire_before else "nothing to expire"
        print(
            f"{name}: version {plan.version}, {plan.files:,} files, {plan.log_entries:,} log entries; {expire}; "
            f"{len(plan.compact)} partitions to compact; checkpoint {'due' if plan.checkpoint else 'current'}"
            + ("; retention properties to set" if plan.set_properties else "")
        )
    return 0
