"""Overview: the completeness heatmap (topics x windows), the worst topics now, each tier's health."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html

from dashboards import figures, ids
from dashboards.callbacks import page_callback
from dashboards.context import context
from dashboards.data import OVERVIEW_COLUMNS, all_cells, data_topics, overview_data
from dashboards.links import href
from dashboards.pages.controls import range_and_search, table
from dashboards.waiting import until_books


def load(range_key: str | None, search: str | None, end: str | None = None) -> dict:
    lake = context().lake
    return overview_data(
        lake.table("completeness", OVERVIEW_COLUMNS),
        data_topics(lake.frame("tier_status"), context().settings),
        range_key=range_key,
        search=search,
        end=end,
        cells=lake.derived("completeness", OVERVIEW_COLUMNS, all_cells),
    )


def layout(range: str | None = None, q: str | None = None, end: str | None = None, **_other) -> html.Div:  # noqa: A002
    data = load(range, q, end)
    worst = data["worst"].copy()
    if not worst.empty:
        worst["worst_pct"] = worst["worst_pct"].round(2)
    return html.Div(
        [
            html.H2("Completeness overview"),
            range_and_search(range, q),
            html.P(
                f"{data['topics']} topic(s) in {data['range'].start:%Y-%m-%d %H:%M} .. {data['range'].end:%Y-%m-%d %H:%M}"
                f" UTC; the {len(data['order'])} worst shown. Click a cell to open that topic and window."
            ),
            dcc.Graph(id=ids.HEATMAP, figure=figures.status_heatmap(data["cells"], data["order"])),
            html.Div(
                [
                    html.Div(
                        [html.H3("Worst topics now"), table(worst, table_id=ids.WORST, page_size=10)],
                        style={"flex": "1", "marginRight": "24px"},
                    ),
                    html.Div([html.H3("Tier health"), table(data["health"], table_id=ids.HEALTH)], style={"flex": "1"}),
                ],
                style={"display": "flex"},
            ),
        ]
    )


@page_callback(
    Output(ids.NAV, "href", allow_duplicate=True),
    Input(ids.HEATMAP, "clickData"),
    State(ids.RANGE, "value"),
    prevent_initial_call=True,
)
def _open_clicked_window(click, range_key):
    """A heatmap cell opens the topic page on that topic and window."""
    if not click or not click.get("points"):
        return dash.no_update
    point = click["points"][0]
    window = pd.Timestamp(point["x"]).strftime("%Y-%m-%dT%H:%MZ")
    return href("/topic", topic=point["y"], window=window, range=range_key)


@page_callback(
    Output(ids.HEATMAP, "figure"),
    Input(ids.REFRESH, "n_intervals"),
    State(ids.RANGE, "value"),
    State(ids.SEARCH, "value"),
    prevent_initial_call=True,
)
def _refresh(_tick, range_key, search):
    data = load(range_key, search)
    return figures.status_heatmap(data["cells"], data["order"])


# Registered last, with its layout: the app does not import a pages folder (pages_folder="").
dash.register_page(
    __name__, path="/", name="Overview", order=0, title="kafka-audit: overview", layout=until_books(layout)
)
