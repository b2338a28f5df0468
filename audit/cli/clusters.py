"""`kaudit clusters up|down|status`: the embedded local Kafka clusters of the configuration."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from audit.local.clusters import LocalClusters, local_clusters

if TYPE_CHECKING:
    from audit.settings import Settings


def add_command(commands) -> None:
    parser = commands.add_parser(
        "clusters",
        help="start, stop or list the local Kafka clusters",
        description="Real Apache Kafka clusters (single-node KRaft) on loopback, one per local cluster of the "
        "configuration, with data and logs under <state_dir>/clusters/<name>.",
    )
    parser.add_argument(
        "action",
        choices=["up", "down", "status"],
        help="up: start (idempotent); down: stop the demo's services, then the clusters; status: list",
    )
    parser.add_argument("names", nargs="*", help="only these clusters (default: every local cluster)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    clusters = local_clusters(settings, args.names)
    if args.action == "up":
        ready = clusters.up()
        for name, seconds in ready.items():
            note = "already running" if seconds == 0.0 else f"ready in {seconds:.1f} s"
            print(f"{name:<12} {clusters[name].bootstrap_servers:<22} {note}")
        print(f"{len(ready)} clusters up in {max(ready.values(), default=0):.1f} s")
    elif args.action == "down":
        from audit.local.services import stop_leftovers

        services = stop_leftovers(settings.state_dir)
        if services:
            print(f"stopped services: {', '.join(services)}")
        clusters.down()
        print(f"stopped: {', '.join(cluster.name for cluster in clusters)}")
    else:
        print_status(clusters)
    return 0


def print_status(clusters: LocalClusters) -> None:
    print(f"{'cluster':<12} {'bootstrap':<22} {'pid':>8}  health")
    for status in clusters.status():
        health = "healthy" if status.healthy else ("starting/unhealthy" if status.pid else "stopped")
        print(f"{status.name:<12} {status.bootstrap_servers or '-':<22} {status.pid or '-':>8}  {health}")
