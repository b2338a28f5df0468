"""The driver's judge step (audit/books/judge/in_driver.py) gives the Spark form's rows (judge/in_spark.py).

The verdicts: the same windows, paths and counts judged both ways, with absent counts, partition maps, other
window lengths, missing watermarks and thresholds, must give the same `completeness` rows, value for value.
The re-sum of a small run's windows and its reporters' newest statuses (audit/books/count/): the same
records taken both ways must give the same `tier_counts` rows and the same partition statuses.
The rewrite and the restatements' record ids: the rules of `delta_io.replace_windows` and of
`restatements._with_record_ids`, on hand-made rows.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa

from audit.books.count.tier_counts import _summed, summed_in_driver
from audit.books.count.tier_status import _recent_partition_statuses, recent_statuses_in_driver
from audit.books.judge.in_driver import judged_frame, left_open, restatement_rows
from audit.books.judge.in_spark import JUDGED_COUNTS, judged_in_spark
from audit.contract.arrow import arrow_table
from audit.contract.tables import COMPLETENESS, TIER_COUNTS
from audit.contract.tier_paths import PATH_DDL
from audit.contract.windows import window_length_ms
from audit.io.arrow_rewrite import rewritten
from audit.io.spark import local_frame

GRACE_MS = 300_000
FIRST = datetime(2026, 11, 23, 22, 0)  # windows cross midnight: two dates
TIERS = ("producer", "dc1", "aggregate", "lake")
COUNTS_DDL = (
    "origin_cluster STRING, topic STRING, window_start TIMESTAMP, tier STRING, count BIGINT, "
    "by_partition MAP<INT, BIGINT>, digest_by_partition MAP<INT, BIGINT>, latency_p99_ms DOUBLE, window_minutes INT, "
    "unknown BOOLEAN"
)


def scenario(seed: int = 5):
    """(windows, path rows, count rows, now_ms) of 6 topics x 18 windows on a four-tier path; some windows'
    counts unknown, the producer's most often (then judged against dc1)."""
    rng, unknown = random.Random(seed), random.Random(seed + 1)
    windows = [("dc1", f"t{t}", FIRST + timedelta(minutes=10 * w)) for t in range(6) for w in range(18)]
    due = int(FIRST.replace(tzinfo=UTC).timestamp() * 1000) + 9 * window_length_ms() + GRACE_MS
    paths = [
        (
            "dc1",
            f"t{t}",
            tier,
            order,
            None if order == 0 else "producer",
            rng.choice([None, due - 10**6, due, due + 10**7]),
            rng.choice([100.0, 99.5, 0.0]),
        )
        for t in range(6)
        for order, tier in enumerate(TIERS)
    ]
    counts = []
    for origin, topic, start in windows:
        sent = {p: rng.choice([0, 1, 5, 1000]) for p in rng.sample(range(4), 2)}  # what most tiers counted
        for tier in TIERS:
            if rng.random() < 0.15:
                continue  # this tier counted nothing in the window
            parts = None if rng.random() < 0.3 else {p: rng.choice([0, 1, 5, 1000]) for p in rng.sample(range(4), 2)}
            parts = dict(sent) if parts is not None and rng.random() < 0.5 else parts
            count = sum(parts.values()) if parts is not None else rng.choice([0, 7, 1000])
            minutes = rng.choice([10, 10, 10, 60])
            latency = rng.choice([None, 12.5, 3000.0])
            flag = unknown.random() < (0.2 if tier == "producer" else 0.04)
            counts.append((origin, topic, start, tier, count, parts, digests_of(parts, rng), latency, minutes, flag))
    return windows, paths, counts, due + rng.choice([-1, 0, 1])


def digests_of(parts: dict | None, rng: random.Random) -> dict | None:
    """Digests of `parts`' partitions: unknown (None) now and then, mostly the same for the same counts (the same
    messages), sometimes another (changed content), at the ends of BIGINT too."""
    if parts is None or rng.random() < 0.2:
        return None
    if rng.random() < 0.25:
        return {p: rng.choice([-(2**63), 2**63 - 1, rng.randrange(-(2**63), 2**63)]) for p in parts}
    return {p: count * 7919 - 2**62 for p, count in parts.items()}


def test_the_driver_judges_every_window_and_tier_as_spark_does(spark):
    windows, paths, counts, now_ms = scenario()
    window_frame = local_frame(spark, windows, "origin_cluster STRING, topic STRING, window_start TIMESTAMP")
    count_frame = local_frame(spark, counts, COUNTS_DDL)
    path_frame = local_frame(spark, paths, f"{PATH_DDL}, threshold_pct DOUBLE")
    by_spark = judged_in_spark(window_frame, path_frame, count_frame, minutes=10, now_ms=now_ms, grace_ms=GRACE_MS)
    by_driver = judged_frame(
        window_frame.toArrow(),
        paths,
        count_frame.select(*JUDGED_COUNTS).toArrow(),
        minutes=10,
        now_ms=now_ms,
        grace_ms=GRACE_MS,
    )
    compared = [name for name in COMPLETENESS.column_names if name != "updated_at"]
    spark_rows = sorted_rows(by_spark.select(*compared).toArrow().to_pylist())
    driver_rows = sorted_rows(arrow_table(COMPLETENESS, by_driver[compared]).select(compared).to_pylist())
    assert len(driver_rows) == len(windows) * len(TIERS)
    assert driver_rows == spark_rows
    statuses = {row["status"] for row in driver_rows}
    assert {"complete", "incomplete", "over", "mismatch", "lagging", "unknown"} <= statuses  # every rule but pending
    assert {row["reference_tier"] for row in driver_rows if row["tier"] != "producer"} == {"producer", "dc1"}
    assert {row["window_minutes"] for row in driver_rows} == {10, 60}


def sorted_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda row: (row["topic"], row["window_start"], row["tier"]))


RECORDS_DDL = (
    "origin_cluster STRING, topic STRING, window_start TIMESTAMP, date DATE, tier STRING, logical_topic STRING, "
    "window_minutes INT, count BIGINT, bytes BIGINT, send_failed BIGINT, no_timestamp BIGINT, "
    "by_partition MAP<INT, BIGINT>, digest_by_partition MAP<INT, BIGINT>, latency_p99_ms DOUBLE, latency_max_ms DOUBLE, "
    "aborted BIGINT, unknown BOOLEAN"
)


def count_records(seed: int = 7) -> list[tuple]:
    """1-3 count records per (topic, window, tier): partition maps on all, some or none of them, nulls; aborted and
    unknown set on some, null on others (records stored before they were read)."""
    rng, flags = random.Random(seed), random.Random(seed + 1)
    rows = []
    for t in range(4):
        for w in range(8):
            start = FIRST + timedelta(minutes=10 * w)
            for tier in TIERS:
                maps = rng.choice(["all", "some", "none"])
                for r in range(rng.choice([1, 1, 2, 3])):
                    parts = None
                    if maps == "all" or (maps == "some" and r % 2 == 0):
                        parts = {p: rng.choice([0, 3, 1000]) for p in rng.sample(range(6), rng.choice([1, 2, 3]))}
                    count = sum(parts.values()) if parts is not None else rng.choice([0, 7, 1000])
                    rows.append(
                        (
                            "dc1",
                            f"t{t}",
                            start,
                            start.date(),
                            tier,
                            f"dc1.t{t}",
                            rng.choice([10, 10, 60]),
                            count,
                            rng.choice([None, count * 100]),
                            rng.choice([0, 2]),
                            rng.choice([None, 0, 5]),
                            parts,
                            digests_of(parts, rng),
                            rng.choice([None, 12.5, 3000.0]),
                            rng.choice([None, 40.0]),
                            flags.choice([None, 0, 0, 600]),
                            flags.choice([None, False, False, True]),
                        )
                    )
    return rows


def test_the_driver_sums_tier_counts_as_spark_does(spark):
    records = local_frame(spark, count_records(), RECORDS_DDL)
    windows = frozenset(("dc1", f"t{t}", FIRST + timedelta(minutes=10 * w)) for t in range(3) for w in range(8))
    by_spark = _summed(records.where("topic != 't3'"))  # the driver is given every topic, and the windows to keep
    by_driver = summed_in_driver(records.toArrow(), windows)
    compared = [name for name in TIER_COUNTS.column_names if name != "updated_at"]

    def rows(table: pa.Table) -> list[dict]:
        listed = table.select(compared).to_pylist()
        for row in listed:
            for name in ("by_partition", "digest_by_partition"):
                row[name] = None if row[name] is None else dict(row[name])
        return sorted_rows(listed)

    spark_rows = rows(arrow_table(TIER_COUNTS, by_spark.select(*TIER_COUNTS.column_names).toArrow()))
    assert len(spark_rows) == 3 * 8 * len(TIERS)
    assert rows(by_driver) == spark_rows
    maps = [row["by_partition"] for row in spark_rows]
    assert any(m is None for m in maps) and any(m is not None and len(m) > 1 for m in maps)
    digests = [row["digest_by_partition"] for row in spark_rows]
    assert any(d is None for d in digests) and any(d is not None and len(d) > 1 for d in digests)
    assert all(d is None or b is not None for d, b in zip(digests, maps, strict=True))
    assert {row["unknown"] for row in spark_rows} == {False, True}
    assert 0 in {row["aborted"] for row in spark_rows} and any(row["aborted"] >= 1200 for row in spark_rows)


STATUS_DDL = (
    "kind STRING, tier STRING, cluster STRING, seen_topic STRING, service STRING, origin_cluster STRING, "
    "topic STRING, logical_topic STRING, stalled BOOLEAN, emitted_at TIMESTAMP, record_id STRING, partitions "
    "ARRAY<STRUCT<partition: INT, position: BIGINT, end_offset: BIGINT, lag: BIGINT, last_audit_time: TIMESTAMP>>"
)


def status_records(seed: int = 11) -> list[tuple]:
    """Statuses of two reporters of two topics, more per partition than are kept, some at the same moment."""
    rng = random.Random(seed)
    rows = []
    for n in range(400):
        service = rng.choice(["kaudit-counter", "kaudit-mirror"])
        topic = rng.choice(["orders", "clicks"])
        emitted = FIRST + timedelta(seconds=rng.choice(range(0, 600, 30)))
        partitions = [
            (p, 100 * n, 100 * n + (lag or 0), lag, rng.choice([None, emitted - timedelta(minutes=3)]))
            for p in rng.sample(range(3), rng.choice([1, 2, 3]))
            for lag in [rng.choice([0, 0, 7, None])]
        ]
        rows.append(
            (
                "status",
                "aggregate",
                "aggregate",
                f"dc1.{topic}",
                service,
                "dc1",
                topic,
                f"dc1.{topic}",
                rng.choice([None, False, True]),
                emitted,
                f"s{n:04d}",
                partitions,
            )
        )
    return rows


def test_the_driver_keeps_the_newest_statuses_of_each_reporter_partition_as_spark_does(spark):
    statuses = local_frame(spark, status_records(), STATUS_DDL)
    by_spark = _recent_partition_statuses(statuses).toArrow().to_pylist()
    by_driver = recent_statuses_in_driver(statuses.toArrow()).to_pylist()

    def rows(listed: list[dict]) -> list[dict]:
        return sorted(
            ({k: v for k, v in row.items() if k != "kind"} for row in listed),
            key=lambda r: sorted(r.items(), key=str).__repr__(),
        )

    assert rows(by_driver) == rows(by_spark)
    assert len(by_spark) < sum(len(row[-1]) for row in status_records()), "older statuses than those kept were dropped"


def test_the_windows_left_open_are_those_not_final_or_pending_or_lagging():
    judged = pd.DataFrame(
        {
            "origin_cluster": ["dc1"] * 4,
            "topic": ["a", "a", "b", "c"],
            "window_start": pd.to_datetime(
                ["2026-11-23 10:00", "2026-11-23 10:10", "2026-11-23 10:00", "2026-11-23 10:00"], utc=True
            ),
            "final": [True, False, True, True],
            "status": ["complete", "complete", "lagging", "incomplete"],
        }
    )
    assert left_open(judged) == {("dc1", "a", datetime(2026, 11, 23, 10, 10)), ("dc1", "b", datetime(2026, 11, 23, 10))}


def completeness_row(tier: str, observed: int, updated_at: datetime, **more) -> dict:
    start = datetime(2026, 11, 23, 10, tzinfo=UTC)
    return {
        "origin_cluster": "dc1",
        "topic": "orders",
        "logical_topic": "dc1.orders",
        "window_start": start,
        "window_minutes": 10,
        "window_end": start + timedelta(minutes=10),
        "tier": tier,
        "expected": 100,
        "observed": observed,
        "status": "complete" if observed == 100 else "incomplete",
        "final": True,
        "updated_at": updated_at,
        "date": start.date(),
        **more,
    }


def test_a_rewrite_keeps_the_time_of_unchanged_rows_and_the_rows_of_other_keys_and_is_skipped_when_nothing_changed():
    then, now = datetime(2026, 11, 23, 11, tzinfo=UTC), datetime(2026, 11, 23, 12, tzinfo=UTC)
    stored = arrow_table(
        COMPLETENESS,
        [completeness_row("dc1", 100, then), completeness_row("lake", 99, then), completeness_row("old", 5, then)],
    )
    rows = arrow_table(COMPLETENESS, [completeness_row("dc1", 100, now), completeness_row("lake", 100, now)])
    replaced = {row["tier"]: row for row in rewritten(COMPLETENESS, rows, stored).to_pylist()}
    assert set(replaced) == {"dc1", "lake", "old"}
    assert replaced["dc1"]["updated_at"] == then  # nothing but its time changed: kept as stored
    assert (replaced["lake"]["observed"], replaced["lake"]["updated_at"]) == (100, now)
    assert replaced["old"]["observed"] == 5  # a key not written is kept
    unchanged = arrow_table(COMPLETENESS, [completeness_row("dc1", 100, now)])
    assert rewritten(COMPLETENESS, unchanged, stored) is None


def test_a_restatement_carries_the_ids_of_the_count_records_of_its_tier_and_its_reference_tier():
    start = pd.Timestamp("2026-11-23 10:00", tz="UTC")
    found = pd.DataFrame(
        [
            {
                "restatement_id": "r1",
                "origin_cluster": "dc1",
                "topic": "orders",
                "logical_topic": "dc1.orders",
                "window_start": start,
                "window_minutes": 10,
                "tier": "lake",
                "reference_tier": "producer",
                "before_expected": 100,
                "before_observed": 99,
                "before_status": "incomplete",
                "before_updated_at": start,
                "after_expected": 100,
                "after_observed": 100,
                "after_status": "complete",
                "after_final": True,
            }
        ]
    )
    records = pa.table(
        {
            "origin_cluster": ["dc1"] * 4,
            "topic": ["orders", "orders", "orders", "other"],
            "window_start": pa.array([start.to_pydatetime()] * 4, pa.timestamp("us", tz="UTC")),
            "tier": ["lake", "producer", "dc1", "lake"],
            "record_id": ["z-lake", "a-producer", "dc1-not-this", "other-topic"],
        }
    )
    (row,) = restatement_rows(found, records).to_pylist()
    assert row["record_ids"] == ["a-producer", "z-lake"]
    assert row["date"] == start.date()
    (row,) = restatement_rows(found, None).to_pylist()  # a run that read no record: none to name
    assert row["record_ids"] == []


def test_a_rewrite_compares_partition_maps_as_sets_of_entries():
    then, now = datetime(2026, 11, 23, 11, tzinfo=UTC), datetime(2026, 11, 23, 12, tzinfo=UTC)
    start = datetime(2026, 11, 23, 10, tzinfo=UTC)

    def row(tier: str, by_partition, updated_at: datetime) -> dict:
        return {
            "origin_cluster": "dc1",
            "topic": "orders",
            "window_start": start,
            "tier": tier,
            "count": 3,
            "by_partition": by_partition,
            "updated_at": updated_at,
            "date": start.date(),
        }

    stored = arrow_table(TIER_COUNTS, [row("dc1", [(0, 1), (1, 2)], then), row("lake", [(0, 3)], then)])
    reordered = arrow_table(TIER_COUNTS, [row("dc1", [(1, 2), (0, 1)], now), row("lake", [(0, 3)], now)])
    assert rewritten(TIER_COUNTS, reordered, stored) is None
    moved = arrow_table(TIER_COUNTS, [row("dc1", [(0, 2), (1, 1)], now), row("lake", None, now)])
    replaced = {r["tier"]: r for r in rewritten(TIER_COUNTS, moved, stored).to_pylist()}
    assert dict(replaced["dc1"]["by_partition"]) == {0: 2, 1: 1} and replaced["dc1"]["updated_at"] == now
    assert replaced["lake"]["by_partition"] is None
