"""The tiers on each logical topic's path, the windows are judged along: which tiers counted it (`tier_counts`),
which reported where they stand (`_tier_points`, `tier_status`) and what their reporters read
(`_partition_status`). The rule is audit/contract/tier_paths.py's; computed in the driver, a few rows per topic."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import pyarrow as pa

from audit.books.count.tier_status import stored_points
from audit.books.judge.complete_through import PAIR
from audit.contract.completeness import threshold_for
from audit.contract.tables import PARTITION_STATUS, TIER_COUNTS, TIER_STATUS
from audit.contract.tier_paths import PATH_DDL, paths_from
from audit.contract.watermark_points import WatermarkPoint
from audit.contract.windows import EPOCH, to_ms
from audit.io.lake_read import read_arrow
from audit.io.spark import local_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.books.judge.rules import JudgeRules
    from audit.io.lake import Lake

REPORTED = ("origin_cluster", "topic", "tier", "watermark", "last_status_at")  # what tier_paths reads of tier_status
PATHS_DDL = f"{PATH_DDL}, threshold_pct DOUBLE"


def tier_paths(lake: Lake, rules: JudgeRules, counted: set[tuple[str, str, str]] | None = None):
    """Per (logical topic, tier on its path): reference tier, order, the tier's effective watermark
    (audit/contract/tier_paths.py holds the rule) and the topic's threshold, as rows of `PATHS_DDL` (`paths_frame`
    hands them to Spark), with the (origin_cluster, topic, tier) on the paths; None when no topic has a path. `counted`: the
    (origin_cluster, topic, tier) that `tier_counts` holds, when known (`counted_tiers`), else they are read
    from it."""
    counted = counted if counted is not None else counted_tiers(lake)
    paths = paths_from(counted, reported_points(lake), rules.tiers, rules.reference_tier, read_positions(lake))
    if not paths:
        return None
    patterns = list(rules.thresholds)
    thresholds = {topic: threshold_for(".".join(topic), patterns) for topic in {row[:2] for row in paths}}
    return [(*row, thresholds[row[:2]]) for row in paths], frozenset(row[:3] for row in paths)


def paths_frame(spark: SparkSession, rows: list[tuple]):
    """`tier_paths`' rows as a frame, for the judging in Spark."""
    return local_frame(spark, rows, PATHS_DDL)


def reported_points(lake: Lake) -> list[tuple]:
    """(origin_cluster, topic, tier, kept points) of every tier that reported (`_tier_points`, written by the
    driver). A `tier_status` row without points (a lake written before they were kept) is one point of its
    newest watermark, with the tier before it unknown: its windows and those of the tiers after it are lagging
    until the reporters have reported again."""
    reported = {(origin, topic, tier): points for (tier, origin, topic), points in stored_points(lake).items()}
    status = read_arrow(lake, TIER_STATUS.name, columns=REPORTED)  # written by the driver
    for origin, topic, tier, watermark, last_status_at in zip(*(status.column(c).to_pylist() for c in REPORTED)):
        if (origin, topic, tier) not in reported:
            newest = to_ms(last_status_at or EPOCH)
            reported[(origin, topic, tier)] = [
                WatermarkPoint(newest, None, None if watermark is None else to_ms(watermark))
            ]
    return [(*pair, points) for pair, points in reported.items()]


READ = ("origin_cluster", "topic", "tier", "cluster", "seen_topic", "partition", "position", "emitted_at")


def read_positions(lake: Lake) -> dict[tuple, dict[tuple, tuple[int, int]]]:
    """Per (origin_cluster, topic, tier), the (position, emitted_at ms) of each of its reporter partitions' newest
    status (`_partition_status`), by (cluster, seen_topic, partition): what `tier_paths.caught_up_at` compares."""
    status = read_arrow(lake, PARTITION_STATUS.name, columns=READ)  # written by the driver
    positions: dict[tuple, dict[tuple, tuple[int, int]]] = defaultdict(dict)
    for origin, topic, tier, cluster, seen, partition, position, emitted in zip(
        *(status.column(c).to_pylist() for c in READ)
    ):
        if position is not None and emitted is not None:
            positions[(origin, topic, tier)][(cluster, seen, partition)] = (position, to_ms(emitted))
    return positions


def counted_tiers(lake: Lake, known=None, counts=None) -> set[tuple[str, str, str]]:
    """The (origin_cluster, topic, tier) that `tier_counts` holds. A session that knows them from its last run
    (`known`) adds those of the `tier_counts` rows this run summed (`counts`): a tier's counts are never
    removed. A new session reads them with `deltalake`: three columns, without a Spark query (0.4-0.5 s in a
    small run)."""
    if known is None:
        return _pairs(read_arrow(lake, TIER_COUNTS.name, columns=PAIR))
    if counts is None:
        return known
    if isinstance(counts, pa.Table):  # summed in the driver
        return known | _pairs(counts)
    return known | {tuple(row) for row in counts.select(*PAIR).distinct().collect()}


def _pairs(counts: pa.Table) -> set[tuple[str, str, str]]:
    distinct = counts.select(list(PAIR)).group_by(list(PAIR)).aggregate([])
    return set(zip(*(distinct.column(name).to_pylist() for name in PAIR), strict=True))
