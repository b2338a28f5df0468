"""The tiers' kept points in the lake (`_tier_points`): what the books write is what they read back, an unchanged
tier makes no commit, and a lake written before points were kept stands each tier for one point whose tier before
it is unknown; and the positions the reporters read, which `tier_paths.caught_up_at` compares."""

from __future__ import annotations

import datetime as dt

from audit.books.count.tier_status import stored_points
from audit.books.judge.paths import reported_points
from audit.contract.tables import TIER_POINTS, TIER_STATUS
from audit.contract.watermark_points import WatermarkPoint
from audit.contract.windows import to_ms
from audit.io import delta_io
from audit.io.lake import Lake
from audit.io.lake_read import table_version

PAIR = {"tier": "lake", "origin_cluster": "dc1", "topic": "clicks"}


def stored(points: list[WatermarkPoint]) -> dict:
    return {**PAIR, "points": [point._asdict() for point in points]}


def test_points_written_are_read_back_in_order_and_an_unchanged_tier_makes_no_commit(tmp_path):
    lake = str(tmp_path / "lake")
    delta_io.ensure_tables(lake, (TIER_POINTS.name,))
    first = [WatermarkPoint(1_000, 500, 400), WatermarkPoint(2_000, 1_000, None)]
    other = {**PAIR, "tier": "aggregate", "points": [WatermarkPoint(3_000, None, 3_000)._asdict()]}
    delta_io.upsert_from_driver(lake, TIER_POINTS, [stored(first), other], ignore=())
    assert stored_points(lake) == {
        ("lake", "dc1", "clicks"): first,
        ("aggregate", "dc1", "clicks"): [WatermarkPoint(3_000, None, 3_000)],
    }
    version = table_version(lake, TIER_POINTS.name)
    delta_io.upsert_from_driver(lake, TIER_POINTS, [stored(first)], ignore=())
    assert table_version(lake, TIER_POINTS.name) == version, "the same points: no commit"
    later = [*first, WatermarkPoint(4_000, 2_000, 1_500)]
    delta_io.upsert_from_driver(lake, TIER_POINTS, [stored(later)], ignore=())
    assert stored_points(lake)[("lake", "dc1", "clicks")] == later


def test_a_tier_status_row_without_points_is_one_point_whose_tier_before_is_unknown(tmp_path):
    lake = str(tmp_path / "lake")
    delta_io.ensure_tables(lake, (TIER_POINTS.name, TIER_STATUS.name))
    seen, last = dt.datetime(2026, 11, 28, 21, 49, tzinfo=dt.UTC), dt.datetime(2026, 11, 28, 21, 50, tzinfo=dt.UTC)
    old = {**PAIR, "tier": "aggregate", "watermark": seen, "last_status_at": last}
    delta_io.upsert_from_driver(lake, TIER_STATUS, [old, {**PAIR, "watermark": seen, "last_status_at": last}])
    delta_io.upsert_from_driver(lake, TIER_POINTS, [stored([WatermarkPoint(9_000, 8_000, 7_000)])], ignore=())
    reported = {row[2]: row[3] for row in reported_points(Lake.of(lake))}
    assert reported == {
        "lake": [WatermarkPoint(9_000, 8_000, 7_000)],
        "aggregate": [WatermarkPoint(to_ms(last), None, to_ms(seen))],
    }


def test_the_positions_read_are_each_reporters_newest_by_cluster_topic_and_partition(tmp_path):
    from audit.books.judge.paths import read_positions
    from audit.contract.tables import PARTITION_STATUS

    lake = str(tmp_path / "lake")
    delta_io.ensure_tables(lake, (PARTITION_STATUS.name,))
    emitted = dt.datetime(2026, 11, 29, 0, 36, 4, tzinfo=dt.UTC)
    mirror = {"tier": "aggregate", "cluster": "dc1", "seen_topic": "ledger", "service": "kaudit-mirror"}
    rows = [
        {
            **mirror,
            "origin_cluster": "dc1",
            "topic": "ledger",
            "partition": p,
            "position": 10 + p,
            "emitted_at": emitted,
        }
        for p in (0, 1)
    ]
    delta_io.upsert_from_driver(lake, PARTITION_STATUS, rows, ignore=())
    assert read_positions(Lake.of(lake)) == {
        ("dc1", "ledger", "aggregate"): {
            ("dc1", "ledger", 0): (10, to_ms(emitted)),
            ("dc1", "ledger", 1): (11, to_ms(emitted)),
        }
    }
