"""Topic: producer vs each tier per window (the correlation graph), completeness, missing and duplicated, latency."""

from __future__ import annotations

from urllib.parse import parse_qs

import dash
from dash import Input, Output, State, dcc, html

from dashboards import figures, ids
from dashboards.callbacks import page_callback
from dashboards.context import context
from dashboards.data import latest_window, parse_time, restated_changes, time_range, topic_rows, with_partition_losses
from dashboards.links import href
from dashboards.pages.controls import range_and_search, table
from dashboards.waiting import until_books

WINDOW_COLUMNS = [
    "tier",
    "status",
    "final",
    "expected",
    "observed",
    "missing",
    "missing_by_partition",
    "duplicated",
    "mismatched_partitions",
    "completeness_pct",
    "tier_watermark",
    "latency_p99_ms",
    "restated",
]


def load(topic: str | None, range_key: str | None, window: str | None):
    lake = context().lake
    completeness = lake.frame("completeness")
    counts = lake.frame("tier_counts")
    selected = parse_time(window)
    topics = sorted(completeness["logical_topic"].dropna().unique()) if not completeness.empty else []
    topic = topic or (topics[0] if topics else None)
    # The range ends after the selected window when one is given, so a linked window is always in view.
    end = (
        (selected + (time_range(None, range_key).end - time_range(None, range_key).start) / 4).isoformat()
        if selected is not None
        else None
    )
    span = time_range(latest_window(lake.table("completeness", ["window_start"])), range_key, end)
    rows, counts = topic_rows(completeness, topic, span), topic_rows(counts, topic, span)
    if not counts.empty and not rows.empty:  # data-flow order for the counts' legend too
        counts = counts.merge(rows[["tier", "tier_order"]].drop_duplicates("tier"), on="tier", how="left")
    restated = restated_changes(topic_rows(lake.frame("restatements"), topic, span))
    return topic, topics, selected, rows, counts, restated


def layout(
    topic: str | None = None,
    window: str | None = None,
    range: str | None = None,  # noqa: A002
    q: str | None = None,
    tier: str | None = None,
    **_other,
) -> html.Div:
    topic, topics, selected, rows, counts, restated = load(topic, range, window)
    in_window = rows[rows["window_start"] == selected] if selected is not None and not rows.empty else rows.iloc[0:0]
    in_window = with_partition_losses(in_window, counts)
    if "mismatched_partitions" in in_window:
        in_window = in_window.assign(
            mismatched_partitions=[figures.partition_list(p) for p in in_window["mismatched_partitions"]]
        )
    in_window = in_window.merge(restated, on=["window_start", "tier"], how="left")
    colors = context().colors
    return html.Div(
        [
            html.H2(f"Topic {topic or '(none)'}"),
            html.Div(
                [
                    html.Label("topic ", style={"marginRight": "6px"}),
                    dcc.Dropdown(
                        id=ids.TOPIC,
                        options=topics,
                        value=topic,
                        clearable=False,
                        style={"width": "320px", "display": "inline-block"},
                    ),
                ],
                style={"display": "flex", "alignItems": "center"},
            ),
            range_and_search(range, q, with_search=True),
            html.Div(
                [
                    html.H3(f"Window {selected:%Y-%m-%d %H:%M} UTC" + (f" (alert on {tier})" if tier else "")),
                    table(in_window, WINDOW_COLUMNS, table_id=ids.WINDOW_TABLE),
                ]
                if selected is not None
                else []
            ),
            dcc.Graph(id=ids.CORRELATION, figure=figures.correlation_figure(counts, selected, colors)),
            dcc.Graph(id=ids.COMPLETENESS, figure=figures.completeness_figure(rows, selected, restated, colors)),
            dcc.Graph(id=ids.MISSING, figure=figures.missing_figure(rows, selected, colors)),
            dcc.Graph(id=ids.LATENCY, figure=figures.latency_figure(counts, colors)),
        ]
    )


@page_callback(
    Output(ids.NAV, "href", allow_duplicate=True),
    Input(ids.TOPIC, "value"),
    State(ids.RANGE, "value"),
    State(ids.NAV, "search"),
    prevent_initial_call=True,
)
def _pick_topic(topic, range_key, search):
    # The dropdown can report its value again as it mounts; navigating then would drop the window of
    # a deep link (an email's), so only a different topic navigates.
    if topic == parse_qs((search or "").lstrip("?")).get("topic", [None])[0]:
        return dash.no_update
    return href("/topic", topic=topic, range=range_key)


# Registered last, with its layout: the app does not import a pages folder (pages_folder="").
dash.register_page(
    __name__, path="/topic", name="Topic", order=1, title="kafka-audit: topic", layout=until_books(layout)
)
