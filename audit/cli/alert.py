"""`kaudit alert`: email the windows that are final and incomplete or over, recoveries and lagging tiers."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from audit.contract.errors import ConfigError
from audit.hops.runloop import stop_on_signals

if TYPE_CHECKING:
    from audit.alerts.run import AlertReport
    from audit.settings import Settings


log = logging.getLogger(__name__)


def add_command(commands) -> None:
    parser = commands.add_parser(
        "alert",
        help="email alerts for final windows below their threshold or over, recoveries, lagging tiers and traffic drops",
        description="Reads the completeness, tier_status and tier_counts Delta tables under the lake root and "
        "emails (through [smtp]) every window that is FINAL for a tier and incomplete or over, a recovery when "
        "such a window later becomes complete, and a lag alert when a tier's watermark is more than "
        "alerts.lag_minutes behind, and a drop alert when a final window's reference count falls below "
        "alerts.drop_fraction of the median of the same time of day over the previous alerts.drop_history_days "
        "days. Recipients come from [[alerts.routes]] by topic, else "
        "alerts.default_recipients. Every alert is logged in the `alerts` table first, so it is never sent "
        "twice and stays pending while SMTP is down. Exit code 3 when alerts were left pending or failed. While "
        "`kaudit reconcile` (which sends them itself with --continuous) holds the lake, it refuses (exit 2).",
    )
    parser.add_argument("--now", help="judge as of this UTC time (ISO 8601, e.g. 2025-03-04T12:00Z); default: now")
    parser.add_argument("--every-s", type=float, help="run again every this many seconds until interrupted")
    parser.set_defaults(handler=run)


def _parse_now(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--now: {text!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise ConfigError(f"--now: {text!r} has no time zone (add Z for UTC)")
    return moment


def run(args: argparse.Namespace, settings: Settings) -> int:
    from audit.alerts.run import AlertJob, run_alerts
    from audit.io.lake import lake_of
    from audit.io.lease import LakeLease

    now = _parse_now(args.now)
    lake = lake_of(settings).require_books()
    job = AlertJob.of(settings, lake)
    stop = threading.Event()
    stop_on_signals(stop.set)
    # The books' lease: alerts are sent by one process at a time, so none is emailed twice (a continuous
    # reconcile sends them itself and holds it).
    with LakeLease(lake, "books", purpose="alert --every-s" if args.every_s else "alert") as lease:
        return _alert_rounds(args, stop, lease, lambda: run_alerts(job, now=now))


def _alert_rounds(args, stop: threading.Event, lease, alert_round: Callable[[], AlertReport]) -> int:
    while True:
        lease.check()
        report = alert_round()
        print(report.summary(), flush=True)
        for error in report.errors:
            print(f"  error: {error}", flush=True)
        if not args.every_s or stop.wait(args.every_s):
            return report.exit_code
