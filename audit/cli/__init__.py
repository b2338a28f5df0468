"""`kaudit`: one entry point with a subcommand per job; each subcommand module only parses, calls, prints."""

from audit.cli.main import main

__all__ = ["main"]
