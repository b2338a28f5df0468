"""Restatements: a window whose verdict was final and changed afterwards (late counts, a replay, a recount).

Pure (pandas, no Spark): the one statement of the rule. The reconciliation finds restatements with Spark
columns (`restated_rows` in audit/books/restatements.py), which tests/audit/books/test_restatements_spark.py
holds to `restatements`' answers and ids on the same rows. A row is a restatement
when the window was final before and its expected count, observed count or status is not the same
after. Its id is derived from the window, the tier and both verdicts, including when the one before
was written, so a run that is repeated after a crash records each restatement once, and a window
that changes back and forth records every change.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

VERDICT = ("expected", "observed", "status")
RESTATEMENT_COLUMNS = {
    "restatement_id": "STRING",
    "origin_cluster": "STRING",
    "topic": "STRING",
    "logical_topic": "STRING",
    "window_start": "TIMESTAMP",
    "window_minutes": "INT",
    "tier": "STRING",
    "reference_tier": "STRING",
    "before_expected": "BIGINT",
    "before_observed": "BIGINT",
    "before_status": "STRING",
    "before_updated_at": "TIMESTAMP",
    "after_expected": "BIGINT",
    "after_observed": "BIGINT",
    "after_status": "STRING",
    "after_final": "BOOLEAN",
}


def restated(frame: pd.DataFrame) -> np.ndarray:
    """Which rows (previous verdict as `before_*`, new one as `after_*`) restate a final window."""
    was_final = frame["before_final"].eq(True).to_numpy()  # a missing one (None, NaN) is not final
    changed = np.zeros(len(frame), dtype=bool)
    for name in VERDICT:
        before, after = frame[f"before_{name}"], frame[f"after_{name}"]
        changed |= ~((before == after) | (before.isna() & after.isna())).to_numpy()
    return was_final & changed


def _utc_text(moment) -> str:
    stamp = pd.Timestamp(moment)
    return (stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")).isoformat()


def _verdict_text(value) -> str:
    """A verdict's count or status as the id hashes it: a missing one as `None`, a count as an integer however
    pandas holds the column (a count column with a null in it is float: 100.0 is still `100`)."""
    if value is None or pd.isna(value):
        return "None"
    if isinstance(value, float | np.floating):
        return str(int(value))
    return str(value)


def restatement_id(row) -> str:
    """Deterministic id of one restatement (a row of `restatements`' input)."""
    parts = [row.origin_cluster, row.topic, _utc_text(row.window_start), row.tier, _utc_text(row.before_updated_at)]
    parts += [_verdict_text(getattr(row, f"{side}_{name}")) for side in ("before", "after") for name in VERDICT]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def restatements(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` that restate a final window, with their id, in `RESTATEMENT_COLUMNS`."""
    rows = frame[restated(frame)].copy()
    rows["restatement_id"] = [restatement_id(row) for row in rows.itertuples(index=False)]
    return rows[list(RESTATEMENT_COLUMNS)]
