"""`kaudit config show|keys`: what configuration is in force, and every key there is."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from audit.settings import describe

if TYPE_CHECKING:
    from audit.settings import Settings


def add_command(commands) -> None:
    parser = commands.add_parser(
        "config",
        help="print the configuration in force, or every key with its default",
        description="show: the configuration after the file and KAUDIT_* environment overrides, secrets masked. "
        "keys: every key, its default and what it holds.",
    )
    parser.add_argument("action", choices=["show", "keys"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "show":
        print(json.dumps(settings.redacted(), indent=2))
    else:
        for key, default, text in describe():
            print(f"{key:<30} {default:<28} {text}")
    return 0
