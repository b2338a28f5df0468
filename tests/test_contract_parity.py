"""Every implementation of the audit time and window rules against the one table of cases
(tests/contract_cases.py): the contract itself, the counter's Python loop, the Python tally, the
librdkafka plugin's C rules (which the counter and the audited producer count with), and the lake's Spark columns (in the
Spark tier)."""

from __future__ import annotations

import ctypes
import os
import subprocess
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

from audit.contract.audit_time import audit_time, header_value
from audit.contract.digest import message_hash
from audit.contract.record import AUDIT_TIME_HEADER, parse
from audit.contract.tally import Tally
from audit.contract.windows import MS_PER_MINUTE, window_start
from audit.hops.counter import fastcount
from audit.hops.replicator.state import copy_headers
from audit.io import jvm, plugin
from audit.io.interceptor_jar import interceptor_jar
from native.build import JAVA_COMMAND, JAVA_CONTRACT, java_contract
from producers import audited
from tests.conftest import cache_dir
from tests.contract_cases import (
    AUDIT_TIME_CASES,
    JAVA_SEND_CASES,
    NOW_MS,
    PRODUCER_CASES,
    WINDOW_CASES,
    AuditTimeCase,
    Kind,
    SendCase,
    WindowCase,
)

CONFLUENT_KIND = {
    Kind.CREATE_TIME: TIMESTAMP_CREATE_TIME,
    Kind.LOG_APPEND_TIME: TIMESTAMP_LOG_APPEND_TIME,
    Kind.NONE: TIMESTAMP_NOT_AVAILABLE,
}
SPARK_KIND = {Kind.CREATE_TIME: 0, Kind.LOG_APPEND_TIME: 1, Kind.NONE: -1}  # the Kafka source's timestampType


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
    count, size, no_timestamp, _latencies, offset, when, digest = groups[("t", 0, case.window_start_ms)]
    assert (count, size, no_timestamp, offset, when) == (1, 2, 0 if case.usable else 1, 0, case.audit_ms)
    assert digest == message_hash(b"k", b"v")


@pytest.mark.parametrize("case", AUDIT_TIME_CASES, ids=str)
def test_the_counters_python_loop(case):
    groups = fastcount.count_in_python([consumed(case)], NOW_MS, window_ms(case), on_error=pytest.fail)
    assert_counted_as_the_case_says(groups, case)


# -- the replicator: a copy carries the source's audit time to a LogAppendTime target -------------


@pytest.mark.parametrize("case", [c for c in AUDIT_TIME_CASES if c.audit_ms != NOW_MS], ids=str)
def test_a_copy_is_counted_at_the_sources_audit_time(case):
    """The target cluster gives the copy its own time (a later LogAppendTime, or the CreateTime copied)."""
    kind = CONFLUENT_KIND[case.kind]
    headers = copy_headers(list(case.headers), [], "dc1", kind, case.timestamp_ms)
    target_timestamp = (kind, case.timestamp_ms if kind == TIMESTAMP_CREATE_TIME else NOW_MS - 7)
    assert audit_time(target_timestamp, headers, NOW_MS)[0] == case.audit_ms


# -- the librdkafka plugin: its C rules, and the audited producer on it (librdkafka's mock cluster) ---------


@pytest.mark.parametrize("case", AUDIT_TIME_CASES, ids=str)
def test_the_plugins_audit_time(case: AuditTimeCase):
    """librdkafka picks the last kaudit-time header (rd_kafka_header_get_last); the plugin reads it."""
    value = header_value(list(case.headers), AUDIT_TIME_HEADER)
    time_ms = ctypes.c_longlong()
    usable = plugin.library().kaudit_audit_time(
        case.kind == Kind.CREATE_TIME,
        ctypes.c_longlong(case.timestamp_ms),
        value,
        ctypes.c_longlong(-1 if value is None else len(value)),
        ctypes.c_longlong(NOW_MS),
        ctypes.byref(time_ms),
    )
    assert (time_ms.value, bool(usable)) == (case.audit_ms, case.usable)


@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_the_plugins_windows(case: WindowCase):
    assert plugin.library().kaudit_window_start(case.time_ms, case.window_minutes * MS_PER_MINUTE) == case.start_ms


def produced_and_read(bootstrap: str, topics: list[str], cases: list[AuditTimeCase], window_minutes: int, audit: str):
    """Each case sent to its own topic: the producer tier's windows by topic (from its count records: those
    delivered, and those of failed sends), what a consumer reads back by topic, and the clock around the sending."""
    producer = audited.AuditedProducer(
        config={"bootstrap.servers": bootstrap},
        cluster="dc1",
        service="t",
        audit_topic=audit,
        flush_interval_s=3600,
        window_minutes=window_minutes,
    )
    before = time.time_ns() // 1_000_000
    for topic, case in zip(topics, cases, strict=True):
        producer.produce(topic, value=b"v", partition=0, timestamp=case.timestamp_ms)
    assert producer.flush(10) == 0
    after = time.time_ns() // 1_000_000
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "log_level": 2})
    consumer.assign([TopicPartition(topic, 0, 0) for topic in [*topics, audit]])
    read: dict[str, Message] = {}
    windows: dict[str, set] = defaultdict(set)
    deadline = time.monotonic() + 20
    while len(windows) < len(cases) and time.monotonic() < deadline:
        for message in consumer.consume(len(cases) + 10, timeout=0.5):
            if message.error() is not None:
                continue
            if message.topic() != audit:
                read[message.topic()] = message
                continue
            record, why = parse(message.value())
            assert why is None, why
            windows[record.topic].add((record.window_start_ms, record.count, record.send_failed))
    consumer.close()
    return windows, read, (before, after)


@pytest.mark.kafka
def test_the_audited_producer(topic_factory, local_clusters):
    """What a broker takes is counted where a consumer reading it back counts it (a case counted "now" at the
    producer's own clock); what it refuses (a time before the epoch) only as send_failed."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    any_time = {"message.timestamp.after.max.ms": str(2**63 - 1)}
    by_minutes = defaultdict(list)
    for case in PRODUCER_CASES:
        by_minutes[case.window_minutes].append(case)
    for minutes, cases in by_minutes.items():
        topics = [topic_factory("dc1", config=any_time) for _ in cases]
        audit = topic_factory("dc1")
        windows, read, (before, after) = produced_and_read(bootstrap, topics, cases, minutes, audit)
        for topic, case in zip(topics, cases, strict=True):
            ((start, count, failed),) = windows[topic]
            at_now = {window_start(t, minutes) for t in (before, after)}
            if topic not in read:
                assert (count, failed) == (0, 1) and start in at_now, case
                continue
            message = read[topic]
            when, usable = audit_time(message.timestamp(), message.headers(), NOW_MS)
            if case.timestamp_ms == 0:  # librdkafka sends "now" for 0: a usable CreateTime
                assert usable and before <= when <= after, case
            else:
                assert message.timestamp()[1] == case.timestamp_ms and usable == case.usable, case
            assert (count, failed) == (1, 0), case
            assert start == window_start(when, minutes) if usable else start in at_now, case


# -- the Java producer interceptor: io.kaudit.AuditTime ---------------------------------------------


def test_the_java_interceptors_constants_are_the_contracts():
    """io.kaudit.Contract, which every Java source takes the contract's constants from, is what native/build.py
    writes from the Python modules (the same table as the plugin's header); it is committed, so it must not lag."""
    assert JAVA_CONTRACT.read_text() == java_contract(), f"{JAVA_CONTRACT.name} is stale: run `{JAVA_COMMAND}`"


def java_audit_times(questions: list[str]) -> list[str]:
    """io.kaudit.AuditTime's answer to each of its question lines (see its main), on the broker's kafka-clients."""
    classpath = os.pathsep.join([jvm.classpath(cache_dir(), jvm.KAFKA_JARS), str(interceptor_jar(cache_dir()))])
    command = [jvm.java_executable(), "-cp", classpath, "io.kaudit.AuditTime"]
    lines = "".join(question + "\n" for question in questions)
    done = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.splitlines()


def sent_question(case: SendCase) -> str:
    headers = [f"{name}:{'-' if value is None else value.hex()}" for name, value in case.headers]
    stamp = "-" if case.timestamp_ms is None else str(case.timestamp_ms)
    return " ".join(["send", stamp, str(NOW_MS), str(case.window_minutes * MS_PER_MINUTE), *headers])


def assert_java_answers(cases: list, questions: list[str]) -> None:
    got = java_audit_times(questions)
    expected = [f"{c.audit_ms} {str(c.usable).lower()} {c.window_start_ms}" for c in cases]
    wrong = [(str(c), g, e) for c, g, e in zip(cases, got, expected, strict=True) if g != e]
    assert wrong == [], "\n".join(f"{why}: Java {g}, the contract {e}" for why, g, e in wrong)


@pytest.mark.jvm
def test_the_java_interceptors_failed_send_window():
    """A failed send's acknowledgement carries no timestamp: the interceptor keeps the record's audit time from
    onSend, and counts the failure where the message would have counted."""
    assert_java_answers(JAVA_SEND_CASES, [sent_question(case) for case in JAVA_SEND_CASES])


@pytest.mark.jvm
def test_the_java_interceptors_acknowledged_window():
    questions = [f"ack {c.timestamp_ms} {NOW_MS} {c.window_minutes * MS_PER_MINUTE}" for c in PRODUCER_CASES]
    assert_java_answers(PRODUCER_CASES, questions)


@pytest.mark.jvm
def test_the_java_interceptors_windows():
    got = java_audit_times([f"window {c.time_ms} {c.window_minutes * MS_PER_MINUTE}" for c in WINDOW_CASES])
    assert [int(start) for start in got] == [case.start_ms for case in WINDOW_CASES]


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

    from audit.hops.lake.columns import audit_time_columns, window_start_column

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

    from audit.hops.lake.columns import window_start_column

    columns = [window_start_column(F.lit(case.time_ms), case.window_minutes) for case in WINDOW_CASES]
    got = spark.range(1).select(*columns).first()
    wrong = [(str(case), got[i]) for i, case in enumerate(WINDOW_CASES) if got[i] != case.start_ms]
    assert wrong == [], wrong
