"""The audit UI's shell: a Dash multi-page app (pages under dashboards/pages/), navigation, optional login.

`create_app(settings)` builds it; `kaudit ui` serves it (audit/cli/ui.py). Pages read the Delta tables
through one `LakeCache` (deltalake, no JVM), reread at most every `ui.refresh_s` seconds. Every page's
state is in its URL (`/topic?topic=dc1.orders&window=2025-03-04T10:40Z&range=24h`), so an alert email
links straight to a topic and window. Until the books' first run every page is the waiting page
(dashboards/waiting.py), which turns into the page asked for once the tables exist.
"""

from __future__ import annotations

import base64
import hmac
import importlib

import dash
from dash import dcc, html

from audit.io.lake import Lake, lake_of
from dashboards import ids
from dashboards.callbacks import register_callbacks
from dashboards.context import Context, set_context
from dashboards.data import LakeCache
from dashboards.first_run import BooksWatch
from dashboards.tier_colors import TierColors

PAGES = ("overview", "topic", "lag", "alerts")


def create_app(settings, *, lake: Lake | str | None = None) -> dash.Dash:
    """The Dash app over the tables of `lake` (default: the configured one); the waiting page until they exist."""
    tables = Lake.of(lake) if lake else lake_of(settings)
    set_context(
        Context(
            settings=settings,
            lake=LakeCache(tables, refresh_s=settings.ui.refresh_s, days=settings.ui.days),
            books=BooksWatch(tables),
            colors=TierColors.of(settings.tiers),
        )
    )
    app = dash.Dash(__name__, use_pages=True, pages_folder="", title="kafka-audit", suppress_callback_exceptions=True)
    for page in PAGES:
        importlib.import_module(f"dashboards.pages.{page}")
    register_callbacks(app)
    app.layout = html.Div(
        [
            dcc.Location(id=ids.NAV, refresh="callback-nav"),
            dcc.Interval(id=ids.REFRESH, interval=int(settings.ui.refresh_s * 1000)),
            html.Div(
                [
                    html.B("kafka-audit", style={"marginRight": "24px", "fontSize": "20px"}),
                    *[
                        dcc.Link(page["name"], href=page["relative_path"], style={"marginRight": "18px"})
                        for page in dash.page_registry.values()
                        if page["module"].startswith("dashboards.pages.")
                    ],
                ],
                style={"padding": "10px 16px", "borderBottom": "1px solid #ddd", "fontFamily": "sans-serif"},
            ),
            html.Div(dash.page_container, style={"padding": "8px 16px", "fontFamily": "sans-serif"}),
        ]
    )
    if settings.ui.auth_user:
        _basic_auth(app.server, settings.ui.auth_user, settings.ui.auth_password.reveal())
    return app


def _basic_auth(server, user: str, password: str) -> None:
    """HTTP basic auth on every request (pages, callbacks, assets); compare in constant time."""
    from flask import Response, request

    expected = base64.b64encode(f"{user}:{password}".encode()).decode()

    @server.before_request
    def _require_login():
        header = request.headers.get("Authorization", "")
        given = header[6:] if header.startswith("Basic ") else ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return Response("login required", 401, {"WWW-Authenticate": 'Basic realm="kafka-audit"'})
        return None
