"""The running UI's settings and table cache: set once by `create_app`, read by every page's layout."""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboards.data import LakeCache
from dashboards.first_run import BooksWatch
from dashboards.tier_colors import TierColors


@dataclass
class Context:
    settings: object
    lake: LakeCache
    # None: the pages show the tables as they are, never the waiting page.
    books: BooksWatch | None = None
    colors: TierColors = field(default_factory=TierColors)


_CONTEXT: Context | None = None


def context() -> Context:
    """The running app's settings and table cache (one app per process)."""
    if _CONTEXT is None:
        raise RuntimeError("the audit UI is not created yet: call dashboards.app.create_app(settings)")
    return _CONTEXT


def set_context(running: Context) -> None:
    """Make `running` the context every page reads (`create_app` calls it)."""
    global _CONTEXT
    _CONTEXT = running
