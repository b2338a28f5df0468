"""Pure figure builders: a DataFrame in, a plotly Figure out. No Dash, no I/O; tested without a server."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from audit.contract.windows import DEFAULT_WINDOW_MINUTES
from dashboards.data import RANK_STATUS, STATUS_RANK
from dashboards.tier_colors import TierColors

STATUS_COLORS = {
    "complete": "#2ca02c",
    "unknown": "#9edae5",  # the producer's counts could not serve: judged against the origin cluster
    "pending": "#c7c7c7",
    "lagging": "#f2c14e",
    "over": "#ff7f0e",
    "mismatch": "#e377c2",
    "incomplete": "#d62728",
}
# An axis of minutes or messages: plain numbers from 0 (plotly's default SI suffixes read 80µ for 0.00008
# minutes), so an axis with no lag reads 0.
PLAIN_NUMBERS = dict(tickformat=",~f", rangemode="tozero")
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.2))
# Tier colours of a figure built without the configured tiers (the pages pass the configured ones).
UNCONFIGURED = TierColors()


def _empty(title: str) -> go.Figure:
    figure = go.Figure()
    figure.update_layout(
        title=title,
        **LAYOUT,
        annotations=[dict(text="no data in this range", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)],
    )
    return figure


def _discrete_scale() -> list[list]:
    """A colorscale with one flat band per status rank (1..len(STATUS_RANK))."""
    scale, count = [], len(STATUS_RANK)
    for rank in range(1, count + 1):
        color = STATUS_COLORS[RANK_STATUS[rank]]
        scale += [[(rank - 1) / count, color], [rank / count, color]]
    return scale


def status_heatmap(cells: pd.DataFrame, order: list[str] | None = None) -> go.Figure:
    """Topics x windows, each cell colored by the worst status over the tiers; click data holds topic and window."""
    title = "Completeness by topic and window (worst tier)"
    if cells.empty:
        return _empty(title)
    order = order or sorted(cells["logical_topic"].unique())
    z = cells.pivot(index="logical_topic", columns="window_start", values="rank").reindex(order)
    pct = cells.pivot(index="logical_topic", columns="window_start", values="completeness_pct").reindex(order)
    names = np.array(["no data", *(RANK_STATUS[rank] for rank in range(1, len(STATUS_RANK) + 1))], dtype=object)
    status = names[np.nan_to_num(z.to_numpy(dtype=float), nan=0).astype(int)]
    figure = go.Figure(
        go.Heatmap(
            z=z.to_numpy(dtype=float),
            x=list(z.columns),
            y=list(z.index),
            zmin=0.5,
            zmax=len(STATUS_RANK) + 0.5,
            colorscale=_discrete_scale(),
            customdata=status,
            text=pct.round(2).values,
            xgap=1,
            ygap=1,
            hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:%M} UTC<br>%{customdata}<br>worst tier: %{text}%<extra></extra>",
            colorbar=dict(tickvals=list(RANK_STATUS), ticktext=list(RANK_STATUS.values()), title="status"),
        )
    )
    figure.update_layout(
        title=title,
        **{**LAYOUT, "margin": dict(l=140, r=20, t=50, b=40)},
        height=max(300, 28 * len(z.index) + 140),
        yaxis=dict(autorange="reversed"),
        xaxis=dict(title="window start (UTC)"),
        clickmode="event",
    )
    return figure


def _by_tier(
    rows: pd.DataFrame,
    value: str,
    title: str,
    yaxis: str,
    *,
    mode: str = "lines+markers",
    selected: pd.Timestamp | None = None,
    colors: TierColors = UNCONFIGURED,
) -> go.Figure:
    if rows.empty:
        return _empty(title)
    figure = go.Figure()
    for tier in tier_order(rows):
        part = rows[rows["tier"] == tier].sort_values("window_start")
        reference = tier == "producer"
        figure.add_trace(
            go.Scatter(
                x=part["window_start"],
                y=part[value],
                name=tier,
                mode=mode,
                line=dict(width=7 if reference else 2, color=colors(tier)),
                marker=dict(color=colors(tier)),
            )
        )
    figure.update_layout(title=title, yaxis_title=yaxis, xaxis_title="window start (UTC)", **LAYOUT)
    _mark(figure, selected, rows)
    return figure


def tier_order(rows: pd.DataFrame) -> list[str]:
    """Tiers in data-flow order (tier_order when the rows have it), the reference first."""
    if "tier_order" in rows and rows["tier_order"].notna().all():
        return list(dict.fromkeys(rows.sort_values("tier_order")["tier"]))
    return sorted(rows["tier"].unique(), key=lambda tier: (tier != "producer", tier == "lake", tier))


def window_length(rows: pd.DataFrame) -> pd.Timedelta:
    """The length of the rows' windows, as they carry it (`window_minutes`); the default size when they do not."""
    minutes = rows["window_minutes"].dropna() if "window_minutes" in rows else pd.Series(dtype="float64")
    return pd.Timedelta(minutes=int(minutes.max()) if not minutes.empty else DEFAULT_WINDOW_MINUTES)


def _mark(figure: go.Figure, selected: pd.Timestamp | None, rows: pd.DataFrame) -> None:
    if selected is not None:
        figure.add_vrect(
            x0=selected,
            x1=selected + window_length(rows),
            fillcolor="#d62728",
            opacity=0.12,
            line_width=0,
            annotation_text="selected window",
            annotation_position="top left",
        )


def correlation_figure(
    counts: pd.DataFrame, selected: pd.Timestamp | None = None, colors: TierColors = UNCONFIGURED
) -> go.Figure:
    """Producer vs every tier: messages counted per window, one line per tier, on one chart."""
    title = "Messages per window: producer vs each tier"
    return _by_tier(counts, "count", title, "messages", selected=selected, colors=colors)


def completeness_figure(
    rows: pd.DataFrame,
    selected: pd.Timestamp | None = None,
    restated: pd.DataFrame | None = None,
    colors: TierColors = UNCONFIGURED,
) -> go.Figure:
    """Completeness % per tier and window; windows not final for every tier yet are shaded (in flight),
    restated windows (`restated_changes`) marked with a star on their tier's line, mismatch windows with a
    diamond of the mismatch colour."""
    figure = _by_tier(
        rows, "completeness_pct", "Completeness per tier (%)", "% of expected", selected=selected, colors=colors
    )
    shade_windows_in_flight(figure, rows)
    mark_restated(figure, rows, restated)
    mark_mismatches(figure, rows)
    return figure


def mark_mismatches(figure: go.Figure, rows: pd.DataFrame) -> None:
    """A trace `mismatch`: a diamond on each tier of a window whose content differs (a mismatch, or an over or
    incomplete window that names such partitions too), the partitions whose content differs in the hover text."""
    if rows.empty or "status" not in rows:
        return
    named = rows["mismatched_partitions"].map(partition_list) != "" if "mismatched_partitions" in rows else False
    points = rows[(rows["status"] == "mismatch") | named]
    if points.empty:
        return
    partitions = points["mismatched_partitions"] if "mismatched_partitions" in points else None
    where = [partition_list(value) for value in partitions] if partitions is not None else [""] * len(points)
    customdata = [
        f"{tier}: content differs in partition{'s' if ',' in text else ''} {text}"
        for tier, text in zip(points["tier"], where, strict=True)
    ]
    add_window_marks(figure, points, "mismatch", ("diamond", 13, STATUS_COLORS["mismatch"]), customdata, "")


def add_window_marks(figure: go.Figure, points: pd.DataFrame, name: str, marker, customdata, prefix: str) -> None:
    """A trace `name`: a (symbol, size, colour) mark on each of `points`' windows at its completeness, the
    window and `prefix` + its `customdata` in the hover text."""
    symbol, size, color = marker
    figure.add_trace(
        go.Scatter(
            x=points["window_start"],
            y=points["completeness_pct"],
            name=name,
            mode="markers",
            marker=dict(symbol=symbol, size=size, color=color, line=dict(width=1, color="#333333")),
            customdata=customdata,
            hovertemplate=f"%{{x|%Y-%m-%d %H:%M}} UTC<br>{prefix}%{{customdata}}<extra></extra>",
        )
    )


def partition_list(partitions) -> str:
    """`0, 2` of a list of partition numbers (as completeness.mismatched_partitions holds); '' of none."""
    if partitions is None or (not hasattr(partitions, "__len__") and pd.isna(partitions)):
        return ""
    return ", ".join(str(int(p)) for p in sorted(partitions))


def mark_restated(figure: go.Figure, rows: pd.DataFrame, restated: pd.DataFrame | None) -> None:
    """A trace `restated`: a star on each restated window's tier, its changes in the hover text."""
    if restated is None or restated.empty or rows.empty:
        return
    points = restated.merge(rows[["window_start", "tier", "completeness_pct"]], on=["window_start", "tier"])
    if points.empty:
        return
    customdata = points["tier"] + ": " + points["restated"]
    add_window_marks(figure, points, "restated", ("star", 14, "#9467bd"), customdata, "restated at ")


def shade_windows_in_flight(figure: go.Figure, rows: pd.DataFrame) -> None:
    """A grey band over each window some tier has not judged final: its % is a count so far, not a verdict."""
    if rows.empty or "final" not in rows:
        return
    final = rows.assign(final=rows["final"].fillna(False).astype(bool)).groupby("window_start")["final"].all()
    ends = rows.groupby("window_start")["window_end"].max() if "window_end" in rows else None
    length = window_length(rows)
    for index, start in enumerate(final.index[~final.to_numpy()]):
        end = ends[start] if ends is not None else start + length
        # Only the first band is labelled: a band given a position and no text gets plotly's "new text".
        label = dict(annotation_text="not final yet", annotation_position="bottom left") if index == 0 else {}
        figure.add_vrect(x0=start, x1=end, fillcolor="#7f7f7f", opacity=0.12, line_width=0, name="in flight", **label)


def missing_figure(
    rows: pd.DataFrame, selected: pd.Timestamp | None = None, colors: TierColors = UNCONFIGURED
) -> go.Figure:
    """Missing (down, plain) and duplicated (up, hatched) messages per window, in each tier's colour."""
    title = "Missing and duplicated per window"
    if rows.empty:
        return _empty(title)
    figure = go.Figure()
    for tier in tier_order(rows):
        part = rows[rows["tier"] == tier]
        final = part[part["final"].fillna(False).astype(bool)]
        figure.add_trace(
            go.Bar(
                x=final["window_start"],
                y=-final["missing"].fillna(0),
                name=f"{tier} missing",
                marker_color=colors(tier),
            )
        )
        if final["duplicated"].fillna(0).any():
            figure.add_trace(
                go.Bar(
                    x=final["window_start"],
                    y=final["duplicated"],
                    name=f"{tier} duplicated",
                    marker=dict(color=colors(tier), pattern=dict(shape="/", fillmode="overlay", fgcolor="#ffffff")),
                )
            )
    figure.update_layout(
        title=title + " (final windows; missing drawn below zero)",
        barmode="group",
        yaxis_title="messages",
        xaxis_title="window start (UTC)",
        **LAYOUT,
    )
    _mark(figure, selected, rows)
    return figure


def latency_figure(counts: pd.DataFrame, colors: TierColors = UNCONFIGURED) -> go.Figure:
    """p99 latency per tier and window: audit time to counted, ms."""
    return _by_tier(counts, "latency_p99_ms", "Latency p99 per tier (ms, audit time to counted)", "ms", colors=colors)


def watermark_figure(history: pd.DataFrame, colors: TierColors = UNCONFIGURED) -> go.Figure:
    """How far each tier's watermark was behind when it reported, over time (worst topic per report time)."""
    title = "Watermark delay per tier (minutes behind)"
    if history.empty:
        return _empty(title)
    worst = history.groupby(["tier", "emitted_at"], as_index=False)["behind_min"].max()
    figure = go.Figure(
        [
            go.Scatter(
                x=part["emitted_at"],
                y=part["behind_min"],
                name=tier,
                mode="lines+markers",
                line=dict(color=colors(tier)),
                marker=dict(color=colors(tier)),
            )
            for tier, part in worst.groupby("tier", sort=False)
        ]
    )
    figure.update_layout(title=title, yaxis_title="minutes", xaxis_title="reported at (UTC)", **LAYOUT)
    figure.update_yaxes(**PLAIN_NUMBERS)
    return figure


def lag_figure(history: pd.DataFrame, colors: TierColors = UNCONFIGURED) -> go.Figure:
    """Messages of lag per tier over time (summed over topics and reporters)."""
    title = "Lag per tier (messages behind)"
    if history.empty:
        return _empty(title)
    total = history.groupby(["tier", "emitted_at"], as_index=False)["lag"].sum()
    figure = go.Figure(
        [
            go.Scatter(x=part["emitted_at"], y=part["lag"], name=tier, mode="lines", line=dict(color=colors(tier)))
            for tier, part in total.groupby("tier", sort=False)
        ]
    )
    figure.update_layout(title=title, yaxis_title="messages", xaxis_title="reported at (UTC)", **LAYOUT)
    figure.update_yaxes(**PLAIN_NUMBERS)
    return figure
