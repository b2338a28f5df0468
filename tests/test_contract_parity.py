"""Every implementation of the audit time and window rules against the one table of cases
(tests/contract_cases.py): the contract itself, the counter's C and Python loops, the Python tally,
the audited producer's C and Python produce paths, and the lake's Spark columns (in the Spark tier)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    Message,
    TopicPartition,
)

from audit.contract.audit_time import audit_time
from audit.contract.record import MAX_AUDIT_TIME_MS
from audit.contract.tally import Tally
from audit.contract.windows import MS_PER_MINUTE, window_start
from audit.hops import fastcount
from audit.hops.mirror_state import copy_headers
from producers import audited
from tests.contract_cases import (
    AUDIT_TIME_CASES,
    NOW_MS,
    PRODUCER_CASES,
    WINDOW_CASES,
    AuditTimeCase,
    Kind,
    WindowCase,
)

CONFLUENT_KIND = {
    Kind.CREATE_TIME: TIMESTAMP_CREATE_TIME,
    Kind.LOG_APPEND_TIME: TIMESTAMP_LOG_APPEND_TIME,
    Kind.NONE: TIMESTAMP_NOT_AVAILABLE,
}
SPARK_KIND = {Kind.CREATE_TIME: 0, Kind.LOG_APPEND_TIME: 1, Kind.NONE: -1}  # the Kafka source's timestampType

needs_native_counter = pytest.mark.skipif(fastcount.native_count is None, reason="the native counter loop is not built")
needs_native_producer = pytest.mark.skipif(audited.native_module is None, reason="the native produce path is not built")


def consumed(case: AuditTimeCase) -> Message:
    return Message(
        topic="t",
        partition=0,
        offset=0,
        key=b"k",
        value=b"v",
        timestamp=(CONFLUENT_KIND[case.kind], case.timestamp_ms),
        headers=list(case.headers) or None,
    )


def window_ms(case: AuditTimeCase) -> int:
    return case.window_minutes * MS_PER_MINUTE


# -- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", AUDIT_TIME_CASES, ids=str)
def test_the_contract(case):
    timestamp = (CONFLUENT_KIND[case.kind], case.timestamp_ms)
    assert audit_time(timestamp, list(case.headers), NOW_MS) == (case.audit_ms, case.usable)
    assert window_start(case.audit_ms, case.window_minutes) == case.window_start_ms


@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_the_contracts_windows(case: WindowCase):
    assert window_start(case.time_ms, case.window_minutes) == case.start_ms


@pytest.mark.parametrize("case", [*WINDOW_CASES, *AUDIT_TIME_CASES], ids=str)
def test_the_python_tally(case):
    time_ms, start = (
        (case.time_ms, case.start_ms) if isinstance(case, WindowCase) else (case.audit_ms, case.window_start_ms)
    )
    tally = Tally(case.window_minutes)
    tally.add("t", time_ms, 1)
    tally.fail("u", time_ms)
    assert set(tally.drain()) == {("t", start), ("u", start)}


# -- the counter's loops --------------------------------------------------------------------------


def assert_counted_as_the_case_says(groups: dict, case: AuditTimeCase) -> None:
    assert list(groups) == [("t", 0, case.window_start_ms)]
    count, size, no_timestamp, _latencies, offset, when = groups[("t", 0, case.window_start_ms)]
    assert (count, size, no_timestamp, offset, when) == (1, 2, 0 if case.usable else 1, 0, case.audit_ms)


@pytest.mark.parametrize("case", AUDIT_TIME_CASES, ids=str)
def test_the_counters_python_loop(case):
    groups = fastcount.bucket([consumed(case)], NOW_MS, window_ms(case), native=False, on_error=pytest.fail)
    assert_counted_as_the_case_says(groups, case)


@needs_native_counter
@pytest.mark.parametrize("case", AUDIT_TIME_CASES, ids=str)
def test_the_counters_c_loop(case):
    """The C loop counts every usable CreateTime itself and hands the rest to the Python loop."""
    message = consumed(case)
    groups, rest = fastcount.native_count([message], NOW_MS, window_ms(case), TIMESTAMP_CREATE_TIME, MAX_AUDIT_TIME_MS)
    if case.kind == Kind.CREATE_TIME and case.usable and case.audit_ms == case.timestamp_ms:
        assert rest == [], "a usable CreateTime is the C loop's to count"
        assert_counted_as_the_case_says(groups, case)
    else:
        assert (groups, rest) == ({}, [message])
    assert_counted_as_the_case_says(
        fastcount.bucket([message], NOW_MS, window_ms(case), native=True, on_error=pytest.fail), case
    )


@needs_native_counter
@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_the_counters_c_windows(case: WindowCase):
    from audit.hops import _fastcount  # type: ignore[attr-defined]

    assert _fastcount.window_start(case.time_ms, case.window_minutes * MS_PER_MINUTE) == case.start_ms


# -- the replicator: a copy carries the source's audit time to a LogAppendTime target -------------


@pytest.mark.parametrize("case", [c for c in AUDIT_TIME_CASES if c.audit_ms != NOW_MS], ids=str)
def test_a_copy_is_counted_at_the_sources_audit_time(case):
    """The target cluster gives the copy its own time (a later LogAppendTime, or the CreateTime copied)."""
    kind = CONFLUENT_KIND[case.kind]
    headers = copy_headers(list(case.headers), [], "dc1", kind, case.timestamp_ms)
    target_timestamp = (kind, case.timestamp_ms if kind == TIMESTAMP_CREATE_TIME else NOW_MS - 7)
    assert audit_time(target_timestamp, headers, NOW_MS)[0] == case.audit_ms


# -- the audited producer, on librdkafka's in-process mock cluster ----------------------------------


def produced_and_read(native: bool, cases: list[AuditTimeCase], window_minutes: int):
    """Each case sent to its own topic; the producer's windows by topic, what a consumer reads back by topic,
    and the clock around the sending."""
    module = audited.native_module
    if not native:
        audited.native_module = None
    try:
        config = {"test.mock.num.brokers": 1, "log_level": 2}
        producer = audited.AuditedProducer(
            config=config, cluster="dc1", service="t", flush_interval_s=3600, window_minutes=window_minutes
        )
    finally:
        audited.native_module = module
    before = time.time_ns() // 1_000_000
    for index, case in enumerate(cases):
        producer.produce(f"case-{index}", value=b"v", partition=0, timestamp=case.timestamp_ms)
    assert producer.producer.flush(10) == 0
    after = time.time_ns() // 1_000_000
    windows = defaultdict(set)
    for topic, start in producer._drain():
        windows[topic].add(start)
    broker = next(iter(producer.producer.list_topics(timeout=10).brokers.values()))
    consumer = Consumer({"bootstrap.servers": f"{broker.host}:{broker.port}", "group.id": "g", "log_level": 2})
    consumer.assign([TopicPartition(f"case-{index}", 0, 0) for index in range(len(cases))])
    read: dict[str, Message] = {}
    deadline = time.monotonic() + 20
    while len(read) < len(cases) and time.monotonic() < deadline:
        read.update((m.topic(), m) for m in consumer.consume(len(cases), timeout=0.5) if m.error() is None)
    consumer.close()
    return windows, read, (before, after)


@pytest.mark.parametrize("native", [True, False], ids=["C", "Python"])
def test_the_producers_paths(native):
    """A case counted "now" is counted at the producer's own clock; a consumer reads back the time it counted."""
    if native and audited.native_module is None:
        pytest.skip("the native produce path is not built")
    by_minutes = defaultdict(list)
    for case in PRODUCER_CASES:
        by_minutes[case.window_minutes].append(case)
    for minutes, cases in by_minutes.items():
        windows, read, (before, after) = produced_and_read(native, cases, minutes)
        for index, case in enumerate(cases):
            topic, now = f"case-{index}", case.audit_ms == NOW_MS
            message = read[topic]
            assert message.timestamp()[1] == case.timestamp_ms or (case.timestamp_ms == 0 and now), case
            when, usable = audit_time(message.timestamp(), message.headers(), NOW_MS)
            assert usable and (before <= when <= after if now else when == case.audit_ms), case
            expected = {window_start(when, minutes)} if now else {case.window_start_ms}
            assert windows[topic] == expected, case


@needs_native_producer
@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_the_producers_c_windows(case: WindowCase):
    assert audited.native_module.window_start(case.time_ms, case.window_minutes * MS_PER_MINUTE) == case.start_ms


# -- the lake's Spark columns ---------------------------------------------------------------------


def spark_rows(spark, cases: list[AuditTimeCase]):
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from audit.hops.lake_columns import audit_time_columns, window_start_column

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("case", IntegerType()),
            StructField("timestamp_ms", LongType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
            StructField("window_minutes", IntegerType()),
        ]
    )
    rows = [
        (i, case.timestamp_ms, SPARK_KIND[case.kind], [list(h) for h in case.headers], case.window_minutes)
        for i, case in enumerate(cases)
    ]
    frame = spark.createDataFrame(rows, schema).withColumn("timestamp", F.timestamp_millis("timestamp_ms"))
    audit_ms, usable = audit_time_columns(NOW_MS)
    frame = frame.withColumn("audit_ms", audit_ms).withColumn("usable", usable)
    windows = {
        minutes: window_start_column(F.col("audit_ms"), minutes) for minutes in {c.window_minutes for c in cases}
    }
    start = F.coalesce(*[F.when(F.col("window_minutes") == m, column) for m, column in windows.items()])
    rows = frame.select("case", "audit_ms", "usable", start.alias("start")).collect()  # no datetime past 9999
    return {row.case: (row.audit_ms, row.usable, row.start) for row in rows}


@pytest.mark.spark
def test_the_lakes_spark_columns(spark):
    got = spark_rows(spark, AUDIT_TIME_CASES)
    wrong = [
        (str(case), got[i], (case.audit_ms, case.usable, case.window_start_ms))
        for i, case in enumerate(AUDIT_TIME_CASES)
        if got[i] != (case.audit_ms, case.usable, case.window_start_ms)
    ]
    assert wrong == [], "\n".join(f"{why}: Spark {g}, the contract {e}" for why, g, e in wrong)


@pytest.mark.spark
def test_the_lakes_spark_windows(spark):
    from pyspark.sql import functions as F

    from audit.hops.lake_columns import window_start_column

    columns = [window_start_column(F.lit(case.time_ms), case.window_minutes) for case in WINDOW_CASES]
    got = spark.range(1).select(*columns).first()
    wrong = [(str(case), got[i]) for i, case in enumerate(WINDOW_CASES) if got[i] != case.start_ms]
    assert wrong == [], wrong
