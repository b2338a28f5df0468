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
        description="Real Apache Kafka clusters (KRaft) on loopback, one per local cluster of the configuration, "
        "with data and logs under <state_dir>/clusters/<name>: a single node by default, or with --brokers N a "
        "controller and N brokers, each a process of its own.",
    )
    parser.add_argument(
        "action",
        choices=["up", "down", "status"],
        help="up: start (idempotent); down: stop the demo's services, then the clusters; status: list",
    )
    parser.add_argument("names", nargs="*", help="only these clusters (default: every local cluster)")
    parser.add_argument(
        "--brokers",
        type=_broker_count,
        default=None,
        metavar="N",
        help="up: brokers per cluster, beside one controller; topics get min(N, 3) replicas and "
        "min.insync.replicas one less (default: as each cluster was first started, else 1: a single node "
        "that is both). A cluster keeps the count it was first started with.",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    clusters = local_clusters(settings, args.names, brokers=args.brokers if args.action == "up" else None)
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


def _broker_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of brokers (1 or more)")
    return int(text)


def print_status(clusters: LocalClusters) -> None:
    """One line per cluster (its single node's pid, or its controller's), then one per broker of a multi-broker
    cluster."""
    print(f"{'cluster':<12} {'bootstrap':<22} {'pid':>8}  health")
    for status in clusters.status():
        health = "healthy" if status.healthy else ("starting/unhealthy" if status.pid else "stopped")
        address = f"controller + {len(status.broker_pids)} brokers" if status.broker_pids else status.bootstrap_servers
        print(f"{status.name:<12} {address or '-':<22} {status.pid or '-':>8}  {health}")
        addresses = status.bootstrap_servers.split(",")
        for node_id, (address, pid) in enumerate(zip(addresses, status.broker_pids, strict=False), start=1):
            print(f"  broker {node_id:<3} {address:<22} {pid or '-':>8}  {'running' if pid else 'stopped'}")
