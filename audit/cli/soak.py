"""`kaudit soak`: the whole pipeline under steady load while faults are injected at random."""

from __future__ import annotations

import argparse
from pathlib import Path

from audit.settings import Settings


def add_command(commands) -> None:
    parser = commands.add_parser(
        "soak",
        help="run the pipeline under load with random faults (kill -9, broker crash), then check invariants 1-8",
        description="A bounded fault-injection soak on its own local clusters dc1, dc2 -> aggregate (state under "
        "--state-dir, default <state_dir>/soak; the demo's clusters are never touched). Backfills an hour of audited "
        "traffic with an exact loss of --drop-count messages in one window, then keeps live traffic going for "
        "--minutes while it injects, one at a time and seeded: kill -9 of a counter, a replicator or the lake job "
        "(restarted), a broker killed and restarted, the reconciliation killed mid-run (rerun). Then it lets every "
        "service catch up, runs a final reconciliation, checks invariants 1-8 of docs/reliability.md against the "
        "ground truth (what the producers got acknowledged, what each topic and the lake really hold) and prints a "
        "report. Exit code 0: every one held; 1: one failed.",
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of live load with faults (default 10)")
    parser.add_argument(
        "--seed", type=int, help="random seed of the fault schedule and the loss (default: random, printed)"
    )
    parser.add_argument(
        "--rate", type=float, default=20.0, help="live messages per second per regional cluster (default 20)"
    )
    parser.add_argument(
        "--backfill-messages",
        type=int,
        default=6000,
        help="messages per regional cluster spread over the last hour before the live load (default 6000)",
    )
    parser.add_argument(
        "--drop-count", type=int, help="messages the dc1 replicator loses in one window (default: 3-12, seeded)"
    )
    parser.add_argument(
        "--fault-gap-s", type=float, default=30.0, help="mean seconds between the starts of two faults (default 30)"
    )
    parser.add_argument(
        "--state-dir", type=Path, help="the soak's own folder, wiped at start (default <state_dir>/soak)"
    )
    parser.add_argument(
        "--report-json", type=Path, help="also write the report as JSON here (default <soak dir>/report.json)"
    )
    parser.add_argument(
        "--exactly-once",
        nargs="?",
        const="all",
        default="",
        metavar="CLUSTERS",
        help="run the replicators with --exactly-once: all of them, or only those from CLUSTERS (comma-separated, "
        "e.g. dc2: one soak then runs both modes); the hub must hold no duplicate of their topics. The others run "
        "at least once, and their duplicates after kills must be reported as over (default: all at least once)",
    )
    parser.add_argument(
        "--no-exactly-once",
        dest="exactly_once",
        action="store_const",
        const="",
        help="every replicator at least once (the default)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the soak's clusters running afterwards, for a look")
    _add_cluster_options(parser)
    parser.set_defaults(handler=run_soak)


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--brokers",
        type=int,
        metavar="N",
        help="brokers per local cluster (default 1): with more, a broker fault kills one broker of a cluster, whose "
        "replicas on the others (replication factor min(N, 3)) must lose nothing",
    )


def run_soak(args: argparse.Namespace, settings: Settings) -> int:
    from audit.local.soak import run

    return run(args, settings)
