"""Complete-through watermarks: up to when every window of a topic is final and complete at a tier.

Pure (pandas, no Spark): `watermark_of` is the one definition of the rule. The reconciliation computes
it with Spark aggregates (`watermarks` in audit/books/judge/complete_through.py), which
tests/audit/books/judge/test_complete_through_spark.py holds to `watermark_of`'s answers on the same windows:
- a window is closed when it is final and its status is complete (over and mismatch are not);
- `complete_through` is the end of the last window before the first window that is not closed (the
  end of the last window when every one is closed; None when the first one is not);
- the first window that is not closed is the first open problem, named with its status.
Windows without traffic have no completeness row: nothing in them can be missing, so they do not
hold the watermark back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def is_closed(window: Mapping) -> bool:
    """Final and complete: a window the watermark may pass (`final` unknown is not final)."""
    return bool(window["final"]) and window["status"] == COMPLETE


def advanced(stored: Watermark, judged: Iterable[Mapping]) -> Watermark | None:
    """The watermark once `judged` (new verdicts, `WINDOW_COLUMNS`, of some windows) replace theirs, from the
    `stored` one alone; None when the windows not judged decide it: the first open window closed (the next
    open one may be any later window), or a window before it opened (the watermark stops before it, at
    windows only the table knows).

    Windows not judged keep their verdict, and those before the stored first open window are all closed, so
    the watermark only moves forward over judged windows that are closed."""
    judged = sorted(judged, key=lambda window: window["window_start"])
    opened = [window for window in judged if not is_closed(window)]
    first_open = stored.first_open_window
    if first_open is None:  # every stored window was closed, all of them ending by complete_through
        if stored.complete_through is None:
            return None  # nothing stored to start from
        if opened and opened[0]["window_start"] < stored.complete_through:
            return None  # a stored window opened again
        first = opened[0] if opened else None
    else:
        if opened and opened[0]["window_start"] < first_open:
            return None
        again = [window for window in judged if window["window_start"] == first_open]
        if again and is_closed(again[0]):
            return None
        first = again[0] if again else {"window_start": first_open, "status": stored.first_open_status}
    before = [w["window_end"] for w in judged if first is None or w["window_start"] < first["window_start"]]
    through = max([*before, *([stored.complete_through] if stored.complete_through is not None else [])], default=None)
    if first is None:
        return Watermark(through, None, None)
    return Watermark(through, first["window_start"], first["status"])
