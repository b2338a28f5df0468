"""Sample Delta tables shaped exactly like the reconciliation's (audit/contract/tables.py), written with deltalake.

Used by the alert and UI tests, the screenshots and `kaudit ui --sample` for a look without a
pipeline (the UI benchmark's large table is dashboards/bulk_sample.py). Nothing here decides what the
real tables hold: the columns and types come from audit/contract/tables.py, the statuses follow its
rules (complete | incomplete | over | mismatch | lagging | pending).

    frames = sample_frames(now=..., topics=["orders"], faults=[Loss("orders", "aggregate", 3, 40)])
    write_frames(lake, frames)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pandas as pd

from audit.contract.arrow import arrow_table
from audit.contract.complete_through import watermark_frame
from audit.contract.digest import merge
from audit.contract.restatements import restatements
from audit.contract.tables import TABLES
from audit.contract.windows import DEFAULT_WINDOW_MINUTES
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
class Mismatch:
    """One message of window `window` changed on the way into `tier` (and so at the tiers after it), in
    `partition`: every count balances, the partition's content digest differs from the reference tier's."""

    topic: str
    tier: str
    window: int
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
    window_minutes: int = DEFAULT_WINDOW_MINUTES
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
    starts = window_starts(spec.now, spec.windows, spec.window_minutes)
    counts, completeness, status = [], [], []
    for topic in spec.topics:
        watermarks = _watermarks(spec, topic)
        for index, start in enumerate(starts):
            window_counts, window_completeness = _window_rows(spec, topic, index, start, watermarks)
            counts += window_counts
            completeness += window_completeness
        status += _status_rows(spec, topic, watermarks)
    completeness_frame = pd.DataFrame(completeness)
    return {
        "completeness": completeness_frame,
        "tier_counts": pd.DataFrame(counts),
        "tier_status": pd.DataFrame(status),
        "audit_records": status_history(
            spec, starts[0], watermark_of={(f.topic, f.tier): f for f in spec.faults if isinstance(f, Lagging)}
        ),
        "completeness_watermarks": sample_watermarks(completeness_frame, now=spec.now),
        "restatements": sample_restatements(completeness_frame, spec, starts),
    }


def _lagging(spec: SampleSpec, topic: str) -> dict[str, Lagging]:
    return {f.tier: f for f in spec.faults if isinstance(f, Lagging) and f.topic == topic}


def _watermarks(spec: SampleSpec, topic: str) -> dict[str, datetime]:
    """Each tier's watermark for `topic`: 30 s before now, unless a Lagging or NoWatermark fault says otherwise."""
    lag_of = _lagging(spec, topic)
    silent = {f.tier for f in spec.faults if isinstance(f, NoWatermark) and f.topic == topic}
    marks = {}
    for tier in spec.tiers:
        if tier in silent:
            marks[tier] = EPOCH
        elif tier in lag_of:
            marks[tier] = spec.now - timedelta(minutes=lag_of[tier].behind_minutes)
        else:
            marks[tier] = spec.now - timedelta(seconds=30)
    return marks


def _produced(spec: SampleSpec, topic: str, index: int) -> tuple[list[int], int]:
    """What the producers of `topic` delivered in window `index`, per partition, and how many sends failed."""
    produced = spec.per_window + 37 * (zlib.crc32(f"{topic}/{index}".encode()) % 7)
    for drop in (f for f in spec.faults if isinstance(f, Drop) and f.topic == topic and f.window == index):
        produced = int(produced * drop.fraction)
    send_failed = sum(
        f.count for f in spec.faults if isinstance(f, SendFailed) and f.topic == topic and f.window == index
    )
    parts = [produced // spec.partitions + (p < produced % spec.partitions) for p in range(spec.partitions)]
    return parts, send_failed


def _apply_hop_faults(
    spec: SampleSpec, topic: str, tier: str, index: int, parts: list[int], digests: list[int]
) -> None:
    """Take the messages lost on the way into `tier` from `parts`, add those it got twice, and change the
    digests of the partitions whose content changed on the way."""
    hop_faults = (Loss, Duplicate, Mismatch)
    for fault in (f for f in spec.faults if isinstance(f, hop_faults)):
        if (fault.topic, fault.tier, fault.window) != (topic, tier, index):
            continue
        if isinstance(fault, Mismatch):
            digests[fault.partition] = merge(digests[fault.partition], 0x9E3779B97F4A7C15)
        else:
            parts[fault.partition] += fault.count if isinstance(fault, Duplicate) else -fault.count


def _sample_digests(spec: SampleSpec, topic: str, index: int) -> list[int]:
    """A content digest per partition of what the producers of `topic` sent in window `index`."""
    return [merge(zlib.crc32(f"{topic}/{index}/{p}".encode()) * 0x100000001B3) for p in range(spec.partitions)]


def _window_rows(
    spec: SampleSpec, topic: str, index: int, start: datetime, watermarks: dict[str, datetime]
) -> tuple[list[dict], list[dict]]:
    """The tier_counts and completeness rows of window `index` of `topic`, one per tier in data-flow order."""
    parts, send_failed = _produced(spec, topic, index)
    digests = _sample_digests(spec, topic, index)
    size = timedelta(minutes=spec.window_minutes)
    end = start + size
    counts, completeness = [], []
    expected, reference_digests = 0, list(digests)
    for order, tier in enumerate(spec.tiers):
        _apply_hop_faults(spec, topic, tier, index, parts, digests)
        seen, watermark = sum(parts), watermarks[tier]
        final = watermark >= end + timedelta(seconds=spec.grace_s)
        observed = seen
        if not final and watermark < end:  # a lagging tier has not counted the window fully yet
            observed = int(seen * max(0.0, min(1.0, (watermark - start) / size)))
        counts.append(
            dict(
                **_window_key(spec, topic, start),
                tier=tier,
                count=observed,
                bytes=observed * 120,
                send_failed=send_failed if order == 0 else 0,
                no_timestamp=0,
                by_partition=dict(enumerate(parts)) if observed == seen else None,
                digest_by_partition=dict(enumerate(digests)) if observed == seen else None,
                records=3,
                latency_p99_ms=float(40 + 25 * order + (index % 3) * 5),
                latency_max_ms=float(90 + 40 * order),
                updated_at=spec.now,
                date=start.date(),
            )
        )
        if order == 0:  # the reference tier comes first
            expected = observed
        differing = [p for p, (a, b) in enumerate(zip(reference_digests, digests, strict=True)) if a != b]
        row = _completeness_row(spec, topic, start, tier, order, expected, observed, final=final, watermark=watermark)
        if row["status"] == "complete" and differing:
            row.update(status="mismatch", mismatched_partitions=differing)
        completeness.append(row)
    return counts, completeness


def _window_key(spec: SampleSpec, topic: str, start: datetime) -> dict:
    return dict(
        origin_cluster=spec.origin_cluster,
        topic=topic,
        logical_topic=f"{spec.origin_cluster}.{topic}",
        window_start=start,
        window_minutes=spec.window_minutes,
    )


def _completeness_row(
    spec: SampleSpec,
    topic: str,
    start: datetime,
    tier: str,
    order: int,
    expected: int,
    observed: int,
    *,
    final: bool,
    watermark: datetime,
) -> dict:
    """The completeness row of `topic`'s window at `start` for `tier`, judged as the reconciliation does."""
    end = start + timedelta(minutes=spec.window_minutes)
    missing, duplicated = max(expected - observed, 0), max(observed - expected, 0)
    pct = 100.0 * observed / expected if expected else None
    if spec.now < end:
        state = "pending"
    elif not final:
        state = "lagging"
    elif missing > 0 and pct is not None and pct < spec.threshold_pct:
        state = "incomplete"
    elif duplicated > 0:
        state = "over"
    else:
        state = "complete"
    return dict(
        **_window_key(spec, topic, start),
        window_end=end,
        tier=tier,
        tier_order=order,
        reference_tier=spec.tiers[0],
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
        updated_at=spec.now,
        date=start.date(),
    )


def _status_rows(spec: SampleSpec, topic: str, watermarks: dict[str, datetime]) -> list[dict]:
    """The tier_status rows of `topic`, one per tier."""
    lag_of = _lagging(spec, topic)
    return [
        dict(
            tier=tier,
            origin_cluster=spec.origin_cluster,
            topic=topic,
            logical_topic=f"{spec.origin_cluster}.{topic}",
            watermark=watermarks[tier],
            lag=lag_of[tier].lag if tier in lag_of else 0,
            stalled=bool(tier in lag_of and lag_of[tier].stalled),
            reporters=_reporter(tier, spec.origin_cluster),
            last_status_at=spec.now - timedelta(seconds=10),
            updated_at=spec.now,
        )
        for tier in spec.tiers
    ]


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


DEMO_FAULTS = (
    Loss("orders", "aggregate", 8, 28, partition=2),
    Loss("orders", "aggregate", 8, 12, partition=0),
    Loss("orders", "lake", 20, 12),
    Duplicate("payments", "lake", 14, 9),
    Lagging("clicks", "lake", behind_minutes=45, lag=5200),
    SendFailed("orders", 8, 3),
    NoWatermark("refunds", "lake"),
    Restated("payments", "aggregate", 6, 5),
    Mismatch("shipments", "aggregate", 16, partition=1),
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
