"""`kaudit mirror --from dc1 --to aggregate`: the replicator between two configured clusters."""

from __future__ import annotations

import argparse
import logging
import signal
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from audit.contract.naming import naming_policy
from audit.hops.faults import DropFault, PauseFault
from audit.hops.replicator.exactly_once import ExactlyOnceReplicator
from audit.hops.replicator.hop import Replicator, ReplicatorOptions
from audit.hops.runloop import freeze_start_up, stop_on_signals
from audit.hops.upkeep import audit_retention_ms
from audit.io.clients import client_config

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)


def add_command(commands) -> None:
    parser = commands.add_parser(
        "mirror",
        help="replicate topics (and the audit topic) from one cluster to another",
        description="A MirrorMaker-style replicator: copies the selected topics of --from to --to with keys, values, "
        "headers, timestamps and partitions preserved, creating missing target topics with the source's partition "
        "count and configs. At least once by default: source offsets are committed only after the target "
        "acknowledged; with --exactly-once, copies and source offsets are committed in one target transaction. "
        "A provenance header stops cycles. Run several instances with the same clusters to "
        "share the load; SIGTERM stops after delivering and committing what is in flight.",
    )
    parser.add_argument("--from", dest="source", required=True, help="source cluster name from the configuration")
    parser.add_argument("--to", dest="target", required=True, help="target cluster name from the configuration")
    parser.add_argument("--naming", choices=["prefix", "identity"], help="target topic names (default from config)")
    parser.add_argument(
        "--topic-refresh-s", type=float, default=30.0, help="seconds between topic list refreshes (default 30)"
    )
    parser.add_argument(
        "--stall-after-s", type=float, default=30.0, help="lag with no progress for this long is a stall (default 30)"
    )
    parser.add_argument(
        "--status-interval-s", type=float, default=10.0, help="seconds between status records (default 10)"
    )
    parser.add_argument(
        "--exactly-once",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy in target transactions with the source offsets stored on the target: no duplicates for "
        "read_committed readers (default: mirror_exactly_once in the configuration, false)",
    )
    parser.add_argument(
        "--instance",
        default="0",
        help="this instance's name, part of its transactional id in exactly-once mode: stable across restarts, "
        "distinct between instances of one --from/--to pair (default 0)",
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (default: off)")
    _add_fault_arguments(parser)
    stop = parser.add_mutually_exclusive_group()
    stop.add_argument("--until-caught-up", action="store_true", help="exit once everything is copied and committed")
    stop.add_argument("--max-seconds", type=float, help="exit after this many seconds")
    parser.set_defaults(handler=run)


def _add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """The drop and pause hooks: messages lost or a stall on purpose, for tests and demos."""
    fault = parser.add_argument_group("fault injection (tests and demos only; never in production)")
    fault.add_argument("--drop-topics", help="regex of source topics to drop messages from")
    fault.add_argument("--drop-count", type=int, help="drop exactly this many messages (in each --drop-window)")
    fault.add_argument("--drop-fraction", type=float, help="drop this fraction of messages")
    fault.add_argument(
        "--drop-window",
        action="append",
        default=[],
        help="drop only messages whose timestamp is in the window starting at this "
        "UTC time (e.g. 2026-11-23T10:20:00Z); repeat it for several windows",
    )
    fault.add_argument(
        "--pause-after-s", type=float, help="stop copying this many seconds after start (a stall on purpose)"
    )
    fault.add_argument(
        "--pause-for-s",
        type=float,
        default=120.0,
        help="how long the pause lasts (default 120); SIGUSR1 to the process ends it sooner",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    source, target = settings.cluster(args.source).name, settings.cluster(args.target).name
    fault = None
    if args.drop_topics:
        fault = DropFault(
            args.drop_topics,
            count=args.drop_count,
            fraction=args.drop_fraction or 0.0,
            windows_ms=tuple(_window_start_ms(text, settings.window_minutes) for text in args.drop_window),
            window_minutes=settings.window_minutes,
        )
    pause = PauseFault(args.pause_after_s, args.pause_for_s) if args.pause_after_s is not None else None
    naming = naming_policy(args.naming or settings.naming, [c.name for c in settings.clusters])
    options = ReplicatorOptions(
        source=source,
        target=target,
        audit_topic=settings.audit_topic,
        window_minutes=settings.window_minutes,
        topic_refresh_s=args.topic_refresh_s,
        stall_after_s=args.stall_after_s,
        status_interval_s=args.status_interval_s,
        audit_retention_ms=audit_retention_ms(settings),
    )
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, addr=settings.metrics_host)
    exactly_once = settings.mirror_exactly_once if args.exactly_once is None else args.exactly_once
    kind = partial(ExactlyOnceReplicator, instance=args.instance) if exactly_once else Replicator
    replicator = kind(
        client_config(settings, source),
        client_config(settings, target),
        options,
        naming,
        settings.topics.matches,
        fault=fault,
        pause=pause,
    )
    stop_on_signals(replicator.stop)
    freeze_start_up()
    if pause is not None:
        signal.signal(signal.SIGUSR1, lambda *_: pause.end())
    stats = replicator.run(max_seconds=args.max_seconds, until_caught_up=args.until_caught_up)
    log.info(
        "mirror stopped",
        extra={
            "source": source,
            "target": target,
            "copied": stats.copied,
            "skipped": stats.skipped,
            "dropped": stats.dropped,
            "errors": stats.errors,
        },
    )
    return 0


def _window_start_ms(text: str, window_minutes: int) -> int:
    from datetime import datetime

    from audit.contract.errors import ConfigError
    from audit.contract.windows import is_aligned, to_ms

    try:
        start = to_ms(datetime.fromisoformat(text))
    except ValueError:
        raise ConfigError(f"--drop-window: {text!r} is not an ISO-8601 UTC time such as 2026-11-23T10:20:00Z") from None
    if not is_aligned(start, window_minutes):
        raise ConfigError(f"--drop-window: {text} is not the start of a {window_minutes}-minute window")
    return start
