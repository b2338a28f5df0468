"""Completeness rules: observed against expected, and the status of a (topic, window, tier).

Pure and vectorized (pandas, no Spark or Kafka inside): the reconciliation applies `classify` to
its rows through `mapInPandas`, the pandas benchmark baseline and the tests call it directly, so
there is one implementation of the rules.

The rules, in order (see docs/tables.md):
- missing / duplicated: per partition when both the reference and the tier report counts per
  partition (then a duplicate in one partition cannot hide a loss in another), else from totals.
- pending: the window is still open in wall-clock time (now < window end + grace) and not yet equal.
- lagging: the tier has not seen everything up to window end + grace (its watermark, which includes
  every tier upstream of it): not final, so never a loss.
- incomplete: final, missing > 0 and (expected - missing) / expected below the threshold.
- over: final and duplicated > 0 (at-least-once hops repeat messages): never shown as complete.
- mismatch: final, nothing duplicated and no loss below the threshold, but some partition's content differs.
  Content is judged per partition: a partition differs when its counts balance (the same number at both tiers)
  and both the tier's and the reference tier's content digests (audit/contract/digest.py) of it are known and
  differ (a changed message, or a loss hidden by a duplicate). The digests of a partition whose counts differ
  say nothing the counts do not. Without partition counts on both sides the window's totals must balance.
  Never complete; before the window is final such a row is pending or lagging like any other that does not
  balance. An unknown digest on either side leaves the window to its counts.
- complete: otherwise.
- unknown: set after these rules (audit/contract/unknown_counts.py) where the counts a row rests on are unknown
  (`tier_counts.unknown`: the tier's or its reference's). A window whose producer counts are unknown is judged
  against the origin cluster (its `reference_tier`), whose own row is then unknown, never a loss. Nothing is
  missing or duplicated in an unknown row. Aborted messages (`tier_counts.aborted`) are never expected.

`mismatched_partitions` lists the partitions whose content differs in every final row that has any, whatever
its status: a row both incomplete (or over) in some partitions and differing in content in others keeps the
worse status, incomplete (or over), and names its differing partitions, so neither hides the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

COMPLETE, INCOMPLETE, OVER, LAGGING, PENDING = "complete", "incomplete", "over", "lagging", "pending"
MISMATCH = "mismatch"
UNKNOWN = "unknown"  # audit/contract/unknown_counts.py: never a verdict on counts no tier can vouch for
DEFAULT_THRESHOLD_PCT = 100.0
# Every status, the worst last: a loss, then content that differs though the counts balance, then duplicates.
STATUSES_BY_SEVERITY = (COMPLETE, UNKNOWN, PENDING, LAGGING, OVER, MISMATCH, INCOMPLETE)


def partition_differences(expected: Mapping[int, int], observed: Mapping[int, int]) -> dict[int, int]:
    """observed - expected per partition where they differ: negative is missing, positive duplicated."""
    differences = {}
    for partition in sorted(set(expected) | set(observed)):
        difference = observed.get(partition, 0) - expected.get(partition, 0)
        if difference:
            differences[partition] = difference
    return differences


def partition_gaps(expected: Mapping[int, int] | None, observed: Mapping[int, int] | None) -> tuple[int, int] | None:
    """(missing, duplicated) summed over partitions, or None when either side lacks partition counts."""
    if expected is None or observed is None:
        return None
    differences = partition_differences(expected, observed).values()
    return -sum(d for d in differences if d < 0), sum(d for d in differences if d > 0)


def partition_map(value) -> Mapping[int, int] | None:
    """A partition map as pandas hands it over: a dict, a list of (key, value) pairs (Arrow maps), or missing."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, Mapping):
        return value
    return dict(value)


def differing_digests(expected: Mapping[int, int] | None, observed: Mapping[int, int] | None) -> list[int] | None:
    """The partitions, in order, whose digests differ (a partition one side lacks has the digest of no message,
    0), or None when either side's digests are unknown."""
    if expected is None or observed is None:
        return None
    return [p for p in sorted(set(expected) | set(observed)) if expected.get(p, 0) != observed.get(p, 0)]


def mismatched_partitions(frame: pd.DataFrame, balanced: np.ndarray) -> list[list[int] | None]:
    """Per row, the partitions whose content differs (see the module doc) of its `expected_digest_by_partition`
    and `observed_digest_by_partition`: None where either is unknown (or the frame has no such columns).
    `balanced`: per row, whether its totals balance, which decides a row without partition counts on both sides."""
    differing: list[list[int] | None] = [None] * len(frame)
    if "expected_digest_by_partition" not in frame or "observed_digest_by_partition" not in frame:
        return differing
    expected, observed = frame["expected_digest_by_partition"], frame["observed_digest_by_partition"]
    expected_counts, observed_counts = frame["expected_by_partition"], frame["observed_by_partition"]
    for row in np.flatnonzero((expected.notna() & observed.notna()).to_numpy()):
        partitions = differing_digests(partition_map(expected.iat[row]), partition_map(observed.iat[row]))
        counts = partition_map(expected_counts.iat[row]), partition_map(observed_counts.iat[row])
        differing[row] = balanced_only(partitions, *counts, totals_balance=bool(balanced[row]))
    return differing


def balanced_only(
    partitions: list[int] | None,
    expected: Mapping[int, int] | None,
    observed: Mapping[int, int] | None,
    *,
    totals_balance: bool,
) -> list[int] | None:
    """Of `partitions`, those whose counts balance; without counts on both sides, all of them if the totals
    balance, else none."""
    if partitions is None:
        return None
    if expected is None or observed is None:
        return partitions if totals_balance else []
    return [p for p in partitions if expected.get(p, 0) == observed.get(p, 0)]


def gaps(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Missing and duplicated per row: by partition where both sides have it, else from the totals."""
    expected = frame["expected"].to_numpy(dtype=np.int64)
    observed = frame["observed"].to_numpy(dtype=np.int64)
    missing = np.maximum(expected - observed, 0)
    duplicated = np.maximum(observed - expected, 0)
    both = frame["expected_by_partition"].notna() & frame["observed_by_partition"].notna()
    for row in np.flatnonzero(both.to_numpy()):
        found = partition_gaps(
            partition_map(frame["expected_by_partition"].iat[row]),
            partition_map(frame["observed_by_partition"].iat[row]),
        )
        if found is not None:
            missing[row], duplicated[row] = found
    return missing, duplicated


def classify(frame: pd.DataFrame, *, now_ms: int, grace_ms: int) -> pd.DataFrame:
    """`frame` with missing, duplicated, completeness_pct, final, status and mismatched_partitions added (see the
    module doc).

    `tier_watermark_ms` may be missing (NaN): nothing is known of the tier's progress, so it is not final.
    `expected_digest_by_partition` and `observed_digest_by_partition` may be absent: no digest is known.
    """
    out = frame.copy()
    missing, duplicated = gaps(frame)
    expected = frame["expected"].to_numpy(dtype=np.float64)
    observed = frame["observed"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(expected > 0, 100.0 * observed / expected, np.nan)
    due_ms = frame["window_end_ms"].to_numpy(dtype=np.float64) + grace_ms
    watermark = frame["tier_watermark_ms"].to_numpy(dtype=np.float64)
    final = np.nan_to_num(watermark, nan=-np.inf) >= due_ms
    still_open = now_ms < due_ms
    threshold = (
        pd.to_numeric(frame["threshold_pct"], errors="coerce").fillna(DEFAULT_THRESHOLD_PCT).to_numpy(dtype=np.float64)
    )
    # Judged on what was delivered (expected - missing), so duplicates cannot lift a loss over the bar.
    with np.errstate(divide="ignore", invalid="ignore"):
        delivered_pct = np.where(expected > 0, 100.0 * (expected - missing) / expected, 0.0)
    below = (missing > 0) & ~(delivered_pct >= threshold)
    differing = mismatched_partitions(frame, (missing == 0) & (duplicated == 0))
    content_differs = np.array([bool(partitions) for partitions in differing], dtype=bool)
    exact = (missing == 0) & (duplicated == 0) & ~content_differs

    status = np.full(len(frame), COMPLETE, dtype=object)
    status[~exact & ~final & ~still_open] = LAGGING
    status[~exact & ~final & still_open] = PENDING
    status[final & content_differs] = MISMATCH
    status[final & (duplicated > 0)] = OVER  # duplicates outrank a mismatch, which stays named
    status[final & below] = INCOMPLETE  # a loss outranks duplicates shown in the same row
    out["missing"] = missing
    out["duplicated"] = duplicated
    out["completeness_pct"] = pct
    out["final"] = final
    out["status"] = status
    out["mismatched_partitions"] = [
        partitions if named else None for partitions, named in zip(differing, final & content_differs, strict=True)
    ]
    return out


def threshold_for(topic: str, thresholds: list[tuple[re.Pattern[str], float]]) -> float:
    """The threshold of the first (compiled regex, percent) pair whose regex searches `topic`, else 100 %."""
    for pattern, percent in thresholds:
        if pattern.search(topic):
            return percent
    return DEFAULT_THRESHOLD_PCT
