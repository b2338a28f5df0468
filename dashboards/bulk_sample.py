"""A large completeness table for the UI benchmark (bench/bench_ui.py): built vectorized, as pyarrow.

The rows follow the same schema as the reconciliation's (audit/contract/tables.py); unlike
dashboards/sample.py it models no faults but one, a loss every so many cells, so the overview has work.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from audit.contract.arrow import arrow_schema
from audit.contract.tables import TABLES
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, MINUTES_PER_DAY
from dashboards.sample import DEFAULT_TIERS, window_starts


def bulk_completeness(
    *,
    now: datetime,
    topics: int,
    days: int,
    tiers: Sequence[str] = DEFAULT_TIERS,
    window_minutes: int = DEFAULT_WINDOW_MINUTES,
    per_window: int = 1000,
    loss_every: int = 997,
):
    """A large completeness table as pyarrow, vectorized: `topics` x `days` of windows x tiers (the benchmark's).

    Every `loss_every`-th (topic, window) cell loses 1 % at the last tier, so the overview has work to do.
    """
    import pyarrow as pa

    per_day = MINUTES_PER_DAY // window_minutes
    starts = window_starts(now, per_day * days, window_minutes)
    n_windows, n_tiers = len(starts), len(tiers)
    topic_index = np.repeat(np.arange(topics), n_windows * n_tiers)
    window_index = np.tile(np.repeat(np.arange(n_windows), n_tiers), topics)
    tier_index = np.tile(np.arange(n_tiers), topics * n_windows)
    expected = np.full(topic_index.shape, per_window, dtype=np.int64)
    lossy = ((topic_index * n_windows + window_index) % loss_every == 0) & (tier_index == n_tiers - 1)
    observed = np.where(lossy, per_window - per_window // 100, per_window).astype(np.int64)
    start_us = np.array([int(s.timestamp() * 1_000_000) for s in starts], dtype=np.int64)[window_index]
    end_us = start_us + window_minutes * 60_000_000
    now_us = int(now.timestamp() * 1_000_000)
    status_names = np.array(["complete", "incomplete", "pending", "lagging"])
    state = np.where(lossy, 1, 0)
    state = np.where(end_us > now_us, 2, np.where(end_us + 300_000_000 > now_us, 3, state))
    names = np.array([f"topic-{i:04d}" for i in range(topics)])
    tier_names = np.array(list(tiers))
    table = TABLES["completeness"]
    utc = pa.timestamp("us", tz="UTC")
    columns = {
        "origin_cluster": pa.array(np.full(topic_index.shape, "dc1")),
        "topic": pa.array(names[topic_index]),
        "logical_topic": pa.array(np.char.add("dc1.", names[topic_index])),
        "window_start": pa.array(start_us, type=utc),
        "window_minutes": pa.array(np.full(topic_index.shape, window_minutes, dtype=np.int32)),
        "window_end": pa.array(end_us, type=utc),
        "tier": pa.array(tier_names[tier_index]),
        "tier_order": pa.array(tier_index.astype(np.int32)),
        "reference_tier": pa.array(np.full(topic_index.shape, tiers[0])),
        "expected": pa.array(expected),
        "observed": pa.array(observed),
        "missing": pa.array(expected - observed),
        "duplicated": pa.array(np.zeros(topic_index.shape, dtype=np.int64)),
        "completeness_pct": pa.array(100.0 * observed / expected),
        "threshold_pct": pa.array(np.full(topic_index.shape, 100.0)),
        "status": pa.array(status_names[state]),
        "final": pa.array(state <= 1),
        "tier_watermark": pa.array(np.full(topic_index.shape, now_us - 30_000_000), type=utc),
        "latency_p99_ms": pa.array(np.full(topic_index.shape, 50.0)),
        "updated_at": pa.array(np.full(topic_index.shape, now_us), type=utc),
        "date": pa.array((start_us // 86_400_000_000).astype("int32"), type=pa.int32()).cast(pa.date32()),
    }
    return _table_of(columns, arrow_schema(table), len(topic_index))


def _table_of(columns: dict, schema, rows: int):
    """`columns` as a table of `schema`; the columns the benchmark has no values for (no mismatch here) null."""
    import pyarrow as pa

    absent = {f.name: pa.nulls(rows, f.type) for f in schema if f.name not in columns}
    return pa.Table.from_pydict({**columns, **absent}, schema=schema)
