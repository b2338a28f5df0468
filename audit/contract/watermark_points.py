"""A tier's watermark through time: the points the books keep of it, so a tier after it on a path is bounded by
the watermark it had when that tier reported, not by its newest.

Why: a tier's "lag 0 at t" covers what the tier before it held at t. If the tier before was behind at t (a
replicator stalled) and caught up since, its newest watermark says nothing about what the tier after it had
seen at t: combining the two would make old windows final, and short, at the lake (a false loss).

- A point is where a tier stood after one of its status records was applied: the tier's watermark from the
  newest status of each of its reporter partitions, all emitted at or before `status_at_ms`, the oldest of them
  at `reported_from_ms`. Its claim holds from `status_at_ms` on: what a tier holds only grows.
- The books replay each run's status records in the order they were emitted, one point per moment, and keep a
  tier's newest `KEPT_POINTS` (`kept`). Dropping a point only makes the lookups below fall on an older one (a
  lower watermark) or on none (unknown): never a higher watermark.
- The tier after it on a path is bounded by the lowest watermark this tier had from its last point at or
  before the later tier's `reported_from_ms` on (or, when offsets show the later tier read as far as this
  tier's counter had, before that counter's status); by none (unknown) if no kept point is that old
  (audit/contract/tier_paths.py applies it).
- Within a cluster tier the same holds between its counter and the replicators into it: the counter's lag 0 at t
  covers what had arrived by t, so a point made after a replicator's newer status is bounded by the tier's points
  as they stood at the counter's status, each bounded by the tier before it as of its own oldest status
  (`counted_since`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from itertools import groupby
from typing import NamedTuple

from audit.contract.windows import to_ms

# A reporter partition: the key of `_partition_status` (audit/contract/tables.py).
REPORTER_KEY = ("tier", "cluster", "seen_topic", "service", "partition")
# Points kept per tier and topic: with two reporters every 10 s, 80 s; cheap to read (count/tier_status.stored_points).
KEPT_POINTS = 16
POINT_DDL = "STRUCT<status_at_ms: BIGINT, reported_from_ms: BIGINT, watermark_ms: BIGINT>"


class WatermarkPoint(NamedTuple):
    """Where a tier stood once every status emitted up to `status_at_ms` that the books had was applied (epoch
    ms; a tuple: a run reads thousands of tiers' points)."""

    status_at_ms: int
    reported_from_ms: int | None  # the oldest status behind the point; None: unknown (a lake before points)
    watermark_ms: int | None


def reporter(row: dict) -> tuple:
    return tuple(row[name] for name in REPORTER_KEY)


def replayed(
    state: dict[tuple, dict],
    statuses: Iterable[dict],
    watermark: Callable[[list[dict]], datetime | None],
    limit: int = KEPT_POINTS,
    stored: Sequence[WatermarkPoint] = (),
) -> tuple[list[WatermarkPoint], set[tuple]]:
    """Apply one tier and topic's `statuses` (rows of `_partition_status`'s columns, in any order) to `state`
    (its newest status per reporter partition, updated in place) in the order they were emitted; `stored`: the
    tier's points kept before (what `counted_since` looks back on).

    Returns the tier's point after each of the last `limit` moments that changed `state` (`watermark` of the
    partitions' rows gives its watermark, `counted_since` bounds it; older points would not be kept) and the
    reporter partitions whose newest status changed. A status older than the newest one of its partition changes
    nothing."""
    ordered = sorted(statuses, key=_emission)
    moments = [moment for moment, _ in groupby(ordered, key=lambda row: row["emitted_at"])]
    pointed = set(moments[-limit:])
    history = {point.status_at_ms: point for point in stored}
    points: list[WatermarkPoint] = []
    changed: set[tuple] = set()
    for moment, rows in groupby(ordered, key=lambda row: row["emitted_at"]):
        applied = False
        for row in rows:
            key = reporter(row)
            if key not in state or _emission(row) > _emission(state[key]):
                state[key], applied = row, True
                changed.add(key)
        if not applied:
            continue
        point = _point(list(state.values()), watermark, history)
        history[point.status_at_ms] = point
        if moment in pointed:
            if points and points[-1].status_at_ms == point.status_at_ms:
                points[-1] = point  # the same moment, known better
            else:
                points.append(point)
    return points, changed


def counted_since(rows: list[dict], history: Mapping[int, WatermarkPoint]) -> list[WatermarkPoint] | None:
    """The tier's points that bound a cluster tier's new point because a reporter that copies into the tier (a
    replicator) reported after the tier's own counter (None: no bound; empty: no point that old, unknown).

    The counter's "lag 0 at t" covers what had arrived by t: a backlog the replicator delivered after t is in
    the tier but not in its counts, however caught up the replicator says it is now. So the counter's claim holds
    only up to the tier as it stood at the counter's status: its points from the last one at or before that status
    on (`history`, by `status_at_ms`), each of them valid only as far as the tier before it held at its own oldest
    status. The counter's next status, emitted after the replicator's, lifts the bound (docs/reliability.md, "A
    backlog delivered after the counter's status")."""
    counted = [to_ms(row["emitted_at"]) for row in rows if row["cluster"] == row["tier"]]
    copied = [to_ms(row["emitted_at"]) for row in rows if row["cluster"] != row["tier"]]
    if counted_after_copies(counted, copied):
        return None
    moments = sorted(history)
    first = bisect_right(moments, min(counted)) - 1
    return [history[moment] for moment in moments[first:]] if first >= 0 else []


def counted_after_copies(counted: Sequence[int], copied: Sequence[int]) -> bool:
    """Whether a tier's counter (its newest statuses emitted at `counted`) counted what the reporters that copy into
    the tier (`copied`) had delivered: true when either is missing (a lake job lands and counts in one status)."""
    return not counted or not copied or max(copied) <= min(counted)


def _emission(row: dict) -> tuple:
    """The order of a reporter partition's statuses: by emission, ties by record id (as the stored newest)."""
    return row["emitted_at"], row["record_id"] or ""


def _point(
    rows: list[dict], watermark: Callable[[list[dict]], datetime | None], history: Mapping[int, WatermarkPoint]
) -> WatermarkPoint:
    mark = watermark(rows)
    emitted = [row["emitted_at"] for row in rows]
    point = WatermarkPoint(to_ms(max(emitted)), to_ms(min(emitted)), None if mark is None else to_ms(mark))
    since = counted_since(rows, history)
    if since is None:
        return point
    if not since:
        return point._replace(watermark_ms=None)
    # Each of those points holds only as far as the tier before it held at its oldest status: the new point's
    # oldest status becomes theirs, which the tier before bounds (audit/contract/tier_paths.py).
    return point._replace(
        watermark_ms=_lowest([point.watermark_ms, *(old.watermark_ms for old in since)]),
        reported_from_ms=_lowest([point.reported_from_ms, *(old.reported_from_ms for old in since)]),
    )


def _lowest(values: list[int | None]) -> int | None:
    return None if None in values else min(values)  # type: ignore[type-var]


def kept(
    stored: Sequence[WatermarkPoint], new: Sequence[WatermarkPoint], limit: int = KEPT_POINTS
) -> list[WatermarkPoint]:
    """A tier's points after a run: the stored ones and the run's, in `status_at_ms` order, a run's point replacing a
    stored one of the same moment, the newest `limit` of them."""
    by_moment = {point.status_at_ms: point for point in stored}
    by_moment.update((point.status_at_ms, point) for point in new)
    return [by_moment[moment] for moment in sorted(by_moment)][-limit:]
