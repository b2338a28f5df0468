"""`kaudit`: one entry point, a subcommand per job. `kaudit --help` lists them."""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from pathlib import Path

from audit.contract.errors import KafkaAuditError
from audit.io.logs import setup_logging
from audit.io.store_errors import settings_store_failure

log = logging.getLogger("kaudit")

DESCRIPTION = """\
kafka-audit: per topic and 10-minute window, did every message reach every tier?

Every command reads one configuration: --config FILE, else $KAUDIT_CONFIG, else the built-in
default (three local clusters dc1, dc2 -> aggregate). `kaudit config show` prints it.
"""


def build_parser() -> argparse.ArgumentParser:
    from audit.cli import (
        alert,
        clusters,
        config,
        count,
        demo,
        mailbox,
        mirror,
        producer_config,
        soak,
        spark_jobs,
        spark_submit,
        ui,
    )
    from audit.cli.maintain import add_command as add_maintain
    from producers import loadgen

    parser = argparse.ArgumentParser(
        prog="kaudit", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", type=Path, help="TOML configuration file (default: $KAUDIT_CONFIG or the built-in local default)"
    )
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    parser.add_argument(
        "--log-format", choices=["kv", "json"], default=None, help="log lines as key=value (default) or JSON"
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for module in (
        clusters,
        config,
        loadgen,
        producer_config,
        count,
        mirror,
        spark_jobs,
        spark_submit,
        alert,
        ui,
        mailbox,
        demo,
        soak,
    ):
        module.add_command(commands)
    add_maintain(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    settings = None
    try:
        from audit.settings import load_settings

        settings = load_settings(args.config)
        return int(args.handler(args, settings) or 0)
    except KafkaAuditError as exc:  # a job's error may carry the object store's own (a Spark stack trace)
        return _error(str(settings_store_failure(settings, exc) or exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a user must see what failed and where, never a traceback (that goes to the log)
        log.debug("unexpected error", exc_info=True)
        if failure := settings_store_failure(settings, exc):  # the lake's store: its cause, not its raw answer
            return _error(str(failure))
        where = _origin(exc)
        return _error(f"{type(exc).__name__}: {exc} (in {where}); run again with --log-level DEBUG for the traceback")


def _error(message: str) -> int:
    print(f"kaudit: error: {message}", file=sys.stderr)
    return 2


def _origin(exc: BaseException) -> str:
    """`module:line` of the innermost frame of ours that the exception passed through."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [frame for frame in frames if "/audit/" in frame.filename or "/producers/" in frame.filename] or frames
    frame = ours[-1]
    return f"{Path(frame.filename).name}:{frame.lineno}" if frame else "kaudit"
