"""`kaudit ui`: serve the Dash audit UI over the Delta tables (loopback unless exposed on purpose)."""

from __future__ import annotations

import argparse
import logging
import tempfile
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from audit.io.lake import Lake, lake_of

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)


def add_command(commands) -> None:
    parser = commands.add_parser(
        "ui",
        help="serve the audit UI (default http://127.0.0.1:8050)",
        description="The Dash audit UI: a completeness heatmap of topics x windows, per-topic counts of every tier, "
        "watermarks and lag, and the alert log. It reads the Delta tables under the lake root with deltalake "
        "(no JVM), rereading them every ui.refresh_s seconds; until the books' first run creates them it serves a "
        "page that waits for it (a lake it cannot reach, or a path holding something else, exits 2). It binds to "
        'ui.host (127.0.0.1: this machine only); to expose it set ui.host = "0.0.0.0" and a login (ui.auth_user, '
        "KAUDIT_UI_AUTH_PASSWORD) or put it behind your own proxy. Page URLs hold their state, so alert emails link to a topic and window.",
    )
    parser.add_argument("--host", help="bind address (default ui.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default ui.port, 8050)")
    parser.add_argument(
        "--sample",
        action="store_true",
        help="serve generated sample tables (a loss, a lagging tier, duplicates) instead of the lake",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from dashboards.app import create_app

    ui = settings.ui.replace(host=args.host or settings.ui.host, port=args.port or settings.ui.port)
    settings = settings.replace(ui=ui)
    if args.sample:
        from dashboards.sample import demo_frames, write_frames

        lake = Lake.of(tempfile.mkdtemp(prefix="kaudit-sample-lake-"))
        write_frames(lake, demo_frames(datetime.now(UTC)))
    else:
        from dashboards.first_run import books_have_run

        lake = lake_of(settings)
        if not books_have_run(lake):
            print(f"no kafka-audit tables at {lake} yet: waiting for the books' first run", flush=True)
    app = create_app(settings, lake=lake)
    log.info(
        "audit UI serving",
        extra={"url": f"http://{ui.host}:{ui.port}", "lake": str(lake), "login": bool(ui.auth_user)},
    )
    print(f"audit UI on http://{ui.host}:{ui.port} (tables: {lake})", flush=True)
    app.run(host=ui.host, port=ui.port, debug=False)
    return 0
