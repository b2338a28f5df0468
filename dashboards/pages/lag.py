"""Lag: each tier's watermark delay and the replicators' lag over time, and the tiers' status now."""

from __future__ import annotations

import dash
from dash import dcc, html

from dashboards import figures, ids
from dashboards.context import context
from dashboards.data import data_topics, status_history, time_range, with_causes
from dashboards.pages.controls import range_and_search, table
from dashboards.waiting import until_books

STATUS_COLUMNS = ["tier", "logical_topic", "watermark", "lag", "stalled", "reporters", "last_status_at", "cause"]
HISTORY_COLUMNS = [
    "kind",
    "tier",
    "cluster",
    "service",
    "topic",
    "logical_topic",
    "emitted_at",
    "watermark",
    "lag",
    "stalled",
]


def layout(range: str | None = None, q: str | None = None, end: str | None = None, **_other) -> html.Div:  # noqa: A002
    lake, settings = context().lake, context().settings
    records = data_topics(lake.frame("audit_records", HISTORY_COLUMNS), settings)
    latest = records["emitted_at"].max() if not records.empty else None
    history = status_history(records, time_range(latest, range, end), q)
    status = with_causes(data_topics(lake.frame("tier_status"), settings))
    unreachable = lake.frame("cluster_reads")
    unreachable = unreachable[~unreachable["reachable"].astype(bool)] if not unreachable.empty else unreachable
    if q and not status.empty:
        status = status[status["logical_topic"].str.contains(q, case=False, regex=False, na=False)]
    return html.Div(
        [
            html.H2("Watermarks and lag"),
            *unreachable_notice(unreachable),
            range_and_search(range, q),
            dcc.Graph(id=ids.WATERMARKS, figure=figures.watermark_figure(history, context().colors)),
            dcc.Graph(id=ids.LAG, figure=figures.lag_figure(history, context().colors)),
            html.H3("Tier status now"),
            table(status, STATUS_COLUMNS, table_id=ids.STATUS_TABLE),
        ]
    )


def unreachable_notice(unreachable) -> list:
    """A red list of the clusters the last reconciliation could not read: their tiers lag, and this is why."""
    if unreachable.empty:
        return []
    return [
        html.Div(
            [
                html.Strong("The books cannot read these clusters: their tiers stop moving and their windows lag."),
                table(unreachable, ["cluster", "error", "since"], table_id=ids.UNREACHABLE),
            ],
            style={"border": "2px solid #c0392b", "padding": "8px", "margin": "8px 0"},
        )
    ]


# Registered last, with its layout: the app does not import a pages folder (pages_folder="").
dash.register_page(__name__, path="/lag", name="Lag", order=2, title="kafka-audit: lag", layout=until_books(layout))
