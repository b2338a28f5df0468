"""The tiers on each topic's path: their order, the topic's reference tier and each tier's effective watermark.

Pure (no Spark): the tiers that counted a topic and the watermarks its tiers reported are a few rows per
topic, held by the driver, so the rule is computed there (a Spark query would cost 1-2 s of every run).
- A topic's path holds every tier that counted it or reported on it, but the producer: its counts are final
  once flushed. The path runs in the configured `tiers` order, unconfigured tiers last by name.
- The reference tier is `reference_tier` when that tier is on the path (or counted), else the origin cluster.
- A tier's effective watermark is the lowest of its own and of the tier right before it as it stood when the
  tier reported (audit/contract/watermark_points.py holds that rule): the lake cannot be final for data the
  aggregate had not received when the lake said it was caught up. Or, once the tier's reporters have read as far
  as the tier before's own counter had (and the tier's own counter reported after that), of the tier before as it
  stood at that counter's status (`caught_up_at`). A tier that never reported has none, and the tiers after it
  start again from their own.
- The reference tier itself is not judged (the others are judged against it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from audit.contract.names import PRODUCER_TIER
from audit.contract.watermark_points import WatermarkPoint, counted_after_copies

PATH_COLUMNS = ("origin_cluster", "topic", "tier", "tier_order", "reference_tier", "tier_watermark_ms")
PATH_DDL = (
    "origin_cluster STRING, topic STRING, tier STRING, tier_order INT, reference_tier STRING, tier_watermark_ms BIGINT"
)


def paths_from(
    counted: Iterable[tuple[str, str, str]],
    reported: Iterable[tuple[str, str, str, Sequence[WatermarkPoint]]],
    tiers: tuple[str, ...],
    reference_tier: str,
    read: Mapping[tuple[str, str, str], Mapping[tuple, tuple[int, int]]] | None = None,
) -> list[tuple]:
    """`PATH_COLUMNS` rows from the (origin_cluster, topic, tier) that counted and the (origin_cluster, topic,
    tier, kept points in `status_at_ms` order) that reported. `read`: per (origin_cluster, topic, tier), the
    (position, emitted_at_ms) of each of its reporters' newest status, by (cluster, seen_topic, partition)."""
    points: dict[tuple[str, str], dict[str, Sequence[WatermarkPoint]]] = defaultdict(dict)
    for origin, topic, tier in counted:
        points[(origin, topic)].setdefault(tier, ())
    for origin, topic, tier, kept in reported:
        points[(origin, topic)][tier] = kept
    order = {tier: index for index, tier in enumerate(tiers)}  # unconfigured tiers: len(tiers)
    return [
        row
        for (origin, topic), by_tier in points.items()
        for row in _path(origin, topic, by_tier, order, reference_tier, read or {})
    ]


def _path(
    origin: str, topic: str, by_tier: dict, order: dict[str, int], reference_tier: str, read: Mapping
) -> list[tuple]:
    reference = reference_tier if reference_tier in by_tier else origin
    along = sorted((order.get(tier, len(order)), tier) for tier in by_tier if tier != PRODUCER_TIER)
    rows, before, before_tier = [], None, None
    for tier_order, tier in along:
        marks = None
        if by_tier[tier]:
            caught_up = None
            if before_tier is not None:
                caught_up = caught_up_at(
                    read.get((origin, topic, tier)), read.get((origin, topic, before_tier)), before_tier, tier
                )
            marks = _Marks(by_tier[tier], before, caught_up_at=caught_up)
        effective = marks.newest() if marks is not None else None
        if tier != reference:
            rows.append((origin, topic, tier, tier_order, reference, effective))
        before, before_tier = marks, tier
    return rows


def caught_up_at(
    reader: Mapping[tuple, tuple] | None, before: Mapping[tuple, tuple] | None, cluster: str, tier: str
) -> int | None:
    """The moment as of which a tier (`tier`) has counted all the tier before it (`cluster`) had, by offsets: the
    oldest newest status of that cluster's own reporters (its counter), when the tier's reporters have read on
    `cluster`, partition by partition, at least as far as those had, and the tier's own counter, if it has one,
    reported after they read (else it had not counted it: `watermark_points.counted_since`). None otherwise.

    A stopped pipeline whose replicator reported last a few seconds before the origin's counter is then final: its
    time of report alone says nothing of what the origin received in those seconds, its offsets do."""
    own = {key: seen for key, seen in (before or {}).items() if key[0] == cluster}
    reached = reader or {}
    if not own or any(reached.get(key, (-1, 0))[0] < position for key, (position, _) in own.items()):
        return None
    counted = [emitted for key, (_, emitted) in reached.items() if key[0] == tier]
    copied = [emitted for key, (_, emitted) in reached.items() if key[0] == cluster]
    if not counted_after_copies(counted, copied):
        return None
    return min(emitted for _, emitted in own.values())


class _Marks:
    """A tier's effective watermark at each of its kept points, computed from the newest back as far as the tier
    after it looks (usually a point or two: a path of 2,000 topics must not cost 2,000 x 16 x 16 steps)."""

    def __init__(self, points: Sequence[WatermarkPoint], before: _Marks | None, *, caught_up_at: int | None = None):
        self.points, self.before = points, before
        self.caught_up_at = caught_up_at  # for the newest point (`caught_up_at`, by offsets)
        self.moments = [point.status_at_ms for point in points]
        self.lowest_from: dict[int, int | None] = {}  # index -> lowest mark from that point on

    def newest(self) -> int | None:
        return self._lowest_since(len(self.points) - 1)

    def lowest_since(self, moment: int | None) -> int | None:
        """The lowest mark from the last point at or before `moment` on; None when none is that old."""
        index = -1 if moment is None else bisect_right(self.moments, moment) - 1
        return None if index < 0 else self._lowest_since(index)

    def _lowest_since(self, index: int) -> int | None:
        if index not in self.lowest_from:
            mark = self._mark(index)
            later = self._lowest_since(index + 1) if index + 1 < len(self.points) else mark
            self.lowest_from[index] = None if mark is None or later is None else min(mark, later)
        return self.lowest_from[index]

    def _mark(self, index: int) -> int | None:
        point = self.points[index]
        if self.before is None or point.watermark_ms is None:
            return point.watermark_ms
        moment = point.reported_from_ms
        if index == len(self.points) - 1 and self.caught_up_at is not None:
            moment = self.caught_up_at if moment is None else max(moment, self.caught_up_at)
        bound = self.before.lowest_since(moment)
        return None if bound is None else min(point.watermark_ms, bound)
