"""Links between the UI's pages: every page keeps its state in the query string, so a link opens it as shown."""

from __future__ import annotations

from urllib.parse import urlencode


def href(path: str, **query) -> str:
    """A UI link holding its state in the query string; empty values are left out."""
    kept = {key: value for key, value in query.items() if value not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path
