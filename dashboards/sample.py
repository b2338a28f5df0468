"""Sample Delta tables shaped exactly like the reconciliation's (audit/contract/tables.py), written with deltalake.

Used by the alert and UI tests, the UI benchmark, the screenshots and `kaudit ui --sample` for a look
without a pipeline. Nothing here decides what the real tables hold: the columns and types come from
audit/contract/tables.py, the statuses follow its rules (complete | incomplete | over | lagging | pending).

    frames = sample_frames(now=..., topics=["orders"], faults=[Loss("orders", "aggregate", 3, 40)])
    write_frames(lake, frames)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from audit.contract.complete_through import watermark_frame
from audit.contract.restatements import restatements
from audit.contract.tables import TABLES, arrow_schema, arrow_table
from audit.io.lake import Lake

DEFAULT_TIERS = ("producer", "dc1", "aggregate", "lake")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Loss:
    """`count` messages of window `window` (index from the oldest) lost on the way into `tier`, in `partition`."""

    topic: str
    tier: str
    window: int
    count: int
    partition: int = 0


@dataclass(frozen=True)
class Duplicate:
    """`count` messages of window `window` delivered twice into `tier` (and the tiers after it), in `partition`."""

    topic: str
    tier: str
    window: int
    count: int
    partition: int = 0


@dataclass(frozen=True)
class Lagging:
    """`tier` is `behind_minutes` behind now for `topic`: its watermark is that old, its lag `lag`."""

    topic: str
    tier: str
    behind_minutes: float
    lag: int = 5000
    stalled: bool = False


@dataclass(frozen=True)
class NoWatermark:
    """`tier` has reported no position for `topic` yet: its watermark is the epoch, as a status with no
    partitions leaves it, and its windows lag."""

    topic: str
    tier: str


@dataclass(frozen=True)
class Drop:
    """The producers of `topic` sent only `fraction` of the usual messages in window `window`."""

    topic: str
    window: int
    fraction: float


@dataclass(frozen=True)
class SendFailed:
    """The producer could not deliver `count` messages of window `window`."""

    topic: str
    window: int
    count: int


@dataclass(frozen=True)
class Restated:
    """Window `window` of `topic` was final at `tier` with `late` messages fewer, then they were counted late:
    a restatement from that verdict to the one the window holds now."""

    topic: str
    tier: str
    window: int
    late: int


@dataclass
class SampleSpec:
    now: datetime
    topics: Sequence[str] = ("orders", "payments", "clicks")
    origin_cluster: str = "dc1"
    tiers: Sequence[str] = DEFAULT_TIERS
    windows: int = 12
    window_minutes: int = 10
    grace_s: float = 300.0
    per_window: int = 1000
    partitions: int = 3
    threshold_pct: float = 100.0
    faults: Sequence[object] = field(default_factory=list)


def window_starts(now: datetime, windows: int, window_minutes: int) -> list[datetime]:
    """The `windows` window starts ending with the window that holds `now`, oldest first."""
    size = timedelta(minutes=window_minutes)
    last = EPOCH + ((now - EPOCH) // size) * size
    return [last - size * (windows - 1 - i) for i in range(windows)]


def sample_frames(spec: SampleSpec | None = None, /, **kwargs) -> dict[str, pd.DataFrame]:
    """completeness, tier_counts, tier_status and audit_records (status history) for `spec`."""
    spec = spec or SampleSpec(**kwargs)
    now = spec.now
    starts = window_starts(now, spec.windows, spec.window_minutes)
    size = timedelta(minutes=spec.window_minutes)
    grace = timedelta(seconds=spec.grace_s)
    reference = spec.tiers[0]
    counts, completeness, status = [], [], []
    for topic in spec.topics:
        lag_of = {f.tier: f for f in spec.faults if isinstance(f, Lagging) and f.topic == topic}
        silent = {f.tier for f in spec.faults if isinstance(f, NoWatermark) and f.topic == topic}
        watermarks = {
            tier: EPOCH
            if tier in silent
            else now - timedelta(minutes=lag_of[tier].behind_minutes)
            if tier in lag_of
            else now - timedelta(seconds=30)
            for tier in spec.tiers
        }
        for index, start in enumerate(starts):
            end = start + size
            produced = spec.per_window + 37 * (zlib.crc32(f"{topic}/{index}".encode()) % 7)
            for drop in (f for f in spec.faults if isinstance(f, Drop) and f.topic == topic and f.window == index):
                produced = int(produced * drop.fraction)
            send_failed = sum(
                f.count for f in spec.faults if isinstance(f, SendFailed) and f.topic == topic and f.window == index
            )
            parts = [produced // spec.partitions + (p < produced % spec.partitions) for p in range(spec.partitions)]
            expected = None
            for order, tier in enumerate(spec.tiers):
                for fault in spec.faults:
                    if isinstance(fault, (Loss, Duplicate)) and (fault.topic, fault.tier, fault.window) == (
                        topic,
                        tier,
                        index,
                    ):
                        parts[fault.partition] += fault.count if isinstance(fault, Duplicate) else -fault.count
                seen = sum(parts)
                watermark = watermarks[tier]
                final = watermark >= end + grace
                observed = seen
                if not final and watermark < end:  # a lagging tier has not counted the window fully yet
                    observed = int(seen * max(0.0, min(1.0, (watermark - start) / size)))
                counts.append(
                    dict(
                        origin_cluster=spec.origin_cluster,
                        topic=topic,
                        logical_topic=f"{spec.origin_cluster}.{topic}",
                        window_start=start,
                        window_minutes=spec.window_minutes,
                        tier=tier,
                        count=observed,
                        bytes=observed * 120,
                        send_failed=send_failed if tier == reference else 0,
                        no_timestamp=0,
                        by_partition=dict(enumerate(parts)) if observed == seen else None,
                        records=3,
                        latency_p99_ms=float(40 + 25 * order + (index % 3) * 5),
                        latency_max_ms=float(90 + 40 * order),
                        updated_at=now,
                        date=start.date(),
                    )
                )
                expected = observed if expected is None else expected  # the reference tier comes first
                missing, duplicated = max(expected - observed, 0), max(observed - expected, 0)
                pct = 100.0 * observed / expected if expected else None
                if now < end:
                    state = "pending"
                elif not final:
                    state = "lagging"
                elif missing > 0 and pct is not None and pct < spec.threshold_pct:
                    state = "incomplete"
                elif duplicated > 0:
                    state = "over"
                else:
                    state = "complete"
                completeness.append(
                    dict(
                        origin_cluster=spec.origin_cluster,
                        topic=topic,
                        logical_topic=f"{spec.origin_cluster}.{topic}",
                        window_start=start,
                        window_minutes=spec.window_minutes,
                        window_end=end,
                        tier=tier,
                        tier_order=order,
                        reference_tier=reference,
                        expected=expected,
                        observed=observed,
                        missing=missing,
                        duplicated=duplicated,
                        completeness_pct=pct,
                        threshold_pct=spec.threshold_pct,
                        status=state,
                        final=final,
                        tier_watermark=watermark,
                        latency_p99_ms=float(40 + 25 * order),
                        updated_at=now,
                        date=start.date(),
                    )
                )
        for tier in spec.tiers:
            fault = lag_of.get(tier)
            status.append(
                dict(
                    tier=tier,
                    origin_cluster=spec.origin_cluster,
                    topic=topic,
                    logical_topic=f"{spec.origin_cluster}.{topic}",
                    watermark=watermarks[tier],
                    lag=fault.lag if fault else 0,
                    stalled=bool(fault and fault.stalled),
                    reporters=_reporter(tier, spec.origin_cluster),
                    last_status_at=now - timedelta(seconds=10),
                    updated_at=now,
                )
            )
    completeness_frame = pd.DataFrame(completeness)
    return {
        "completeness": completeness_frame,
        "tier_counts": pd.DataFrame(counts),
        "tier_status": pd.DataFrame(status),
        "audit_records": status_history(
            spec, starts[0], watermark_of={(f.topic, f.tier): f for f in spec.faults if isinstance(f, Lagging)}
        ),
        "completeness_watermarks": sample_watermarks(completeness_frame, now=now),
        "restatements": sample_restatements(completeness_frame, spec, starts),
    }


def sample_watermarks(completeness: pd.DataFrame, *, now: datetime) -> pd.DataFrame:
    """`completeness_watermarks` of the sample's completeness rows, by the reconciliation's rule."""
    judged = completeness[completeness["tier"] != completeness["reference_tier"]]
    marks = [watermark_frame(group) for _, group in judged.groupby(["origin_cluster", "topic", "tier"], sort=False)]
    return pd.concat(marks, ignore_index=True).assign(updated_at=now) if marks else pd.DataFrame()


def sample_restatements(completeness: pd.DataFrame, spec: SampleSpec, starts: list[datetime]) -> pd.DataFrame:
    """A restatement per `Restated` fault: the window's verdict with the late messages not yet counted, to now."""
    pairs = []
    for fault in (f for f in spec.faults if isinstance(f, Restated)):
        [after] = completeness[
            (completeness["topic"] == fault.topic)
            & (completeness["tier"] == fault.tier)
            & (completeness["window_start"] == starts[fault.window])
        ].to_dict("records")
        before_observed = after["observed"] - fault.late
        before_status = "complete" if before_observed == after["expected"] else "incomplete"
        pairs.append(
            {
                **{name: after[name] for name in ("origin_cluster", "topic", "logical_topic", "window_start")},
                **{name: after[name] for name in ("window_minutes", "tier", "reference_tier")},
                "before_final": True,
                "before_updated_at": after["window_end"] + timedelta(seconds=spec.grace_s),
                "before_expected": after["expected"],
                "before_observed": before_observed,
                "before_status": before_status,
                "after_expected": after["expected"],
                "after_observed": after["observed"],
                "after_status": after["status"],
                "after_final": after["final"],
            }
        )
    if not pairs:
        return pd.DataFrame()
    rows = restatements(pd.DataFrame(pairs))
    return rows.drop(columns="reference_tier").assign(
        record_ids=[[f"sample-late-{i}"] for i in range(len(rows))],
        restated_at=spec.now - timedelta(minutes=1),
        date=[start.date() for start in rows["window_start"]],
    )


def _reporter(tier: str, origin: str) -> str:
    if tier == "producer":
        return "app@" + origin
    if tier == "lake":
        return "kaudit-lake@lake"
    if tier == origin:
        return f"kaudit-counter@{tier}"
    return f"kaudit-counter@{tier}, kaudit-mirror@{origin}"


def status_history(
    spec: SampleSpec, since: datetime, *, watermark_of: Mapping[tuple[str, str], Lagging]
) -> pd.DataFrame:
    """Status records every 5 minutes since `since` for every non-producer tier and topic: the lag page's data.

    A lagging tier falls behind linearly over the last hour up to its `behind_minutes`.
    """
    rows, step = [], timedelta(minutes=5)
    moment, sequence = since, 0
    while moment <= spec.now:
        for topic in spec.topics:
            for tier in spec.tiers[1:]:
                fault = watermark_of.get((topic, tier))
                behind = timedelta(seconds=30)
                lag = 0
                if fault:
                    share = max(0.0, 1 - (spec.now - moment) / timedelta(hours=1))
                    behind = max(behind, timedelta(minutes=fault.behind_minutes) * share)
                    lag = int(fault.lag * share)
                cluster = "lake" if tier == "lake" else tier
                service = (
                    "kaudit-lake"
                    if tier == "lake"
                    else ("kaudit-mirror" if tier != spec.origin_cluster else "kaudit-counter")
                )
                sequence += 1
                rows.append(
                    dict(
                        record_id=f"sample-{tier}-{sequence}",
                        kind="status",
                        tier=tier,
                        cluster=cluster,
                        service=service,
                        host="sample-host",
                        instance_id=f"sample-{tier}",
                        seen_topic=topic,
                        origin_cluster=spec.origin_cluster,
                        topic=topic,
                        logical_topic=f"{spec.origin_cluster}.{topic}",
                        window_start=None,
                        window_minutes=spec.window_minutes,
                        emitted_at=moment,
                        watermark=moment - behind,
                        lag=lag,
                        stalled=bool(fault and fault.stalled and lag > 0),
                        read_from_cluster=cluster,
                        read_from_topic="_audit",
                        ingested_at=moment,
                        date=moment.date(),
                    )
                )
        moment += step
    return pd.DataFrame(rows)


def write_table(lake: Lake | str, name: str, frame, *, mode: str = "append") -> str:
    """Write `frame` to the Delta table `name` of `lake`, partitioned as declared; returns its path."""
    lake, table = Lake.of(lake), TABLES[name]
    lake.write(name, arrow_table(table, frame), mode=mode, partition_by=list(table.partition_by) or None)
    return lake.path(name)


def write_frames(lake: Lake | str, frames: Mapping[str, pd.DataFrame], *, mode: str = "overwrite") -> None:
    for name, frame in frames.items():
        write_table(lake, name, frame, mode=mode)


def bulk_completeness(
    *,
    now: datetime,
    topics: int,
    days: int,
    tiers: Sequence[str] = DEFAULT_TIERS,
    window_minutes: int = 10,
    per_window: int = 1000,
    loss_every: int = 997,
):
    """A large completeness table as pyarrow, vectorized: `topics` x `days` of windows x tiers (the benchmark's).

    Every `loss_every`-th (topic, window) cell loses 1 % at the last tier, so the overview has work to do.
    """
    import pyarrow as pa

    per_day = 1440 // window_minutes
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
    return pa.Table.from_pydict(columns, schema=arrow_schema(table))


DEMO_FAULTS = (
    Loss("orders", "aggregate", 8, 28, partition=2),
    Loss("orders", "aggregate", 8, 12, partition=0),
    Loss("orders", "lake", 20, 12),
    Duplicate("payments", "lake", 14, 9),
    Lagging("clicks", "lake", behind_minutes=45, lag=5200),
    SendFailed("orders", 8, 3),
    NoWatermark("refunds", "lake"),
    Restated("payments", "aggregate", 6, 5),
)


def demo_frames(now: datetime) -> dict[str, pd.DataFrame]:
    """The tables the screenshots, the browser tests and `kaudit ui --sample` show: 6 topics, 4 hours."""
    frames = sample_frames(
        SampleSpec(
            now=now,
            topics=("orders", "payments", "clicks", "users", "shipments", "refunds"),
            windows=24,
            faults=list(DEMO_FAULTS),
        )
    )
    return frames
