"""Restatements: a window whose verdict was final and changed afterwards (late counts, a replay, a recount).

Pure (pandas, no Spark): the one statement of the rule. The reconciliation finds restatements with Spark
columns (`restated_rows` in audit/books/judge/restatements.py), which tests/audit/books/judge/test_restatements_spark.py
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


def _utc_texts(moments: pd.Series) -> list[str]:
    """Each moment (naive ones taken as UTC) as pandas' `isoformat` writes it in UTC, in one pass:
    `2026-11-23T10:20:00+00:00`, with `.ffffff` before the offset when it has microseconds; a missing one `NaT`."""
    utc = pd.to_datetime(moments, utc=True).dt.tz_localize(None).to_numpy().astype("datetime64[us]")
    seconds = np.datetime_as_string(utc.astype("datetime64[s]"), unit="s")
    micros = utc.astype(np.int64) % 1_000_000
    fraction = np.where(micros != 0, np.char.add(".", np.char.zfill(micros.astype(str), 6)), "")
    texts = np.char.add(np.char.add(seconds, fraction), "+00:00")
    return np.where(np.isnat(utc), "NaT", texts).tolist()


def _verdict_texts(values: pd.Series) -> list[str]:
    """Each count or status as the id hashes it: a missing one as `None`, a count as an integer however pandas
    holds the column (a count column with a null in it is float: 100.0 is still `100`)."""
    missing = values.isna().to_numpy()
    if pd.api.types.is_float_dtype(values) or pd.api.types.is_integer_dtype(values):
        texts = values.fillna(0).astype(np.int64).astype(str).to_numpy()
    else:
        texts = np.array(
            [str(int(v)) if isinstance(v, float | np.floating) else str(v) for v in values.fillna(0)], dtype=object
        )
    return np.where(missing, "None", texts).tolist()


def restatement_ids(rows: pd.DataFrame) -> list[str]:
    """Deterministic id of each restatement (rows of `restatements`' input): a hash of its window, its tier,
    when the verdict before was written and both verdicts."""
    if rows.empty:
        return []
    parts = [
        rows["origin_cluster"].astype(str).tolist(),
        rows["topic"].astype(str).tolist(),
        _utc_texts(rows["window_start"]),
        rows["tier"].astype(str).tolist(),
        _utc_texts(rows["before_updated_at"]),
        *(_verdict_texts(rows[f"{side}_{name}"]) for side in ("before", "after") for name in VERDICT),
    ]
    return [hashlib.sha256("|".join(fields).encode()).hexdigest()[:32] for fields in zip(*parts, strict=True)]


def restatements(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` that restate a final window, with their id, in `RESTATEMENT_COLUMNS`."""
    rows = frame[restated(frame)].copy()
    rows["restatement_id"] = restatement_ids(rows)
    return rows[list(RESTATEMENT_COLUMNS)]
