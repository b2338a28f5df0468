"""The UI's data transforms and figure builders, without a server: a frame in, numbers and figures out."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
import pytest

from audit.contract.arrow import arrow_table
from audit.contract.tables import COMPLETENESS
from audit.settings import Settings, UiSettings
from dashboards import figures
from dashboards.bulk_sample import bulk_completeness
from dashboards.data import (
    NO_WATERMARK,
    LakeCache,
    latest_window,
    overview_cells,
    overview_data,
    tier_health,
    time_range,
    with_partition_losses,
)
from dashboards.sample import (
    Duplicate,
    Lagging,
    Loss,
    Mismatch,
    NoWatermark,
    SampleSpec,
    sample_frames,
    write_frames,
)

NOW = datetime(2025, 3, 4, 12, 3, tzinfo=UTC)


@pytest.fixture(scope="module")
def frames():
    return sample_frames(
        SampleSpec(
            now=NOW,
            faults=[
                Loss("orders", "aggregate", 3, 40),
                Duplicate("payments", "lake", 5, 7),
                Lagging("clicks", "lake", 45),
            ],
        )
    )


def completeness_arrow(frames) -> pa.Table:
    return arrow_table(COMPLETENESS, frames["completeness"])


@pytest.mark.parametrize(
    "topic, window, status",
    [
        ("dc1.orders", 3, "incomplete"),  # aggregate and lake lost 40: worst wins
        ("dc1.payments", 5, "over"),
        ("dc1.clicks", 8, "lagging"),  # short, but not final: lagging, never incomplete
        ("dc1.orders", 11, "pending"),  # the window still open
        ("dc1.orders", 2, "complete"),
    ],
)
def test_overview_cells_hold_the_worst_status_of_the_non_reference_tiers(frames, topic, window, status):
    completeness = completeness_arrow(frames)
    cells = overview_cells(completeness, time_range(pd.Timestamp(NOW), "24h"))
    start = sorted(frames["completeness"]["window_start"].unique())[window]
    [cell] = cells[(cells["logical_topic"] == topic) & (cells["window_start"] == start)].itertuples()
    assert cell.status == status


def test_the_worst_topics_come_first_and_search_narrows(frames):
    data = overview_data(completeness_arrow(frames), frames["tier_status"], range_key="24h", search=None)
    assert data["order"][:2] == ["dc1.orders", "dc1.payments"] and data["topics"] == 3
    worst = data["worst"].set_index("logical_topic")
    assert worst.loc["dc1.orders", "incomplete"] == 1 and worst.loc["dc1.orders", "missing"] >= 40
    searched = overview_data(completeness_arrow(frames), frames["tier_status"], range_key="24h", search="CLI")
    assert searched["order"] == ["dc1.clicks"]


def test_a_range_keeps_only_its_windows(frames):
    completeness = completeness_arrow(frames)
    one_hour = overview_cells(completeness, time_range(latest_window(completeness), "1h"))
    assert one_hour["window_start"].nunique() == 7  # 11:00 .. the newest (open) 12:00 window, both included


def test_tier_health_reports_the_oldest_watermark_and_lag(frames):
    health = tier_health(frames["tier_status"]).set_index("tier")
    assert health.loc["lake", "behind_min"] == pytest.approx(45.0, abs=0.1)
    assert health.loc["lake", "lag"] == 5000 and health.loc["dc1", "lag"] == 0
    assert tier_health(frames["tier_status"].iloc[0:0]).empty


def test_the_heatmap_colors_each_cell_by_status_and_is_clickable(frames):
    data = overview_data(completeness_arrow(frames), frames["tier_status"], range_key="24h", search=None)
    figure = figures.status_heatmap(data["cells"], data["order"])
    [trace] = figure.data
    assert list(trace.y) == data["order"]
    row = list(trace.y).index("dc1.orders")
    assert list(trace.customdata[row]).count("incomplete") == 1
    assert figure.layout.clickmode == "event"


def test_the_correlation_graph_has_a_line_per_tier_and_shows_the_gap(frames):
    counts = frames["tier_counts"].query("topic == 'orders'")
    assert [t.name for t in figures.correlation_figure(counts).data] == ["producer", "aggregate", "dc1", "lake"]
    order = frames["completeness"][["tier", "tier_order"]].drop_duplicates("tier")
    figure = figures.correlation_figure(counts.merge(order, on="tier"))  # as the topic page does
    assert [trace.name for trace in figure.data] == ["producer", "dc1", "aggregate", "lake"]
    y = {trace.name: list(trace.y) for trace in figure.data}
    assert y["producer"][3] - y["aggregate"][3] == 40 and y["producer"][2] == y["lake"][2]


def test_missing_and_duplicated_bars_cover_final_windows_only(frames):
    rows = frames["completeness"].query("topic == 'clicks'")
    figure = figures.missing_figure(rows)
    lake = next(trace for trace in figure.data if trace.name == "lake missing")
    assert all(value == 0 for value in lake.y)  # the lagging windows are not final: no missing drawn
    payments = figures.missing_figure(frames["completeness"].query("topic == 'payments'"))
    assert any(trace.name == "lake duplicated" and max(trace.y) == 7 for trace in payments.data)


@pytest.mark.parametrize(
    "builder",
    [
        figures.status_heatmap,
        figures.correlation_figure,
        figures.completeness_figure,
        figures.missing_figure,
        figures.latency_figure,
        figures.watermark_figure,
        figures.lag_figure,
    ],
)
def test_every_figure_says_no_data_on_an_empty_frame(builder):
    figure = builder(pd.DataFrame())
    assert figure.layout.annotations[0].text == "no data in this range"


def test_the_cache_rereads_only_after_refresh_and_a_new_version(tmp_path, frames):
    clock = [0.0]
    write_frames(str(tmp_path), {"tier_status": frames["tier_status"]})
    cache = LakeCache(str(tmp_path), refresh_s=30, days=7, clock=lambda: clock[0])
    first = cache.table("tier_status")
    write_frames(str(tmp_path), {"tier_status": frames["tier_status"].head(2)})
    assert cache.table("tier_status") is first  # within refresh_s: the cached snapshot
    clock[0] = 31
    assert cache.table("tier_status").num_rows == 2
    assert cache.table("alerts").num_rows == 0  # a table not written yet reads as empty


def test_bulk_completeness_matches_the_table_schema():
    table = bulk_completeness(now=NOW, topics=3, days=1)
    assert table.schema == arrow_table(COMPLETENESS, []).schema and table.num_rows == 3 * 144 * 4


def test_basic_auth_guards_every_request_when_configured(tmp_path):
    from dashboards.app import create_app

    settings = Settings.default().replace(state_dir=tmp_path, ui=UiSettings(auth_user="admin", auth_password="pw"))
    client = create_app(settings).server.test_client()
    assert client.get("/").status_code == 401
    assert client.get("/_dash-layout").status_code == 401
    wrong = base64.b64encode(b"admin:nope").decode()
    assert client.get("/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401
    right = base64.b64encode(b"admin:pw").decode()
    assert client.get("/", headers={"Authorization": f"Basic {right}"}).status_code == 200
    open_settings = settings.replace(ui=UiSettings())
    assert create_app(open_settings).server.test_client().get("/").status_code == 200


def test_tier_health_says_no_watermark_yet_for_a_tier_that_has_not_reported():
    silent_everywhere = sample_frames(
        SampleSpec(now=NOW, faults=[NoWatermark(topic, "lake") for topic in ("orders", "payments", "clicks")])
    )
    health = tier_health(silent_everywhere["tier_status"]).set_index("tier")
    assert health.loc["lake", "watermark"] == NO_WATERMARK and pd.isna(health.loc["lake", "behind_min"])
    assert health.loc["lake", "without_watermark"] == 3
    assert "1970" not in " ".join(health["watermark"]) and health["behind_min"].max() < 1, health

    one_silent = sample_frames(SampleSpec(now=NOW, faults=[NoWatermark("orders", "lake")]))
    lake = tier_health(one_silent["tier_status"]).set_index("tier").loc["lake"]
    assert lake["watermark"].startswith("2025-03-04") and lake["without_watermark"] == 1


def test_worst_topics_judge_final_windows_only_and_count_windows_in_flight_apart(frames):
    data = overview_data(completeness_arrow(frames), frames["tier_status"], range_key="24h", search=None)
    worst = data["worst"].set_index("logical_topic")
    # clicks' lake is 45 minutes behind: its open windows are short so far, but that is not a verdict
    assert worst.loc["dc1.clicks", "worst_pct"] == 100.0 and worst.loc["dc1.clicks", "missing"] == 0
    assert worst.loc["dc1.clicks", "in_flight"] >= 5
    assert worst.loc["dc1.orders", "missing"] == 40 and worst.loc["dc1.orders", "worst_pct"] < 100
    assert data["order"][-1] == "dc1.clicks", "a topic with no final loss sorts after the ones with one"


def test_the_completeness_graph_shades_the_windows_not_final_yet(frames):
    rows = frames["completeness"].query("topic == 'clicks'")
    figure = figures.completeness_figure(rows)
    shaded = [shape.x0 for shape in figure.layout.shapes if shape.name == "in flight"]
    open_windows = rows.groupby("window_start")["final"].all()
    assert len(shaded) == int((~open_windows).sum()) >= 5
    assert {pd.Timestamp(x) for x in shaded} == {pd.Timestamp(w) for w in open_windows.index[~open_windows]}


def test_restated_windows_are_starred_on_their_tier_with_every_change():
    from dashboards.data import restated_changes
    from dashboards.sample import Restated, window_starts

    frames = sample_frames(SampleSpec(now=NOW, faults=[Loss("orders", "lake", 4, 3), Restated("orders", "lake", 4, 9)]))
    [row] = frames["restatements"].to_dict("records")
    assert (row["before_status"], row["after_status"], row["before_observed"] - row["after_observed"]) == (
        "incomplete",
        "incomplete",
        -9,
    )
    again = {
        **row,
        "before_status": "incomplete",
        "after_status": "complete",
        "restated_at": row["restated_at"] + pd.Timedelta(minutes=1),
    }
    changes = restated_changes(pd.DataFrame([again, row]))
    window = pd.Timestamp(window_starts(NOW, 12, 10)[4])
    assert changes["window_start"].tolist() == [window] and changes["tier"].tolist() == ["lake"]
    observed = f"{row['before_observed']:,} -> {row['after_observed']:,}"
    assert (
        changes["restated"].iloc[0]
        == f"incomplete -> incomplete, observed {observed}; incomplete -> complete, observed {observed}"
    )

    rows = frames["completeness"].query("topic == 'orders'")
    figure = figures.completeness_figure(rows, None, changes)
    [star] = [trace for trace in figure.data if trace.name == "restated"]
    assert [pd.Timestamp(x, tz="UTC") for x in star.x] == [window]
    assert (
        list(star.y)
        == rows.query("tier == 'lake'").set_index("window_start").loc[[window], "completeness_pct"].tolist()
    )
    assert "restated" not in {
        t.name for t in figures.completeness_figure(rows, None, restated_changes(frames["restatements"].iloc[0:0])).data
    }


def test_the_window_rows_name_the_partitions_each_tier_is_short_in(frames):
    window = frames["completeness"]["window_start"].drop_duplicates().sort_values().iloc[3]
    completeness = frames["completeness"]
    rows = completeness[(completeness["topic"] == "orders") & (completeness["window_start"] == window)]
    shown = with_partition_losses(rows, frames["tier_counts"]).set_index("tier")["missing_by_partition"]
    assert shown.to_dict() == {
        "producer": "",
        "dc1": "",
        "aggregate": "40 in partition 0",
        "lake": "40 in partition 0",
    }


def test_the_lag_axes_read_plain_numbers_from_0_never_si_suffixes():
    """issue 60: a tier a few milliseconds behind read `80µ` minutes (plotly's default SI tick format)."""
    at = pd.Timestamp("2026-12-05 09:00", tz="UTC")
    history = pd.DataFrame(
        {"tier": ["dc1", "dc1"], "emitted_at": [at, at + pd.Timedelta(minutes=1)], "behind_min": [8e-5, 0.0]}
    )
    for figure in (figures.watermark_figure(history), figures.lag_figure(history.assign(lag=[0, 0]))):
        axis = figure.layout.yaxis
        assert axis.tickformat and "s" not in axis.tickformat and axis.rangemode == "tozero", axis


def test_a_mismatch_has_its_own_colour_rank_and_marker():
    frames = sample_frames(SampleSpec(now=NOW, faults=[Mismatch("payments", "aggregate", 4, partition=2)]))
    data = overview_data(completeness_arrow(frames), frames["tier_status"], range_key="24h", search=None)
    figure = figures.status_heatmap(data["cells"], data["order"])
    [trace] = figure.data
    assert "mismatch" in trace.colorbar.ticktext
    assert figures.STATUS_COLORS["mismatch"] in {colour for _stop, colour in trace.colorscale}
    assert len(set(figures.STATUS_COLORS.values())) == len(figures.STATUS_COLORS)
    row = list(trace.y).index("dc1.payments")
    assert list(trace.customdata[row]).count("mismatch") == 1
    assert (
        data["order"][0] == "dc1.payments"
        and data["worst"].set_index("logical_topic").loc["dc1.payments", "mismatch"] == 1
    )

    rows = frames["completeness"].query("topic == 'payments'")
    [marks] = [t for t in figures.completeness_figure(rows).data if t.name == "mismatch"]
    assert marks.marker.color == figures.STATUS_COLORS["mismatch"]
    assert list(marks.customdata) == [
        "aggregate: content differs in partition 2",
        "lake: content differs in partition 2",
    ]


def test_an_over_window_whose_content_differs_in_another_partition_is_marked_too():
    frames = sample_frames(SampleSpec(now=NOW, faults=[Duplicate("payments", "aggregate", 4, count=3)]))
    rows = frames["completeness"].query("topic == 'payments'").copy()
    over = rows.index[rows["status"] == "over"]
    assert len(over) >= 1 and not any(t.name == "mismatch" for t in figures.completeness_figure(rows).data)
    rows["mismatched_partitions"] = [[1] if index in over else None for index in rows.index]
    [marks] = [t for t in figures.completeness_figure(rows).data if t.name == "mismatch"]
    assert len(marks.customdata) == len(over) and marks.customdata[0].endswith("content differs in partition 1")


def test_every_app_of_a_process_serves_the_pages_callbacks(tmp_path):
    """dash.callback gives its callbacks to the first app set up only: the UI registers them on each app."""
    from dashboards import ids
    from dashboards.app import create_app

    def callback_inputs() -> set[str]:
        app = create_app(Settings.default().replace(state_dir=tmp_path))
        dependencies = app.server.test_client().get("/_dash-dependencies").get_json()
        return {i["id"] for dependency in dependencies for i in dependency["inputs"]}

    first, second = callback_inputs(), callback_inputs()
    assert {ids.TOPIC, ids.HEATMAP, ids.RANGE, ids.SEARCH} <= first
    assert second == first


def tier_colours_drawn(figure) -> dict[str, str]:
    """Tier -> the colour each of its traces is drawn in (a tier drawn in two colours fails here)."""
    drawn: dict[str, str] = {}
    for trace in figure.data:
        tier = trace.name.removesuffix(" missing").removesuffix(" duplicated")
        if tier in ("restated", "mismatch"):  # window marks in their status's colour, not tier traces
            continue
        colour = trace.line.color if trace.type == "scatter" else trace.marker.color
        assert drawn.setdefault(tier, colour) == colour, (figure.layout.title.text, tier, colour, drawn[tier])
    return drawn


def test_every_figure_draws_each_tier_in_the_same_colour(frames):
    """issue 70: plotly colours traces by position, so a tier changed colour from one chart to the next."""
    from dashboards.data import status_history
    from dashboards.tier_colors import TierColors

    colours = TierColors.of(Settings.default().tiers)
    # A consumer group's tier no configuration names, and charts that hold different tiers in different orders.
    group = frames["completeness"].query("tier == 'lake'").assign(tier="group.analytics", tier_order=9)
    rows = pd.concat([frames["completeness"], group]).query("topic == 'orders'")
    counts = pd.concat([frames["tier_counts"], group.assign(count=1, latency_p99_ms=5.0)]).query("topic == 'orders'")
    records = frames["audit_records"]
    history = status_history(records, time_range(records["emitted_at"].max(), "24h"))
    charts = [
        figures.correlation_figure(counts, colors=colours),
        figures.correlation_figure(counts[counts["tier"] != "dc1"], colors=colours),
        figures.completeness_figure(rows, colors=colours),
        figures.missing_figure(rows.assign(final=True, duplicated=3), colors=colours),
        figures.latency_figure(counts.iloc[::-1], colors=colours),
        figures.watermark_figure(history, colors=colours),
        figures.lag_figure(history[history["tier"] != "producer"], colors=colours),
    ]
    seen: dict[str, str] = {}
    for chart in charts:
        for tier, colour in tier_colours_drawn(chart).items():
            assert seen.setdefault(tier, colour) == colour, (chart.layout.title.text, tier, colour, seen[tier])
    assert {"producer", "dc1", "aggregate", "lake", "group.analytics"} <= set(seen)
    assert seen == {tier: colours(tier) for tier in seen}
    configured = [colours(tier) for tier in Settings.default().tiers]
    assert len(set(configured)) == len(configured), "each configured tier its own colour"
    assert colours("group.analytics") == TierColors.of(["producer", "other"])("group.analytics"), "stable by name"
    assert not set(configured) & set(figures.STATUS_COLORS.values()), "a tier's line never reads as a verdict"


def test_the_pages_draw_their_tiers_in_the_configured_colours(tmp_path):
    import dash
    from dash import dcc

    from dashboards.app import create_app
    from dashboards.sample import demo_frames
    from dashboards.screenshots import recent_now
    from dashboards.tier_colors import TierColors

    settings = Settings.default().replace(state_dir=tmp_path)
    write_frames(str(tmp_path / "lake"), demo_frames(recent_now()))
    create_app(settings, lake=str(tmp_path / "lake"))
    pages = {
        "dashboards.pages.topic": dict(topic="dc1.orders", range="24h"),
        "dashboards.pages.lag": dict(range="24h"),
    }
    graphs = [
        component.figure
        for module, query in pages.items()
        for component in dash.page_registry[module]["layout"](**query)._traverse()
        if isinstance(component, dcc.Graph)
    ]
    drawn = {tier: colour for graph in graphs for tier, colour in tier_colours_drawn(graph).items()}
    assert len(graphs) == 6 and {"producer", "dc1", "aggregate", "lake"} <= set(drawn)
    colours = TierColors.of(settings.tiers)
    assert drawn == {tier: colours(tier) for tier in drawn}
