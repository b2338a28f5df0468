"""`kaudit demo`: the whole pipeline on the embedded local default, with two faults it must find."""

from __future__ import annotations

import argparse

from audit.settings import Settings


def add_command(commands) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the whole pipeline locally with two injected faults, and show that both are found",
        description="Starts local clusters dc1, dc2 and aggregate, a local mailbox, counters, replicators, the lake "
        "job, the reconciliation with email alerts and the UI; backfills audited traffic and keeps live traffic "
        "going. The dc1 replicator loses exactly --drop-count messages of orders in one window and the dc2 "
        "replicator stalls for --stall-for-s seconds. Progress lines follow, then a summary. Ctrl-C or `make down` "
        "stops everything.",
    )
    parser.add_argument(
        "--messages", type=int, default=50_000, help="backfilled messages per regional cluster (default 50000)"
    )
    parser.add_argument("--backfill-hours", type=float, default=3.0, help="hours of event time they cover (default 3)")
    parser.add_argument("--drop-count", type=int, default=25, help="messages the dc1 replicator loses (default 25)")
    parser.add_argument(
        "--stall-for-s", type=float, default=240.0, help="how long the dc2 replicator stalls (default 240)"
    )
    parser.add_argument("--rate", type=float, default=20.0, help="live messages per second per cluster (default 20)")
    parser.add_argument(
        "--timeout-s", type=float, default=900.0, help="give up waiting for the faults after this long (default 900)"
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help="a quick run for tests: fewer messages, faster loops, and the stall ends once the tables show it",
    )
    parser.add_argument(
        "--exit-when-found",
        action="store_true",
        help="stop everything and exit once both faults are found (0) or the timeout passes (1)",
    )
    parser.add_argument("--no-ui", action="store_true", help="do not start the UI")
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    from audit.local.demo import run

    return run(args, settings)
