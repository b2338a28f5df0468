"""`classify` (audit/contract/completeness.py) as Spark columns, so judging a run's windows needs no Python
worker: at a million records the `mapInPandas` round trip is a fifth of a run.

The contract's pandas `classify` stays the one statement of the rules (its table and property tests, the
pandas benchmark); `tests/audit/books/judge/test_verdicts.py` holds this form to its answers, row for row, on
the contract's cases and on random rows. The arithmetic is the same IEEE double arithmetic in the same
order, so the percentages agree to the bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.contract.completeness import (
    COMPLETE,
    DEFAULT_THRESHOLD_PCT,
    INCOMPLETE,
    LAGGING,
    MISMATCH,
    OVER,
    PENDING,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def classified(rows: DataFrame, *, now_ms: int, grace_ms: int) -> DataFrame:
    """`rows` (expected, observed, their by-partition maps and digest maps, window_end_ms, tier_watermark_ms,
    threshold_pct) with missing, duplicated, completeness_pct, final, status and mismatched_partitions added."""
    from pyspark.sql import functions as F

    expected, observed = F.col("expected").cast("double"), F.col("observed").cast("double")
    missing, duplicated = _gaps()
    due_ms = F.col("window_end_ms") + F.lit(grace_ms)
    threshold = F.coalesce(F.when(~F.isnan("threshold_pct"), F.col("threshold_pct")), F.lit(DEFAULT_THRESHOLD_PCT))
    # Judged on what was delivered (expected - missing), so duplicates cannot lift a loss over the bar.
    delivered_pct = F.when(expected > 0, F.lit(100.0) * (expected - F.col("missing")) / expected).otherwise(0.0)
    below = (F.col("missing") > 0) & ~F.coalesce(delivered_pct >= threshold, F.lit(False))
    balanced = (F.col("missing") == 0) & (F.col("duplicated") == 0)
    content_differs = F.coalesce(F.size("_differing") > 0, F.lit(False))
    exact = balanced & ~content_differs
    final, still_open = F.col("final"), F.lit(now_ms) < due_ms
    status = (
        F.when(final & below, INCOMPLETE)  # a loss outranks duplicates shown in the same row
        .when(final & (F.col("duplicated") > 0), OVER)  # duplicates outrank a mismatch, which stays named
        .when(final & content_differs, MISMATCH)
        .when(~exact & ~final & still_open, PENDING)
        .when(~exact & ~final, LAGGING)
        .otherwise(COMPLETE)
    )
    return (
        rows.withColumn("missing", missing)
        .withColumn("duplicated", duplicated)
        .withColumn("completeness_pct", F.when(expected > 0, F.lit(100.0) * observed / expected))
        .withColumn("final", F.coalesce(F.col("tier_watermark_ms") >= due_ms, F.lit(False)))
        .withColumn("_differing", _differing_digests(balanced))
        .withColumn("status", status)
        .withColumn("mismatched_partitions", F.when(F.col("final") & content_differs, F.col("_differing")))
        .drop("_differing")
    )


def _differing_digests(balanced: Column) -> Column:
    """`mismatched_partitions` of the contract: the partitions, in order, whose digests differ (a partition one side
    lacks has the digest of no message, 0) and whose counts balance (without partition counts on both sides: all
    of them when the totals balance, `balanced`, else none); null when either side's digests are unknown."""
    from pyspark.sql import functions as F

    expected, observed = F.col("expected_digest_by_partition"), F.col("observed_digest_by_partition")
    expected_counts, observed_counts = F.col("expected_by_partition"), F.col("observed_by_partition")
    counts_known = expected_counts.isNotNull() & observed_counts.isNotNull()
    zero = F.lit(0).cast("bigint")

    def counts_balance(p: Column) -> Column:
        same = F.coalesce(observed_counts[p], zero) == F.coalesce(expected_counts[p], zero)
        return F.when(counts_known, same).otherwise(balanced)

    partitions = F.array_sort(F.array_union(F.map_keys(expected), F.map_keys(observed)))
    differing = F.filter(
        partitions,
        lambda p: (F.coalesce(observed[p], zero) != F.coalesce(expected[p], zero)) & counts_balance(p),
    )
    # One and the same partition on both sides without lambdas, as in `_gaps`.
    key = F.get(F.map_keys(expected), 0)
    one = (F.size(expected) == 1) & (F.size(observed) == 1) & (key == F.get(F.map_keys(observed), 0))
    one_differs = (F.get(F.map_values(expected), 0) != F.get(F.map_values(observed), 0)) & counts_balance(key)
    one_differing = F.when(one_differs, F.array(key)).otherwise(F.array().cast("array<int>"))
    both = expected.isNotNull() & observed.isNotNull()
    return F.when(both & one, one_differing).when(both, differing)


def _gaps() -> tuple[Column, Column]:
    """Missing and duplicated: by partition where both sides have partition counts, else from the totals."""
    from pyspark.sql import functions as F

    expected, observed = F.col("expected_by_partition"), F.col("observed_by_partition")
    partitions = F.array_union(F.map_keys(expected), F.map_keys(observed))
    differences = F.transform(
        partitions, lambda p: F.coalesce(observed[p], F.lit(0)) - F.coalesce(expected[p], F.lit(0))
    )
    zero = F.lit(0).cast("bigint")
    short = F.aggregate(differences, zero, lambda total, d: total + F.when(d < 0, -d).otherwise(0))
    over = F.aggregate(differences, zero, lambda total, d: total + F.when(d > 0, d).otherwise(0))
    # Both of one and the same partition (a one-partition topic's): without lambdas, which Spark evaluates row by
    # row outside its generated code, reading each element through a new copy of the session's settings.
    one = (
        (F.size(expected) == 1)
        & (F.size(observed) == 1)
        & (F.get(F.map_keys(expected), 0) == F.get(F.map_keys(observed), 0))
    )
    difference = F.coalesce(F.get(F.map_values(observed), 0), zero) - F.coalesce(F.get(F.map_values(expected), 0), zero)
    both = expected.isNotNull() & observed.isNotNull()
    missing = (
        F.when(both & one, F.greatest(-difference, zero))
        .when(both, short)
        .otherwise(F.greatest(F.col("expected") - F.col("observed"), zero))
    )
    duplicated = (
        F.when(both & one, F.greatest(difference, zero))
        .when(both, over)
        .otherwise(F.greatest(F.col("observed") - F.col("expected"), zero))
    )
    return missing, duplicated
