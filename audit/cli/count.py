"""`kaudit count --cluster NAME`: the audit counter of one cluster."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from audit.hops.counter.hop import ClusterCounter, CounterOptions
from audit.hops.runloop import freeze_start_up, stop_on_signals
from audit.hops.upkeep import audit_retention_ms
from audit.io.clients import client_config

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)


def add_command(commands) -> None:
    parser = commands.add_parser(
        "count",
        help="count every message of one cluster into its audit topic (exactly once)",
        description="The audit counter of one cluster. It reads every message of the selected topics "
        "(never the audit topic or internal topics), buckets it by audit time into windows, and every "
        "flush interval writes count deltas, a status record per topic and its consumer offsets in one "
        "Kafka transaction. Run several instances (distinct --instance) to share a cluster's load.",
    )
    parser.add_argument("--cluster", required=True, help="cluster name from the configuration")
    parser.add_argument(
        "--instance", default="0", help="slot name, stable across restarts of this instance (default 0)"
    )
    parser.add_argument("--group-id", help="consumer group (default kaudit-counter-<cluster>)")
    parser.add_argument(
        "--no-by-partition",
        dest="by_partition",
        action="store_false",
        help="leave out counts per partition (they let the reconciliation tell a loss in one partition "
        "from duplicates in another; on by default)",
    )
    parser.add_argument("--flush-interval-s", type=float, help="seconds between transactions (default from config)")
    parser.add_argument(
        "--topic-refresh-s", type=float, default=30.0, help="seconds between topic list refreshes (default 30)"
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (default: off)")
    stop = parser.add_mutually_exclusive_group()
    stop.add_argument("--until-caught-up", action="store_true", help="exit once every assigned partition has no lag")
    stop.add_argument("--max-seconds", type=float, help="exit after this many seconds")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    options = CounterOptions(
        cluster=settings.cluster(args.cluster).name,
        audit_topic=settings.audit_topic,
        window_minutes=settings.window_minutes,
        flush_interval_s=args.flush_interval_s or settings.flush_interval_s,
        instance=args.instance,
        group_id=args.group_id,
        by_partition=args.by_partition,
        digest_exclude=settings.topics.digest_exclude,
        topic_refresh_s=args.topic_refresh_s,
        audit_retention_ms=audit_retention_ms(settings),
    )
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, addr=settings.metrics_host)

    def select(topic: str) -> bool:
        return settings.topics.matches(topic) and not settings.is_audit_topic(args.cluster, topic)

    counter = ClusterCounter(client_config(settings, args.cluster), options, select)
    stop_on_signals(counter.stop)
    freeze_start_up()
    log.info(
        "counter starting", extra={"cluster": options.cluster, "instance": options.instance, "group": options.group}
    )
    stats = counter.run(max_seconds=args.max_seconds, until_caught_up=args.until_caught_up)
    log.info(
        "counter stopped",
        extra={"cluster": options.cluster, "counted": stats.counted, "flushes": stats.flushes, "aborts": stats.aborts},
    )
    return 0
