"""Where each tier stands (`tier_status`): each reporter partition's newest status (`_partition_status`), the
watermark points kept per tier (`_tier_points`, audit/contract/watermark_points.py) and their sums per tier and
logical topic, for the (tier, topic) pairs that received status records; and a placeholder row for each tier a
declared flow expects that nothing has reached yet (`declare_silent_tiers`)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from audit.books.read.run_records import held_by_driver, of_kind
from audit.contract.flows import PLACEHOLDER_REPORTERS
from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.naming import is_audit_origin
from audit.contract.tables import PARTITION_STATUS, TIER_POINTS, TIER_STATUS
from audit.contract.watermark_points import KEPT_POINTS, WatermarkPoint, kept, replayed, reporter
from audit.contract.watermarks import tier_watermark
from audit.io import delta_io
from audit.io.lake_read import read_arrow

if TYPE_CHECKING:
    from audit.io.lake import Lake

STATUS_PAIR = TIER_STATUS.key  # (tier, origin_cluster, topic), also the key of _tier_points


def update_tier_status(
    lake: Lake, cluster_names: tuple[str, ...], new_records, *, audit_topic: str = DEFAULT_AUDIT_TOPIC
) -> None:
    """Keep each reporter partition's newest status, then sum them up per tier and logical topic: for the
    (tier, topic) pairs that received status records, the only ones whose sums can change. Each pair's
    statuses are replayed in the order they were emitted, and the tier's watermark after each moment kept
    (`_tier_points`, audit/contract/watermark_points.py).

    The tables are small (one row per reporter partition, per tier and topic) and Spark does not read them
    during a run, so they are kept in the driver and written by `deltalake` (delta_io.upsert_from_driver):
    Spark's MERGE costs 1-2 s each, mostly its own bookkeeping."""

    statuses = of_kind(new_records, "status")
    if held_by_driver(statuses):
        recent = recent_statuses_in_driver(statuses).to_pylist()
    else:
        recent = _recent_partition_statuses(statuses).toArrow().to_pylist()
    recent = [row for row in recent if not is_audit_origin(row["topic"], audit_topic)]  # data topics only
    if not recent:
        return
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    for row in recent:
        by_pair[tuple(row[c] for c in STATUS_PAIR)].append(row)
    states: dict[tuple, dict[tuple, dict]] = defaultdict(dict)
    for row in read_arrow(lake, PARTITION_STATUS.name).to_pylist():
        pair = tuple(row[c] for c in STATUS_PAIR)
        if pair in by_pair:
            states[pair][reporter(row)] = row
    stored = stored_points(lake)
    changed, points = [], []
    for pair, statuses in by_pair.items():
        state = states[pair]
        before = stored.get(pair, ())
        watermark = partial(tier_watermark, pair[0], cluster_names)
        new_points, reporters = replayed(state, statuses, watermark, stored=before)
        changed += [state[key] for key in reporters]
        points.append({**dict(zip(STATUS_PAIR, pair, strict=True)), "points": kept(before, new_points)})
    delta_io.upsert_from_driver(lake, PARTITION_STATUS, changed, ignore=(), update_when=NEWER_STATUS)
    now = datetime.now(UTC)
    partitions = [row for state in states.values() for row in state.values()]
    delta_io.upsert_from_driver(
        lake, TIER_STATUS, tier_status_rows(partitions, cluster_names, now, audit_topic=audit_topic)
    )
    delta_io.upsert_from_driver(lake, TIER_POINTS, [_as_stored(row) for row in points], ignore=())


# `replayed`'s order of a reporter partition's statuses, for the stored newest one (deltalake's SQL).
NEWER_STATUS = 's."emitted_at" > t."emitted_at" OR (s."emitted_at" = t."emitted_at" AND s."record_id" > t."record_id")'


def stored_points(lake: Lake | str) -> dict[tuple, list[WatermarkPoint]]:
    """Every (tier, origin_cluster, topic)'s kept points (`_tier_points`), read column by column: 6,000 tiers'
    32 points each take 3.5 s through pyarrow's nested `to_pylist`, 0.3 s as tuples from the flat columns."""
    import pyarrow.compute as pc

    table = read_arrow(lake, TIER_POINTS.name).combine_chunks()
    pairs = zip(*(table.column(c).to_pylist() for c in STATUS_PAIR), strict=True)
    points = table.column("points").chunks[0] if table.num_rows else None
    if points is None:
        return {}
    flat = pc.list_flatten(points)
    every = list(map(WatermarkPoint._make, zip(*(flat.field(name).to_pylist() for name in WatermarkPoint._fields))))
    bounds = [offset - points.offsets[0].as_py() for offset in points.offsets.to_pylist()]
    return {pair: every[bounds[index] : bounds[index + 1]] for index, pair in enumerate(pairs)}


def _as_stored(row: dict) -> dict:
    return {**row, "points": [point._asdict() for point in row["points"]]}


def _recent_partition_statuses(statuses):
    """Up to `KEPT_POINTS` rows per reporter partition (the `_partition_status` key): the newest of `statuses`,
    exploded. Older ones would only make points older than those kept."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    exploded = (
        statuses.select(
            "tier",
            "cluster",
            "seen_topic",
            "service",
            "origin_cluster",
            "topic",
            "logical_topic",
            "stalled",
            "emitted_at",
            "record_id",
            F.explode("partitions").alias("p"),
        )
        .select("*", "p.*")
        .drop("p")
    )
    newest = Window.partitionBy(*PARTITION_STATUS.key).orderBy(F.col("emitted_at").desc(), F.col("record_id").desc())
    return (
        exploded.withColumn("rank", F.row_number().over(newest))
        .where(F.col("rank") <= KEPT_POINTS)
        .drop("rank")
        .withColumn(
            "partition_watermark",
            F.when(F.col("lag") == 0, F.col("emitted_at")).otherwise(
                F.coalesce("last_audit_time", F.timestamp_millis(F.lit(0)))
            ),
        )
    )


STATUS_COLUMNS = ("tier", "cluster", "seen_topic", "service", "origin_cluster", "topic", "logical_topic", "stalled")
STATUS_COLUMNS += ("emitted_at", "record_id")


def recent_statuses_in_driver(statuses: pa.Table) -> pa.Table:
    """`_recent_partition_statuses` of status records the driver holds (AUDIT_RECORDS columns, pyarrow)."""
    parents = pc.list_parent_indices(statuses["partitions"])
    partitions = pc.list_flatten(statuses["partitions"])
    exploded = statuses.select(list(STATUS_COLUMNS)).take(parents)
    for member in partitions.type:
        exploded = exploded.append_column(member.name, pc.struct_field(partitions, member.name))
    order = exploded.select([*PARTITION_STATUS.key, "emitted_at", "record_id"]).to_pandas()
    order["row"] = range(len(order))
    order = order.sort_values(["emitted_at", "record_id"], ascending=False, kind="stable")
    newest = order[order.groupby(list(PARTITION_STATUS.key), dropna=False).cumcount() < KEPT_POINTS]
    recent = exploded.take(pa.array(newest["row"].to_numpy()))
    caught_up = pc.fill_null(pc.equal(recent["lag"], 0), False)
    since_epoch = pc.fill_null(
        recent["last_audit_time"], pa.scalar(datetime.fromtimestamp(0, UTC), recent["emitted_at"].type)
    )
    return recent.append_column("partition_watermark", pc.if_else(caught_up, recent["emitted_at"], since_epoch))


def tier_status_rows(
    partitions: list[dict], cluster_names: tuple[str, ...], now: datetime, *, audit_topic: str = DEFAULT_AUDIT_TOPIC
) -> list[dict]:
    """`tier_status` rows (written at `now`) summed from `_partition_status` rows, for data topics only: none
    about the audit topic or a replicated copy of it (`is_audit_origin`)."""
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    for row in partitions:
        if is_audit_origin(row["topic"], audit_topic):
            continue
        by_pair[tuple(row[c] for c in STATUS_PAIR)].append(row)
    return [_tier_status(pair, rows, cluster_names, now) for pair, rows in by_pair.items()]


def _tier_status(pair: tuple, rows: list[dict], cluster_names: tuple[str, ...], now: datetime) -> dict:
    lags = [row["lag"] for row in rows if row["lag"] is not None]
    stalls = [row["stalled"] for row in rows if row["stalled"] is not None]
    reporters = {
        f"{row['service']}@{row['cluster']}"
        for row in rows
        if row["service"] is not None and row["cluster"] is not None
    }
    return {
        **dict(zip(STATUS_PAIR, pair, strict=True)),
        "logical_topic": rows[0]["logical_topic"],
        "watermark": tier_watermark(pair[0], cluster_names, rows),
        "lag": sum(lags) if lags else None,
        "stalled": any(stalls) if stalls else None,
        "reporters": ", ".join(sorted(reporters)),
        "last_status_at": _highest(row["emitted_at"] for row in rows),
        "updated_at": now,
    }


def _highest(moments):
    return max((m for m in moments if m is not None), default=None)


def declare_silent_tiers(lake: Lake, silent: frozenset[tuple], placeholders: frozenset[tuple]) -> None:
    """A `tier_status` placeholder (the epoch for a watermark, no reporter) for each (origin_cluster, topic, tier)
    of `silent` (declared, and nothing has reached it) without one, so that the lag alerts and the UI list the
    tier with its cause; the stored `placeholders` no longer silent are deleted (the tier reported since, and its
    own row replaced it, or the flow is no longer declared)."""
    now = datetime.now(UTC)
    epoch = datetime.fromtimestamp(0, UTC)
    new = [
        {
            "tier": tier,
            "origin_cluster": origin,
            "topic": topic,
            "logical_topic": f"{origin}.{topic}",
            "watermark": epoch,
            "lag": None,
            "stalled": None,
            "reporters": PLACEHOLDER_REPORTERS,
            "last_status_at": None,
            "updated_at": now,
        }
        for origin, topic, tier in sorted(silent - placeholders)
    ]
    delta_io.insert_new_from_driver(lake, TIER_STATUS, new)
    gone = [dict(zip(("origin_cluster", "topic", "tier"), pair)) for pair in sorted(placeholders - silent)]
    delta_io.delete_from_driver(lake, TIER_STATUS, gone, when=f"t.\"reporters\" = '{PLACEHOLDER_REPORTERS}'")
