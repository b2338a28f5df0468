"""Detection latency: seconds from a loss's window turning final to the loss email, with live traffic.

    .venv/bin/python -m bench.bench_detection [--losses 5] [--drop-count 5] [--grace-s 30] [--rate 30]

Starts two local clusters (dc1 -> aggregate) in a temporary folder, with 1-minute windows, and the
whole pipeline as services: a counter per cluster, the replicator, the lake job, the continuous
reconciliation (which sends the alert emails) and a mailbox on loopback; then live audited traffic.
The replicator loses --drop-count messages of `orders` in each of --losses consecutive windows, the
first starting a few minutes ahead (start-up). For each of those windows it measures:

- final: when the window turned final for the tier that lost (the aggregate): the moment its
  effective watermark passed window end + grace. That watermark is the lowest of the newest status
  watermarks of every reporter on the path (the dc1 counter, the replicator, the aggregate counter);
  the benchmark reads those status records itself from both audit topics. The books bound a tier by
  the tier before it as it stood when the tier reported (audit/contract/watermark_points.py), which
  can only make them see the window final later than this moment: any delay that adds is measured;
- emailed: when the mailbox received the first email whose X-Kaudit-Alert-Ids names the window's
  loss at the aggregate (the file's modification time).

It prints a row per window, then p50 and max of final -> email (goal: p50 <= 30 s, max <= 60 s), the
window's start -> email (an upper bound of the loss -> email: the dropped messages are the window's
first), and the ratio of the p50 to the median reconcile run of the same pipeline (its baseline: a
loss cannot be emailed faster than one run). Exit 1 when a window's email never came.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email import message_from_bytes, policy
from pathlib import Path

from audit.alerts.rules import ALERTING_STATUS, alert_id
from audit.contract.completeness import INCOMPLETE
from audit.contract.record import Kind, iso, parse
from audit.contract.windows import window_start
from audit.io.clients import client_config
from audit.local.clusters import local_clusters
from audit.local.mailbox import mail_dir
from audit.local.pipeline import (
    DropPlan,
    PipelinePlan,
    create_topics,
    default_config_with,
    start_live_traffic,
    start_services,
)
from audit.local.services import Supervisor
from audit.settings import load_settings

ORIGIN, HUB, TOPIC = "dc1", "aggregate", "orders"
WINDOW_MINUTES = 1
MINUTE_MS = 60_000
START_UP_WINDOWS = 3  # the first loss window starts this many windows ahead: services up and one run done
RUN_SECONDS = re.compile(r"judged in ([\d.]+) s")


@dataclass(frozen=True)
class Status:
    """One status record on the lost topic's path: who reported, when, and its watermark."""

    reporter: tuple[str, str, str, str]  # tier, cluster, service, instance
    emitted_at_ms: int
    watermark_ms: int | None


def on_path(tier: str, cluster: str, topic: str) -> bool:
    """A reporter of dc1's `orders` at the dc1 or the aggregate tier: what the aggregate's watermark is made of."""
    if tier == ORIGIN:
        return cluster == ORIGIN and topic == TOPIC
    if tier == HUB:
        return (cluster == ORIGIN and topic == TOPIC) or (cluster == HUB and topic == f"{ORIGIN}.{TOPIC}")
    return False


def final_at(statuses: Iterable[Status], due_ms: int, reporters: int) -> int | None:
    """The emitted time of the first status after which every one of `reporters` reporters has said
    its watermark is at or past `due_ms`, judging each by its newest status; None if not yet."""
    newest: dict[tuple[str, str, str, str], int | None] = {}
    for status in sorted(statuses, key=lambda s: s.emitted_at_ms):
        newest[status.reporter] = status.watermark_ms
        if len(newest) >= reporters and all(w is not None and w >= due_ms for w in newest.values()):
            return status.emitted_at_ms
    return None


class StatusReader(threading.Thread):
    """Reads the status records of both audit topics (read_committed, as the books) into `statuses`."""

    def __init__(self, settings, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.settings, self.stop = settings, stop
        self.statuses: list[Status] = []

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumers = []
        for cluster in (ORIGIN, HUB):
            consumer = Consumer(
                client_config(self.settings, cluster)
                | {"group.id": f"bench-detection-{cluster}", "auto.offset.reset": "earliest"}
                | {"isolation.level": "read_committed", "enable.auto.commit": False}
            )
            consumer.subscribe([self.settings.audit_topic])
            consumers.append(consumer)
        try:
            while not self.stop.is_set():
                for consumer in consumers:
                    for message in consumer.consume(500, timeout=0.2):
                        self._take(message)
        finally:
            for consumer in consumers:
                consumer.close()

    def _take(self, message) -> None:
        if message.error() or message.value() is None:
            return
        record, _reason = parse(message.value())
        if record is None or record.kind != Kind.STATUS or not on_path(record.tier, record.cluster, record.topic):
            return
        reporter = (record.tier, record.cluster, record.service, record.instance_id)
        self.statuses.append(Status(reporter, record.emitted_at_ms, record.watermark_ms))


def loss_alert_id(window_ms: int) -> str:
    moment = datetime.fromtimestamp(window_ms / 1000, UTC)
    return alert_id(ALERTING_STATUS[INCOMPLETE], ORIGIN, TOPIC, moment, HUB, INCOMPLETE)


def emailed_at(folder: Path) -> dict[str, float]:
    """Alert id -> the time (epoch s) the mailbox saved the first email naming it."""
    first: dict[str, float] = {}
    for path in sorted(folder.glob("*.eml"), key=lambda p: p.stat().st_mtime):
        header = message_from_bytes(path.read_bytes(), policy=policy.default)["X-Kaudit-Alert-Ids"] or ""
        for alert in str(header).split(","):
            first.setdefault(alert.strip(), path.stat().st_mtime)
    return first


def run_seconds(log_path: Path) -> list[float]:
    """Each reconcile run's own time, from the service's log."""
    return [float(m.group(1)) for m in RUN_SECONDS.finditer(log_path.read_text(errors="replace"))]


def write_config(folder: Path, cache_dir: Path, grace_s: int) -> Path:
    """The default with two local clusters (dc1 and the aggregate), 1-minute windows and a mailbox."""
    dc2 = (
        '[[clusters]]\n# A second regional cluster, local too.\nname = "dc2"\n# Empty: local.\nbootstrap_servers = ""\n'
    )
    text = default_config_with(
        [
            ('state_dir = ".kaudit"', f'state_dir = "{folder}"'),
            ('cache_dir = "~/.cache/kafka-audit"', f'cache_dir = "{cache_dir}"'),
            ("window_minutes = 10", f"window_minutes = {WINDOW_MINUTES}"),
            ("grace_s = 300", f"grace_s = {grace_s}"),
            ("flush_interval_s = 10", "flush_interval_s = 5"),
            (
                'tiers = ["producer", "dc1", "dc2", "aggregate", "lake"]',
                'tiers = ["producer", "dc1", "aggregate", "lake"]',
            ),
            (dc2, ""),
            ("default_recipients = []", 'default_recipients = ["kafka-sre@example.com"]'),
        ]
    )
    path = folder / "detection.toml"
    path.write_text(text)
    return path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--losses", type=int, default=5, help="windows that lose messages (default 5)")
    parser.add_argument("--drop-count", type=int, default=5, help="messages lost in each of them (default 5)")
    parser.add_argument("--grace-s", type=int, default=30, help="grace after a window's end, seconds (default 30)")
    parser.add_argument("--rate", type=float, default=30.0, help="live messages per second (default 30)")
    parser.add_argument(
        "--interval-s", type=float, default=10.0, help="seconds between reconcile runs (default 10, as kaudit's)"
    )
    parser.add_argument(
        "--wait-s", type=float, default=240.0, help="how long after the last window's due time to wait (default 240)"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    cache_dir = Path(load_settings().cache_dir).expanduser().resolve()
    with tempfile.TemporaryDirectory(prefix="kaudit-detection-") as folder:
        settings = load_settings(write_config(Path(folder), cache_dir, args.grace_s))
        return measure(args, settings)


def measure(args: argparse.Namespace, settings) -> int:
    now_ms = time.time_ns() // 1_000_000
    first = window_start(now_ms, WINDOW_MINUTES) + START_UP_WINDOWS * MINUTE_MS
    windows = [first + i * MINUTE_MS for i in range(args.losses)]
    plan = PipelinePlan(
        regional=(ORIGIN,),
        hub=HUB,
        drop=DropPlan(ORIGIN, TOPIC, windows[0], args.drop_count, later_windows_ms=tuple(windows[1:])),
        reconcile_interval_s=args.interval_s,
        lake_trigger_s=5.0,
        with_ui=False,
    )
    state = Path(settings.state_dir)
    config = state / "detection.toml"
    supervisor = Supervisor(state, config=config, env={"KAUDIT_CONFIG": str(config), "PYSPARK_PYTHON": sys.executable})
    clusters = local_clusters(settings)
    stop = threading.Event()
    began = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - began:5.0f} s] {text}", flush=True)

    say(f"clusters {ORIGIN} -> {HUB} under {state}")
    clusters.up()
    try:
        supervisor.start("mailbox", "mailbox")
        create_topics(settings, plan)
        start_services(supervisor, settings, plan)
        start_live_traffic(supervisor, plan, rate=args.rate, duration_s=24 * 3600)
        reader = StatusReader(settings, stop)
        reader.start()
        due = {w: w + WINDOW_MINUTES * MINUTE_MS + args.grace_s * 1000 for w in windows}
        say(
            f"losing {args.drop_count} messages of {ORIGIN}.{TOPIC} in each of {len(windows)} windows from "
            f"{iso(windows[0], millis=False)}; the last is due (end + {args.grace_s} s grace) at "
            f"{iso(due[windows[-1]], millis=False)}"
        )
        ids = {w: loss_alert_id(w) for w in windows}
        deadline = due[windows[-1]] / 1000 + args.wait_s
        while time.time() < deadline:
            sent = emailed_at(mail_dir(settings))
            say(f"{sum(ids[w] in sent for w in windows)} of {len(windows)} loss emails received")
            if all(ids[w] in sent for w in windows):
                break
            stop.wait(10.0)
        stop.set()
        reader.join(timeout=10)
        sent = emailed_at(mail_dir(settings))
        runs = run_seconds(supervisor.services["reconcile"].log_path)
    finally:
        stop.set()
        supervisor.stop_all()
        clusters.down()
    return report(args, windows, due, reader.statuses, sent, ids, runs)


def report(args, windows, due, statuses, sent, ids, runs) -> int:
    print()
    print("| window (UTC) | final after its due time | final -> email | end -> email | start -> email |")
    print("|---|---|---|---|---|")
    latencies, from_start = [], []
    for w in windows:
        final_ms = final_at(statuses, due[w], reporters=3)
        email_s = sent.get(ids[w])
        final_text = "never" if final_ms is None else f"{(final_ms - due[w]) / 1000:.1f} s"
        if final_ms is None or email_s is None:
            print(f"| {iso(w, millis=False)} | {final_text} | no email | | |")
            continue
        latencies.append(email_s - final_ms / 1000)
        from_start.append(email_s - w / 1000)
        end_s = email_s - (w + WINDOW_MINUTES * MINUTE_MS) / 1000
        print(
            f"| {iso(w, millis=False)} | {final_text} | {latencies[-1]:.1f} s | {end_s:.1f} s | {from_start[-1]:.1f} s |"
        )
    print()
    if not latencies:
        print("no loss email received")
        return 1
    run_p50 = statistics.median(runs) if runs else float("nan")
    print(
        f"final -> email over {len(latencies)} losses: p50 {statistics.median(latencies):.1f} s, "
        f"max {max(latencies):.1f} s (goal: p50 <= 30 s, max <= 60 s)"
    )
    print(
        f"loss -> email: at most p50 {statistics.median(from_start):.1f} s, max {max(from_start):.1f} s "
        f"(from the window's start; of it {WINDOW_MINUTES * 60} s is the window and {args.grace_s} s the grace)"
    )
    print(
        f"baseline, one reconcile run of this pipeline: median {run_p50:.1f} s over {len(runs)} runs "
        f"(every {args.interval_s:g} s) -> p50 final -> email = {statistics.median(latencies) / run_p50:.2f}x one run"
    )
    return 0 if len(latencies) == len(windows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
