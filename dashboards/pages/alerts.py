"""Alerts: the log of every alert kaudit alert decided on, with its delivery state."""

from __future__ import annotations

import dash
from dash import html

from dashboards import ids
from dashboards.context import context
from dashboards.data import data_topics
from dashboards.pages.controls import range_and_search, table
from dashboards.waiting import until_books

COLUMNS = [
    "created_at",
    "kind",
    "logical_topic",
    "tier",
    "window_start",
    "status",
    "missing",
    "duplicated",
    "completeness_pct",
    "state",
    "attempts",
    "recipients",
    "sent_at",
    "last_error",
    "cause",
]


def layout(range: str | None = None, q: str | None = None, **_other) -> html.Div:  # noqa: A002
    log = data_topics(context().lake.frame("alerts"), context().settings)
    if q and not log.empty:
        log = log[log["logical_topic"].str.contains(q, case=False, regex=False, na=False)]
    if not log.empty:
        log = log.sort_values("created_at", ascending=False)
    return html.Div(
        [
            html.H2("Alert log"),
            range_and_search(range, q),
            html.P(f"{len(log)} alert(s); pending ones are retried by the next `kaudit alert` run."),
            table(log, COLUMNS, table_id=ids.ALERTS_TABLE, page_size=25, spaced_headers=True),
        ]
    )


# Registered last, with its layout: the app does not import a pages folder (pages_folder="").
dash.register_page(
    __name__, path="/alerts", name="Alerts", order=3, title="kafka-audit: alerts", layout=until_books(layout)
)
