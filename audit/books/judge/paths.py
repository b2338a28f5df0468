"""The tiers on each logical topic's path, the windows are judged along: which tiers counted it (`tier_counts`),
which reported where they stand (`_tier_points`, `tier_status`) and what their reporters read
(`_partition_status`). The rule is audit/contract/tier_paths.py's; computed in the driver, a few rows per topic."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from audit.books.count.tier_status import stored_points
from audit.books.judge.complete_through import PAIR
from audit.contract.completeness import threshold_for
from audit.contract.flows import expected_tiers, is_placeholder, undeclared_tiers
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

log = logging.getLogger(__name__)
REPORTED = ("origin_cluster", "topic", "tier", "watermark", "last_status_at", "reporters")  # read of tier_status
PATHS_DDL = f"{PATH_DDL}, threshold_pct DOUBLE"
# The undeclared (origin_cluster, topic, tier) this process has logged: each once. Bounded by the deployment.
_UNDECLARED_LOGGED: set[tuple[str, str, str]] = set()


class Paths(NamedTuple):
    """`tier_paths`' answer: the path rows (`PATHS_DDL`), the (origin_cluster, topic, tier) on the paths, and of
    those the declared tiers nothing has reached (`silent`, audit/contract/flows.py) with the `tier_status`
    placeholders stored for them so far (`placeholders`: as `tier_status.declare_silent_tiers` wrote them)."""

    rows: list[tuple]
    tiers: frozenset[tuple[str, str, str]]
    silent: frozenset[tuple[str, str, str]]
    placeholders: frozenset[tuple[str, str, str]]


def tier_paths(lake: Lake, rules: JudgeRules, counted: set[tuple[str, str, str]] | None = None) -> Paths | None:
    """Per (logical topic, tier on its path): reference tier, order, the tier's effective watermark
    (audit/contract/tier_paths.py holds the rule) and the topic's threshold; None when no topic has a path.
    The tiers on a path are those that counted or reported on the topic and those declared flows expect
    (audit/contract/flows.py). `counted`: the (origin_cluster, topic, tier) that `tier_counts` holds, when known
    (`counted_tiers`), else they are read from it."""
    counted = counted if counted is not None else counted_tiers(lake)
    expected = expected_tiers(counted, rules.flows, rules.naming)
    _log_undeclared(counted, rules)
    status = read_arrow(lake, TIER_STATUS.name, columns=REPORTED)  # written by the driver
    reported = reported_points(lake, status)
    paths = paths_from(counted | expected, reported, rules.tiers, rules.reference_tier, read_positions(lake))
    if not paths:
        return None
    patterns = list(rules.thresholds)
    thresholds = {topic: threshold_for(".".join(topic), patterns) for topic in {row[:2] for row in paths}}
    rows = [(*row, thresholds[row[:2]]) for row in paths]
    silent = frozenset(expected - {tuple(row[:3]) for row in reported})
    return Paths(rows, frozenset(row[:3] for row in paths), silent, placeholders_of(status))


def _log_undeclared(counted: set[tuple[str, str, str]], rules: JudgeRules) -> None:
    for origin, topic, tier in sorted(undeclared_tiers(counted, rules.flows, rules.naming) - _UNDECLARED_LOGGED):
        _UNDECLARED_LOGGED.add((origin, topic, tier))
        log.warning(
            "undeclared flow: topic=%s.%s counted at tier=%s, which no [[flows]] leads to; declare the flow into "
            "%s to have its absence caught",
            origin,
            topic,
            tier,
            tier,
        )


def paths_frame(spark: SparkSession, rows: list[tuple]):
    """`tier_paths`' rows as a frame, for the judging in Spark."""
    return local_frame(spark, rows, PATHS_DDL)


def reported_points(lake: Lake, status: pa.Table | None = None) -> list[tuple]:
    """(origin_cluster, topic, tier, kept points) of every tier that reported (`_tier_points`, written by the
    driver). A `tier_status` row without points (a lake written before they were kept) is one point of its
    newest watermark, with the tier before it unknown: its windows and those of the tiers after it are lagging
    until the reporters have reported again. Placeholders of silent declared tiers are no report.
    `status`: `tier_status`' REPORTED columns, when read already."""
    reported = {(origin, topic, tier): points for (tier, origin, topic), points in stored_points(lake).items()}
    status = status if status is not None else read_arrow(lake, TIER_STATUS.name, columns=REPORTED)
    for origin, topic, tier, watermark, last_status_at, reporters in zip(
        *(status.column(c).to_pylist() for c in REPORTED)
    ):
        if (origin, topic, tier) not in reported and not is_placeholder(reporters):
            newest = to_ms(last_status_at or EPOCH)
            reported[(origin, topic, tier)] = [
                WatermarkPoint(newest, None, None if watermark is None else to_ms(watermark))
            ]
    return [(*pair, points) for pair, points in reported.items()]


def placeholders_of(status: pa.Table) -> frozenset[tuple[str, str, str]]:
    """The (origin_cluster, topic, tier) of `tier_status` rows that are placeholders of silent declared tiers."""
    columns = (status.column(c).to_pylist() for c in ("origin_cluster", "topic", "tier", "reporters"))
    return frozenset((o, t, tier) for o, t, tier, reporters in zip(*columns) if is_placeholder(reporters))


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
