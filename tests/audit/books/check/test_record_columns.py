"""The record check in Spark columns gives, row for row, what the Python checker gives.

Valid records of every shape, the hostile corpus of test_record_check, records that look canonical
but are not what the contract accepts (Spark reads "NaN" as a double, keeps a map key given twice,
takes 'single quotes'), and 600 seeded mutations of valid records all go through `check_messages`
twice, natively and all in Python; the tables' rows must be the same, and the canonical valid records
must have taken the native path (else this test would prove nothing).
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import replace

import pytest

from audit.books.check.checked_rows import ROW, check_in_driver, check_messages
from audit.books.check.python_checker import SOURCE_COLUMNS, RecordChecker
from audit.books.check.spark_columns import (
    COUNT_KEYS,
    COUNT_OPTIONAL,
    FAST,
    GAP_TYPE,
    PARTITION_TYPE,
    STATUS_KEYS,
    STATUS_OPTIONAL,
    checked_natively,
)
from audit.contract.record import PartitionStatus, count_record, encode, status_record
from audit.contract.retention import RetentionGap
from audit.contract.windows import MS_PER_MINUTE
from tests.audit.books.check.test_record_check import CHECKER, NOW, WINDOW, good, patched

SOURCE_DDL = (
    "read_from_cluster STRING, read_from_topic STRING, read_from_partition INT, read_from_offset BIGINT, value BINARY"
)


def status(**overrides) -> bytes:
    fields = dict(
        record_id="s-1:1",
        tier="aggregate",
        cluster="aggregate",
        topic="dc1.orders",
        emitted_at_ms=NOW,
        partitions=[PartitionStatus(0, 10, 15, 5, NOW - 1000), PartitionStatus(1, 3, 3, 0, None)],
        watermark_ms=NOW - 1000,
    )
    fields.update(overrides)
    return encode(status_record(**fields))


def rewritten(value: bytes, **changes) -> bytes:
    """`value` changed, still written as `encode` writes (sorted keys, no spaces)."""
    data = json.loads(value)
    data.update(changes)
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def status_patched(**changes) -> bytes:
    return rewritten(status(), **changes)


def canonical_patched(**changes) -> bytes:
    return rewritten(good(), **changes)


VALID = [
    good(),
    good(by_partition=None),
    good(record_id="c-1:2", latency_ms={"p50": 1.5, "p95": 2.0, "p99": 30.25, "max": 1000.0}),
    good(topic="orders", tier="dc1", cluster="dc1", by_partition={10: 4, 2: 1}),
    good(by_partition={7: 5}),
    good(topic="aggregate.dc1.orders", tier="aggregate", cluster="aggregate"),
    good(topic="dc1.", tier="aggregate", cluster="aggregate"),
    good(topic="dc1..x", tier="aggregate", cluster="aggregate"),
    good(topic="dc9.orders", count=0, by_partition={}),
    good(service="counter", host="h-1", instance_id="counter-abc", bytes=123, send_failed=2, no_timestamp=1),
    status(),
    status(watermark_ms=None, partitions=[]),
    status(window_start_ms=WINDOW, stalled=True),
    status(retention_gaps=[RetentionGap(0, 5, 9, NOW - 5000, None), RetentionGap(1, 0, 1)]),
    good(record_id="d-1:1", digest_by_partition={0: -(2**63), 1: 2**63 - 1}),
    good(record_id="d-1:2", by_partition={7: 5}, digest_by_partition={7: 12345}),
    good(record_id="d-1:3", by_partition={10: 4, 2: 1}, digest_by_partition={10: -1, 2: 0}),
    good(
        record_id="d-1:4",
        digest_by_partition={0: 1, 1: 2},
        latency_ms={"p50": 1.5, "p95": 2.0, "p99": 30.25, "max": 1000.0},
    ),
    good(record_id="d-1:5", count=0, by_partition={}, digest_by_partition={}),
    # transactions: aborted apart, counts the writer cannot vouch for
    good(
        record_id="t-1:1", tier="producer", cluster="dc1", topic="orders", count=3_900, by_partition=None, aborted=600
    ),
    good(record_id="t-1:2", tier="producer", cluster="dc1", topic="orders", unknown=True),
    good(record_id="t-1:3", aborted=1, unknown=True, digest_by_partition={0: 1, 1: 2}),
    good(
        record_id="t-1:4",
        aborted=10**15,
        unknown=True,
        latency_ms={"p50": 1.5, "p95": 2.0, "p99": 30.25, "max": 1000.0},
    ),
]

HOSTILE = [
    None,
    b"",
    b"not json",
    b"\xff\xfe",
    b"[1, 2]",
    b"null",
    patched(count=-3),
    patched(count=10**30),
    patched(tier="moon"),
    patched(cluster="dc9"),
    patched(window_start="2999-01-01T00:00:00Z"),
    patched(window_start="1971-01-01T00:00:00Z"),
    patched(window_start="2023-11-14T22:03:00Z"),
    canonical_patched(latency_ms={"max": "NaN", "p50": 1.0, "p95": 1.0, "p99": 1.0}),
    canonical_patched(latency_ms={"max": "Infinity", "p50": 1.0, "p95": 1.0, "p99": 1.0}),
    canonical_patched(latency_ms={"max": 1.0, "p50": 2.0, "p95": 1.0, "p99": 1.0}),
    canonical_patched(latency_ms={"max": 1, "p50": 1, "p95": 1, "p99": 1}),
    good().replace(b'"by_partition":{"0":2,"1":3}', b'"by_partition":{"0":2,"0":3}'),
    good().replace(b'"0":2', b'"007":2'),
    good().replace(b'"0":2', b'"-0":2'),
    canonical_patched(by_partition={"0": 2, "1": 4}),
    canonical_patched(by_partition={"0": None, "1": 5}),
    canonical_patched(by_partition={"2147483648": 5}, count=5),
    canonical_patched(by_partition={"007": 5}, count=5),
    canonical_patched(by_partition={"-1": 5}, count=5),
    canonical_patched(by_partition={"0": 4}, count=5),
    canonical_patched(by_partition={"0": -5}, count=-5),
    canonical_patched(by_partition={"0": None}, count=5),
    canonical_patched(by_partition={"0": 2**63}, count=5),
    canonical_patched(count="5"),
    canonical_patched(count=5.0),
    canonical_patched(count=None),
    canonical_patched(bytes=None, service=None),
    canonical_patched(window_minutes=0),
    canonical_patched(window_minutes=7),
    canonical_patched(window_minutes=10**12),
    canonical_patched(window_start="2026-02-30T00:00:00Z"),
    canonical_patched(window_start="2023-11-14T22:00:00+00:00"),
    canonical_patched(emitted_at="2023-11-14T22:13:20Z"),
    canonical_patched(record_id="x" * 201),
    canonical_patched(record_id="a\u0001b"),
    canonical_patched(record_id=""),
    canonical_patched(topic=".."),
    canonical_patched(topic="a b"),
    canonical_patched(service="caf\u00e9"),
    canonical_patched(schema_version=0),
    canonical_patched(schema_version=True),
    canonical_patched(kind="other"),
    canonical_patched(unknown_field=1),
    canonical_patched(partitions=[]),
    good().replace(b'"count":5', b'"count":5,"count":5'),
    good().replace(b'"count":5', b'"count": 5'),
    good().replace(b'"', b"'"),
    good().replace(b'"host":""', '"host":"é"'.encode()),
    status_patched(window_start="garbage"),
    status_patched(watermark="yesterday"),
    status_patched(stalled="true"),
    status_patched(partitions=[None]),
    status_patched(partitions=[{"end_offset": 15, "lag": 4, "last_audit_time": None, "partition": 0, "position": 10}]),
    status_patched(
        partitions=[{"end_offset": 15, "lag": -1, "last_audit_time": None, "partition": -2, "position": 16}]
    ),
    status_patched(
        partitions=[
            {"end_offset": 2**63 - 1, "lag": 2**63 - 1, "last_audit_time": None, "partition": p, "position": 0}
            for p in (0, 1)
        ]
    ),
    status_patched(
        retention_gaps=[{"after_time": None, "before_time": None, "from_offset": 9, "partition": 0, "to_offset": 9}]
    ),
    status_patched(retention_gaps=[None]),
    status_patched(by_partition={"0": 1}),
    # digest_by_partition: other partitions than by_partition's, values that are not int64, a key given twice
    canonical_patched(digest_by_partition={"0": 1}),
    canonical_patched(digest_by_partition={"0": 1, "1": 2, "2": 3}),
    canonical_patched(digest_by_partition={"0": 1, "2": 3}),
    canonical_patched(digest_by_partition={"0": 2**63, "1": 2}),
    canonical_patched(digest_by_partition={"0": -(2**63) - 1, "1": 2}),
    canonical_patched(digest_by_partition={"0": None, "1": 2}),
    canonical_patched(digest_by_partition={"0": 1.5, "1": 2}),
    canonical_patched(digest_by_partition={"0": "1", "1": 2}),
    canonical_patched(digest_by_partition=[1, 2]),
    canonical_patched(digest_by_partition={"0": 1, "1": 2}, by_partition=None),
    canonical_patched(by_partition={"7": 5}, digest_by_partition={"8": 1}),
    canonical_patched(by_partition={"7": 5}, digest_by_partition={"7": None}),
    good(digest_by_partition={0: 1, 1: 2}).replace(
        b'"digest_by_partition":{"0":1,"1":2}', b'"digest_by_partition":{"0":1,"0":2}'
    ),
    status_patched(digest_by_partition={"0": 1}),
    # aborted and unknown: wrong types and ranges are rejects; a 0 or a false is valid but not as encode writes
    canonical_patched(aborted=-1),
    canonical_patched(aborted=10**15 + 1),
    canonical_patched(aborted=2**63),
    canonical_patched(aborted="600"),
    canonical_patched(aborted=600.0),
    canonical_patched(aborted=True),
    canonical_patched(aborted=None),
    canonical_patched(aborted=0),
    canonical_patched(unknown=1),
    canonical_patched(unknown="true"),
    canonical_patched(unknown=None),
    canonical_patched(unknown=False),
    canonical_patched(unknown=[True]),
    good(unknown=True).replace(b'"unknown":true', b'"unknown":true,"unknown":false'),
    status_patched(aborted=5, unknown=True),
]

TRICKY_VALUES = [None, "NaN", "", "x", -1, 0, 1, 2**31, 2**63, 1.5, True, [], {}, [None], {"0": 1}]


def mutations(count: int, seed: int = 7) -> list[bytes]:
    """Valid records with one field (top level or nested) set to a tricky value, written canonically
    or not: the shapes a fuzzer would try first."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        data = json.loads(rng.choice(VALID))
        target = data
        nested = [key for key, value in data.items() if isinstance(value, dict | list) and value]
        if nested and rng.random() < 0.3:
            inner = data[rng.choice(nested)]
            target = inner[0] if isinstance(inner, list) else inner
        if isinstance(target, dict) and target:
            target[rng.choice(sorted(target))] = rng.choice(TRICKY_VALUES)
        canonical = rng.random() < 0.8
        separators = (",", ":") if canonical else (", ", ": ")
        out.append(json.dumps(data, sort_keys=canonical, separators=separators).encode())
    return out


def both_ways(spark, values: list[bytes | None], checker: RecordChecker = CHECKER):
    messages = spark.createDataFrame(
        [("dc1", "_audit", 0, offset, value) for offset, value in enumerate(values)], SOURCE_DDL
    )
    native = check_messages(messages, checker).drop("ingested_at", ROW).orderBy("read_from_offset").collect()
    python = (
        check_messages(messages, checker, native=False).drop("ingested_at", ROW).orderBy("read_from_offset").collect()
    )
    fast = checked_natively(messages, checker).where(FAST).select("read_from_offset").collect()
    return native, python, {row.read_from_offset for row in fast}


def comparable(row) -> dict:
    """A row with its nested fields' JSON text read (the paths write the same JSON with other spacing)."""
    fields = row.asDict(recursive=True)
    return {key: json.loads(v) if key.endswith("_json") and v is not None else v for key, v in fields.items()}


def assert_same(native, python, values) -> None:
    assert len(native) == len(python) == len(values)
    for ours, theirs in zip(map(comparable, native), map(comparable, python), strict=True):
        assert ours == theirs, (
            values[ours["read_from_offset"]],
            {k: (v, theirs[k]) for k, v in ours.items() if v != theirs[k]},
        )


def test_valid_and_hostile_records_are_checked_the_same_natively_and_in_python(spark):
    values = [*VALID, *HOSTILE]
    native, python, fast = both_ways(spark, values)
    assert_same(native, python, values)
    accepted = {row.read_from_offset for row in python if row.reason is None}
    assert set(range(len(VALID))) <= fast <= accepted, "every canonical valid record takes the native path"
    # Canonical and valid though hostile-looking: null defaults, raw UTF-8 in a free-text field.
    assert fast - set(range(len(VALID))) == {len(VALID) + 32, len(VALID) + 53}


def test_seeded_mutations_are_checked_the_same_natively_and_in_python(spark):
    values = mutations(600)
    native, python, fast = both_ways(spark, values)
    assert_same(native, python, values)
    accepted = {row.read_from_offset for row in python if row.reason is None}
    assert fast <= accepted and len(fast) >= 40, (len(fast), len(accepted))


@pytest.mark.parametrize("naming", ["identity", "prefix"])
def test_origin_follows_the_naming_policy(spark, naming):
    checker = RecordChecker(CHECKER.tiers, CHECKER.clusters, 10, naming, NOW)
    topics = ["orders", "dc1.orders", "aggregate.dc1.orders", "dc1.", "dc1..x", "dc9.orders", "dc1.aggregate"]
    values = [
        encode(
            count_record(
                record_id=f"c:{i}", tier="aggregate", cluster="aggregate", topic=topic, window_start_ms=WINDOW, count=1
            )
        )
        for i, topic in enumerate(topics)
    ]
    native, python, fast = both_ways(spark, values, checker)
    assert_same(native, python, values)
    assert len(fast) == len(topics)


def test_each_run_checks_against_its_own_clock_though_the_columns_are_built_once(spark):
    """The native check's columns are built once per session and settings (`_projection`); the window's
    latest start moves with each run's `now_ms`, in either direction."""
    day = 24 * 3600 * 1000
    ahead = WINDOW + day + 60 * MS_PER_MINUTE  # more than the slack of a day after NOW, within it a day later
    values = [good(window_start_ms=ahead)]
    for now, accepted in ((NOW, False), (NOW + day, True), (NOW, False)):
        checker = replace(CHECKER, now_ms=now)
        native, python, fast = both_ways(spark, values, checker)
        assert_same(native, python, values)
        assert (python[0].reason is None) == accepted, python[0].reason
        assert fast == ({0} if accepted else set()), (now, fast)


def test_only_the_clock_expectations_move_with_the_clock():
    later = replace(CHECKER, now_ms=CHECKER.now_ms + 1)
    assert later.configured_expectations() == CHECKER.configured_expectations()
    assert later.clock_expectations() != CHECKER.clock_expectations()
    assert len(CHECKER.configured_expectations()) + len(CHECKER.clock_expectations()) == len(CHECKER.expectations())


def test_the_canonical_keys_are_the_ones_encode_writes_in_its_order():
    count = json.loads(
        good(latency_ms={"p50": 1.0, "p95": 1.0, "p99": 1.0, "max": 1.0}, digest_by_partition={0: 1, 1: 2})
    )
    assert tuple(count) == tuple(sorted((*COUNT_KEYS, *COUNT_OPTIONAL)))
    assert tuple(json.loads(good(by_partition=None))) == COUNT_KEYS
    flagged = tuple(json.loads(good(by_partition=None, aborted=1, unknown=True)))
    assert flagged == (
        "aborted",
        *COUNT_KEYS[: COUNT_KEYS.index("window_minutes")],
        "unknown",
        "window_minutes",
        "window_start",
    )
    assert tuple(json.loads(status())) == STATUS_KEYS
    gaps = json.loads(status(retention_gaps=[RetentionGap(0, 1, 2)]))
    assert tuple(gaps) == tuple(sorted((*STATUS_KEYS, *STATUS_OPTIONAL)))
    for kind, item in ((PARTITION_TYPE, gaps["partitions"][0]), (GAP_TYPE, gaps["retention_gaps"][0])):
        assert re.findall(r"(\w+):", kind) == list(item), "parsed in the order encode writes"


def in_the_driver_and_in_spark(spark, values: list[bytes | None], checker: RecordChecker = CHECKER):
    """`check_in_driver`'s rows and `check_messages`' of the same messages, both as Arrow, in offset order, without
    the run's moment and row numbers; the driver's must be typed exactly as Spark's."""
    import pandas as pd

    rows = [("dc1", "_audit", 0, offset, value) for offset, value in enumerate(values)]
    frame = pd.DataFrame(rows, columns=list(SOURCE_COLUMNS)).astype({"read_from_partition": "int32"})
    driver = check_in_driver(frame, checker).drop_columns(["ingested_at", ROW])
    spark_rows = check_messages(spark.createDataFrame(rows, SOURCE_DDL), checker).drop("ingested_at", ROW)
    ours = spark_rows.orderBy("read_from_offset").toArrow()
    assert [(f.name, f.type) for f in driver.schema] == [(f.name, f.type) for f in ours.schema]
    return driver.to_pylist(), ours.to_pylist()


def test_a_small_runs_check_in_the_driver_gives_spark_s_rows(spark):
    """Valid, hostile and mutated records: the driver's check (the Python checker, typed in Arrow) gives the
    rows Spark's check gives, natively or in Python."""
    values = [*VALID, *HOSTILE, *mutations(300, seed=11)]
    driver, in_spark = in_the_driver_and_in_spark(spark, values)
    assert len(driver) == len(in_spark) == len(values)
    for ours, theirs in zip(map(_read, driver), map(_read, in_spark), strict=True):
        assert ours == theirs, (
            values[ours["read_from_offset"]],
            {k: (v, theirs[k]) for k, v in ours.items() if v != theirs[k]},
        )
    assert sum(row["reason"] is None for row in driver) >= len(VALID)


def _read(row: dict) -> dict:
    """A row with its JSON text read (the paths space it differently) and its maps' entries in one order."""
    read = {key: json.loads(v) if key.endswith("_json") and v is not None else v for key, v in row.items()}
    maps = {name: None if row[name] is None else sorted(row[name]) for name in ("by_partition", "digest_by_partition")}
    return {**read, **maps}


def test_every_query_of_a_runs_checked_rows_sees_one_ingest_moment(spark):
    """The checked rows are read by several queries (the records' append, the tier tables' sums, the rejects):
    each must see the same `ingested_at` and so the same `date` for a record without a window, or a status record
    could be dated apart from itself."""
    messages = spark.createDataFrame([("dc1", "_audit", 0, offset, v) for offset, v in enumerate(VALID)], SOURCE_DDL)
    checked = check_messages(messages, CHECKER)
    first = checked.select("ingested_at").distinct().collect()
    time.sleep(0.01)
    again = checked.select("ingested_at").distinct().collect()
    assert len(first) == 1 and first == again
