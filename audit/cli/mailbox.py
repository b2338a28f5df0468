"""`kaudit mailbox`: a local SMTP server that saves every email it receives as a file."""

from __future__ import annotations

import argparse

from audit.settings import Settings


def add_command(commands) -> None:
    parser = commands.add_parser(
        "mailbox",
        help="a local SMTP server that saves every email it gets under <state_dir>/mail (for the demo)",
        description="Listens on the configured smtp.host and smtp.port (default 127.0.0.1:8025) and saves each "
        "email as an .eml file under <state_dir>/mail. It accepts anything: loopback demos and tests only.",
    )
    parser.add_argument("--port", type=int, help="port to listen on (default: smtp.port from the configuration)")
    parser.set_defaults(handler=run_mailbox)


def run_mailbox(args: argparse.Namespace, settings: Settings) -> int:
    from audit.local.mailbox import run

    return run(args, settings)
