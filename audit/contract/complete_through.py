"""Complete-through watermarks: up to when every window of a topic is final and complete at a tier.

Pure (pandas, no Spark): `watermark_of` is the one definition of the rule. The reconciliation computes
it with Spark aggregates (`watermarks` in audit/books/complete_through.py), which
tests/audit/books/test_complete_through_spark.py holds to `watermark_of`'s answers on the same windows:
- a window is closed when it is final and its status is complete;
- `complete_through` is the end of the last window before the first window that is not closed (the
  end of the last window when every one is closed; None when the first one is not);
- the first window that is not closed is the first open problem, named with its status.
Windows without traffic have no completeness row: nothing in them can be missing, so they do not
hold the watermark back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from audit.contract.completeness import COMPLETE

WINDOW_COLUMNS = ("window_start", "window_end", "status", "final")
KEY_COLUMNS = ("origin_cluster", "topic", "logical_topic", "tier")
WATERMARK_COLUMNS = {
    "origin_cluster": "STRING",
    "topic": "STRING",
    "logical_topic": "STRING",
    "tier": "STRING",
    "complete_through": "TIMESTAMP",
    "first_open_window": "TIMESTAMP",
    "first_open_status": "STRING",
}
WATERMARK_DDL = ", ".join(f"{name} {kind}" for name, kind in WATERMARK_COLUMNS.items())


@dataclass(frozen=True)
class Watermark:
    complete_through: pd.Timestamp | None
    first_open_window: pd.Timestamp | None
    first_open_status: str | None


def watermark_of(windows: pd.DataFrame) -> Watermark:
    """The watermark of one topic at one tier from its windows (`WINDOW_COLUMNS`, in any order)."""
    ordered = windows.sort_values("window_start")
    closed = ordered["final"].fillna(False).astype(bool).to_numpy() & (ordered["status"] == COMPLETE).to_numpy()
    first_open = int(np.argmin(closed)) if not closed.all() else len(ordered)
    before = ordered["window_end"].iloc[:first_open]
    through = pd.Timestamp(before.max()) if len(before) else None
    if first_open == len(ordered):
        return Watermark(through, None, None)
    problem = ordered.iloc[first_open]
    return Watermark(through, pd.Timestamp(problem["window_start"]), str(problem["status"]))


def watermark_frame(windows: pd.DataFrame) -> pd.DataFrame:
    """`applyInPandas` form: the windows of one (topic, tier) with `KEY_COLUMNS` in, one watermark row out."""
    mark = watermark_of(windows)
    row = {name: windows[name].iloc[0] for name in KEY_COLUMNS}
    row.update(
        complete_through=mark.complete_through,
        first_open_window=mark.first_open_window,
        first_open_status=mark.first_open_status,
    )
    frame = pd.DataFrame([row], columns=list(WATERMARK_COLUMNS))
    for name in ("complete_through", "first_open_window"):
        frame[name] = pd.to_datetime(frame[name], utc=True)
    return frame
