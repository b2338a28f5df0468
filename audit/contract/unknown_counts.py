"""Counts a tier cannot vouch for (a count record's `unknown`, `tier_counts.unknown`): what the judge makes of them.

Pure pandas, as the judge in the driver runs it; audit/books/judge/in_spark.py states the same in Spark, and
tests/audit/books/judge/test_judge_driver.py holds the two to the same rows.
- A window's reference is its topic's reference tier (tier_paths.py), unless that tier's counts of the window are
  unknown: then the origin cluster, the first cluster tier, which counts what a read_committed reader reads (the
  reference of unaudited producers). A transactional producer audited by an interceptor that sees no commit or
  abort is judged so, window by window; one audited exactly (`aborted` counted apart, never expected anywhere)
  stays the reference.
- A row is `unknown` when the tier's own counts or its reference's counts of the window are unknown, or when it is
  the origin cluster's row standing in as the reference (it is not judged against itself): never complete,
  incomplete, over, mismatch, lagging or pending, with nothing missing or duplicated, so nothing reads it as a
  loss. The tiers after it are judged against the origin cluster, so a loss past it is found exactly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from audit.contract.completeness import UNKNOWN

# The judged columns of a row that count as a verdict on it: what an `unknown` row does not claim.
CLEARED = ("missing", "duplicated")


def window_references(rows: pd.DataFrame) -> pd.Series:
    """Each row's reference tier for its window: `reference_tier`, or `origin_cluster` where `reference_unknown`
    (the reference tier's counts of the window are unknown; null: it counted nothing there)."""
    return rows["reference_tier"].where(~_flags(rows["reference_unknown"]), rows["origin_cluster"])


def unknown_rows(judged: pd.DataFrame) -> np.ndarray:
    """Per row, whether its verdict rests on unknown counts: its tier's (`observed_unknown`), its reference's
    (`expected_unknown`; both null where the tier counted nothing), or it is its own reference."""
    own, reference = _flags(judged["observed_unknown"]), _flags(judged["expected_unknown"])
    return (own | reference | (judged["tier"] == judged["reference_tier"])).to_numpy(dtype=bool)


def _flags(values: pd.Series) -> pd.Series:
    """Booleans as a join leaves them (object, nullable or bool; null where no row joined), null as False."""
    return values.astype("boolean").fillna(False).astype(bool)


def with_unknown(judged: pd.DataFrame) -> pd.DataFrame:
    """`judged` (`classify`'s answer with `observed_unknown` and `expected_unknown`) with its `unknown_rows` set to
    status `unknown`, nothing missing or duplicated and no partition named."""
    out = judged.copy()
    unknown = unknown_rows(judged)
    out.loc[unknown, "status"] = UNKNOWN
    for name in CLEARED:
        out.loc[unknown, name] = 0
    if "mismatched_partitions" in out:
        out["mismatched_partitions"] = [
            None if is_unknown else partitions
            for partitions, is_unknown in zip(out["mismatched_partitions"], unknown, strict=True)
        ]
    return out
