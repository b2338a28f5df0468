"""`kaudit demo`: the pipeline on the embedded local default, end to end, with a summary."""
from __future__ import annotations

import argparse
import time

from audit.cli_clusters import local_clusters, print_status


def add_command(commands) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the pipeline on the local default (clusters, producers, counters) and summarize",
        description="Starts the local clusters of the configuration, backfills audited traffic into the regional "
        "clusters, counts every cluster, and prints producer vs cluster counts per topic. "
        "Stop everything with `make down` (or `kaudit clusters down`).",
    )
    parser.add_argument("--messages", type=int, default=50_000, help="messages per regional cluster (default 50000)")
    parser.add_argument("--backfill-hours", type=float, default=3.0, help="hours of event time to spread them over (default 3)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings) -> int:
    began = time.monotonic()
    clusters = local_clusters(settings)
    print("starting local Kafka clusters ...")
    clusters.up()
    print_status(clusters)
    from audit.pipeline import audit_regional_traffic

    summary = audit_regional_traffic(settings, messages=args.messages, backfill_hours=args.backfill_hours)
    print(summary.table())
    print(f"\ndemo ready in {time.monotonic() - began:.0f} s. Stop with `make down`.")
    return 0 if summary.exact else 1
