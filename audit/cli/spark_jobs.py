"""`kaudit lake` and `kaudit reconcile`: the two Spark jobs, local by default, any master from config.

Both build their Spark session from the cached jars (`make setup`) with `[spark]`'s master (local[2]) and
conf and the lake's storage settings; under `spark-submit` the submitter's master and jars win.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from audit.hops.runloop import stop_on_signals

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)


def add_command(commands) -> None:
    lake = commands.add_parser(
        "lake",
        help="land a cluster's topics in the Delta bronze table and count them as the lake tier",
        description="A Spark Structured Streaming job from one cluster (default: the last configured, the aggregate) "
        "into the Delta table `bronze` under lake_path. Every micro-batch is written once (Delta transaction ids) and "
        "its counts go to the cluster's audit topic as the `lake` tier, under ids a replay repeats, so a crash and "
        "restart at any moment changes no count and duplicates no row. One lake job per table: while another (of any "
        "cluster) holds the lease of bronze, it refuses with an error naming it (exit 2).",
    )
    lake.add_argument("--cluster", help="cluster to read (default: the last configured cluster)")
    lake.add_argument(
        "--checkpoint", help="stream checkpoint folder (default: <lake_path>/_checkpoints/lake-<cluster>)"
    )
    lake.add_argument(
        "--trigger-s", type=float, default=10.0, help="seconds between micro-batches in continuous mode (default 10)"
    )
    lake.add_argument("--max-offsets-per-trigger", type=int, help="cap on messages per micro-batch (default: no cap)")
    lake.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (default: off)")
    mode = lake.add_mutually_exclusive_group()
    mode.add_argument(
        "--until-caught-up", action="store_true", help="land what is there now, then exit (available-now)"
    )
    mode.add_argument("--max-seconds", type=float, help="run continuously for this many seconds, then exit")
    lake.set_defaults(handler=run_lake)

    reconcile = commands.add_parser(
        "reconcile",
        help="balance the books: every cluster's audit topic into the Delta completeness tables",
        description="Reads what is new in the audit topic of every configured cluster, checks each record (rejects "
        "go to audit_rejects with their reason), counts each record id once, and merges audit_records, tier_counts, "
        "tier_status and completeness under lake_path. Running it twice over the same input changes nothing. "
        "With --continuous it repeats every --interval-s and sends the alert emails after each run. One writer "
        "per lake: while another reconcile or alert holds the lake's lease, it refuses with an error naming it.",
    )
    reconcile.add_argument("--continuous", action="store_true", help="run again every --interval-s until stopped")
    reconcile.add_argument(
        "--interval-s",
        type=float,
        default=10.0,
        help="seconds between the end of a run and the start of the next with --continuous (default 10; a run "
        "that finds nothing new and no window due costs well under a second); sooner when a pending window "
        "turns due: the next run then starts one flush interval after that moment",
    )
    reconcile.add_argument("--max-runs", type=int, help="with --continuous: stop after this many runs")
    reconcile.add_argument("--no-alerts", action="store_true", help="with --continuous: do not send alert emails")
    reconcile.set_defaults(handler=run_reconcile)


def _spark(settings: Settings, name: str):
    from audit.io.spark import session_for

    session = session_for(settings, name)
    session.sparkContext.setLogLevel("ERROR")
    return session


def run_lake(args: argparse.Namespace, settings: Settings) -> int:
    from audit.contract.tables import BRONZE
    from audit.hops.lake.hop import LakeJob, LakeOptions, default_checkpoint
    from audit.io.lake import lake_of
    from audit.io.lease import LakeLease

    cluster = settings.cluster(args.cluster).name if args.cluster else settings.cluster_names[-1]
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, addr=settings.metrics_host)
    options = LakeOptions(
        cluster=cluster,
        checkpoint=args.checkpoint or default_checkpoint(settings, cluster),
        trigger_s=args.trigger_s,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    # One lease per table written: every cluster's lake job lands in bronze, so one of them at a time.
    with LakeLease(lake_of(settings), BRONZE.name, purpose=f"lake --cluster {cluster}"):
        job = LakeJob(_spark(settings, f"kaudit-lake-{cluster}"), settings, options, settings.topics.matches)
        stop = threading.Event()
        stop_on_signals(stop.set)
        stats = job.run(until_caught_up=args.until_caught_up, max_seconds=args.max_seconds, stop=stop)
    print(f"lake {cluster}: {stats.rows:,} rows in {stats.batches} batches; lag {stats.lag:,}")
    return 0


def run_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from audit.books.check.python_checker import import_expectations_early
    from audit.io.lake import lake_of
    from audit.io.lease import LakeLease

    purpose = "reconcile --continuous" if args.continuous else "reconcile"
    with LakeLease(lake_of(settings), "books", purpose=purpose) as lease:  # before Spark starts: refuse at once
        import_expectations_early()  # while the JVM starts
        return _reconcile_runs(args, settings, _spark(settings, "kaudit-reconcile"), lease)


def _reconcile_runs(args: argparse.Namespace, settings: Settings, spark, lease) -> int:
    from audit.books.run import RunMemory, reconcile
    from audit.contract.errors import LakeError
    from audit.io.maintenance import MaintenanceSchedule
    from audit.io.store_errors import settings_store_failure

    stop = threading.Event()
    stop_on_signals(stop.set)
    runs, failed, memory, wrote = 0, False, RunMemory(), True
    maintenance = MaintenanceSchedule(settings)  # between runs, in this lease holder: never beside a run
    while True:
        runs += 1
        try:
            lease.check()
            report = reconcile(spark, settings, memory=memory)
            print(report.line(), flush=True)
            failed, wrote = bool(report.unreachable), not report.quiet
        except LakeError:
            raise  # the lease is lost: another writer has the lake, this one must not commit again
        except Exception as exc:
            if not args.continuous:
                raise
            # A run is idempotent and the next one reads from the stored offsets: a run that failed
            # (a broker gone mid-read, say) is simply done again, never the end of the service.
            error = str(settings_store_failure(settings, exc) or exc)[:500]  # the lake's store: one line
            log.error("reconcile run failed; next run in interval_s", extra={"error": error, "run": runs})
            failed, memory, wrote = True, RunMemory(), True  # it may be half done: the next run does all
        if args.continuous and not args.no_alerts:
            lease.check()
            _alerts(settings)
        if not args.continuous or (args.max_runs and runs >= args.max_runs):
            break
        # The tier before reports its watermark past a due window within one flush; the tier after it counts only
        # once it has reported after that (audit/contract/watermark_points.py): within a second flush; and a cluster
        # tier's counter counts only once it has reported after the replicator into it did (`counted_since`):
        # within a third.
        status_delay_ms = int((3 * settings.flush_interval_s + 1) * 1000)
        wait_s = memory.seconds_to_next_run(args.interval_s, time.time_ns() // 1_000_000, status_delay_ms)
        started = time.monotonic()
        maintained = maintenance.between_runs(lease, wait_s, wrote=wrote)  # within wait_s + maintenance.budget_s
        if maintained is not None:
            print(maintained.line(), flush=True)
        if stop.wait(max(0.0, wait_s - (time.monotonic() - started))):
            break
    return 1 if failed else 0


def _alerts(settings: Settings) -> None:
    from audit.alerts.run import AlertJob, run_alerts
    from audit.contract.errors import LakeError

    try:
        print(run_alerts(AlertJob.of(settings)).summary(), flush=True)
    except LakeError:
        raise  # the books' lease is lost: the alerts log is the books' too
    except Exception as exc:  # an alert failure must not stop the books from being balanced
        log.error("alerts failed", extra={"error": str(exc)})
