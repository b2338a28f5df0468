"""The controls shared by pages: the time-range picker and the topic search, both kept in the URL."""

from __future__ import annotations

from urllib.parse import parse_qs

import pandas as pd
from dash import Input, Output, State, dcc, html

from audit.contract.watermarks import FIRST_REAL_WATERMARK
from dashboards import ids
from dashboards.callbacks import page_callback
from dashboards.data import DEFAULT_RANGE, NO_WATERMARK, RANGES
from dashboards.figures import STATUS_COLORS
from dashboards.links import href

# Columns of free text (an alert's cause, a delivery error): given room when they hold any, and wrapped within it.
WIDE_COLUMNS = {"cause": "200px", "last_error": "120px"}
FREE_TEXT = (*WIDE_COLUMNS, "recipients")


def range_and_search(range_key: str | None, search: str | None, *, with_search: bool = True) -> html.Div:
    children = [
        html.Label("time range ", style={"marginRight": "6px"}),
        dcc.Dropdown(
            id=ids.RANGE,
            options=list(RANGES),
            value=range_key if range_key in RANGES else DEFAULT_RANGE,
            clearable=False,
            style={"width": "110px", "display": "inline-block", "verticalAlign": "middle"},
        ),
    ]
    if with_search:
        children += [
            html.Label(" topic search ", style={"margin": "0 6px 0 20px"}),
            dcc.Input(
                id=ids.SEARCH,
                type="search",
                value=search or "",
                debounce=True,
                placeholder="part of a topic name",
                style={"width": "220px"},
            ),
        ]
    return html.Div(children, style={"display": "flex", "alignItems": "center", "margin": "8px 0"})


def status_styles(shown: pd.DataFrame) -> list[dict]:
    """A `status` cell is drawn in its status's colour, as the heatmap draws it."""
    if "status" not in shown:
        return []
    return [
        {
            "if": {"column_id": "status", "filter_query": f'{{status}} = "{status}"'},
            "backgroundColor": color,
            "color": "#ffffff" if status in ("incomplete", "mismatch", "complete", "over") else "#000000",
        }
        for status, color in STATUS_COLORS.items()
    ]


def table(
    frame,
    columns: list[str] | None = None,
    *,
    table_id: str | None = None,
    page_size: int = 15,
    spaced_headers: bool = False,
):
    """A sortable DataTable of `frame` (timestamps shown as UTC minutes). `spaced_headers`: `window start` for
    `window_start`, a header that can wrap, for a table of many columns."""
    from dash import dash_table

    frame = frame if columns is None else frame[[c for c in columns if c in frame]]
    shown = shown_values(frame)
    kwargs = {"id": table_id} if table_id else {}
    return dash_table.DataTable(
        data=shown.to_dict("records"),
        columns=[{"name": c.replace("_", " ") if spaced_headers else c, "id": c} for c in shown.columns],
        sort_action="native",
        page_size=page_size,
        # Never wider than the page: long cells (an alert's cause) wrap, and a table still too wide scrolls.
        style_table={"overflowX": "auto", "maxWidth": "100%"},
        style_cell={
            "fontFamily": "sans-serif",
            "fontSize": "13px",
            "padding": "4px",
            "whiteSpace": "normal",
            "height": "auto",
            "textAlign": "left",
        },
        style_cell_conditional=column_widths(frame, shown),
        style_data_conditional=status_styles(shown),
        style_header={"fontWeight": "bold"},
        # A long word of free text (an address, an error) breaks rather than widening its column past the page. A
        # rule: the style_* arguments drop the CSS properties the DataTable does not know, overflow-wrap among them.
        css=[{"selector": f'td[data-dash-column="{c}"]', "rule": "overflow-wrap: anywhere"} for c in FREE_TEXT],
        **kwargs,
    )


def column_widths(frame: pd.DataFrame, shown: pd.DataFrame) -> list[dict]:
    """Room for the free-text columns that hold any text, and for a time's date on one line (it breaks at its
    space, not at its dashes)."""
    wide = [
        {"if": {"column_id": c}, "minWidth": width}
        for c, width in WIDE_COLUMNS.items()
        if c in shown and shown[c].fillna("").astype(str).str.strip().any()
    ]
    times = [c for c in frame.columns if str(frame[c].dtype).startswith("datetime64")]
    return wide + [{"if": {"column_id": c}, "minWidth": "76px"} for c in times]


def shown_values(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as a table shows it: timestamps as UTC minutes (the epoch as NO_WATERMARK), floats to 2 places."""
    shown = frame.copy()
    for name in shown.columns:
        if str(shown[name].dtype).startswith("datetime64"):
            # The epoch stands for "not reported yet" (audit/contract/watermarks.py): never shown as a 1970 date.
            times = pd.to_datetime(shown[name], utc=True)
            real = times >= pd.Timestamp(FIRST_REAL_WATERMARK)
            shown[name] = times.dt.strftime("%Y-%m-%d %H:%M").where(real | times.isna(), NO_WATERMARK)
        elif str(shown[name].dtype).startswith("float"):
            shown[name] = shown[name].round(2)
    return shown


@page_callback(
    Output(ids.NAV, "href", allow_duplicate=True),
    Input(ids.RANGE, "value"),
    Input(ids.SEARCH, "value"),
    State(ids.NAV, "pathname"),
    State(ids.NAV, "search"),
    prevent_initial_call=True,
)
def _keep_controls_in_the_url(range_key, search, pathname, query):
    """A new range or search rewrites the URL (the page then renders from it), keeping the other keys."""
    kept = {key: values[-1] for key, values in parse_qs((query or "").lstrip("?")).items()}
    kept.update(range=range_key, q=search or None)
    return href(pathname or "/", **kept)
