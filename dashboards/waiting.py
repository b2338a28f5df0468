"""The page every path shows until the books' first run, and the switch to the real page once their tables exist:
no restart, no reload (the waiting page asks every LOOK_EVERY_S; the lake is looked at no more often than that)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from urllib.parse import parse_qs

import dash
from dash import Input, Output, State, dcc, html

from dashboards import ids
from dashboards.callbacks import page_callback
from dashboards.context import context
from dashboards.first_run import LOOK_EVERY_S


def waiting_text(lake: object) -> str:
    return f"waiting for the books' first run at {lake}"


def waiting_layout() -> html.Div:
    lake = context().lake.lake
    return html.Div(
        id=ids.WAITING,
        children=[
            html.H2("Waiting for the books' first run"),
            html.P(f"{waiting_text(lake)}: no kafka-audit tables there yet."),
            html.P(
                "`kaudit reconcile` creates them on its first run; this page turns into the audit as soon as they "
                "exist. If it stays here, check that the reconciliation runs and writes to this lake "
                "(`kaudit config show` prints the lake in force)."
            ),
            dcc.Interval(id=ids.WAITING_POLL, interval=int(LOOK_EVERY_S * 1000)),
        ],
    )


def until_books(layout: Callable[..., html.Div]) -> Callable[..., html.Div]:
    """A page's `layout`, or the waiting page while the books have not run on the lake yet."""

    @functools.wraps(layout)
    def page_or_waiting(**query) -> html.Div:
        books = context().books
        if books is not None and not books.ready():
            return waiting_layout()
        return layout(**query)

    return page_or_waiting


@page_callback(
    Output(ids.WAITING, "children"),
    Input(ids.WAITING_POLL, "n_intervals"),
    State(ids.NAV, "pathname"),
    State(ids.NAV, "search"),
    prevent_initial_call=True,
)
def _show_the_page_once_the_books_ran(_tick, pathname, search):
    """The page the URL names, in place of the waiting page, once the books' tables exist."""
    books = context().books
    if books is not None and not books.ready():
        return dash.no_update
    pages = [page for page in dash.page_registry.values() if page["module"].startswith("dashboards.pages.")]
    page = next((page for page in pages if page["path"] == (pathname or "/")), None)
    page = page or next(page for page in pages if page["path"] == "/")
    query = {key: values[-1] for key, values in parse_qs((search or "").lstrip("?")).items()}
    return page["layout"](**query)
