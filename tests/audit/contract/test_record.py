"""The audit-record contract: round trips, and every malformed shape refused with a reason."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.audit_time import parse_audit_time_header
from audit.contract.errors import RecordError
from audit.contract.record import (
    AUDIT_TIME_HEADER,
    MAX_COUNT,
    Kind,
    PartitionStatus,
    count_record,
    decode,
    encode,
    parse,
    record_id,
    status_record,
    to_json,
)
from audit.contract.watermarks import topic_statuses

WINDOW_MS = 600_000
names = st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,20}\Z")
topics = st.from_regex(r"\A[A-Za-z0-9._-]{1,40}\Z").filter(lambda t: t not in (".", ".."))
amounts = st.integers(min_value=0, max_value=MAX_COUNT)
times_ms = st.integers(min_value=0, max_value=4_102_444_800_000)  # up to 2100


@st.composite
def latencies(draw):
    values = sorted(draw(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=4, max_size=4)))
    return dict(zip(("p50", "p95", "p99", "max"), values))


@st.composite
def count_records(draw):
    minutes = draw(st.sampled_from([1, 5, 10, 15, 30, 60, 1440]))
    parts = draw(st.dictionaries(st.integers(0, 1000), st.integers(0, 10**9), max_size=5))
    count = sum(parts.values()) if parts else draw(amounts)
    return count_record(
        record_id=record_id(draw(names), draw(st.integers(0, 10**12))),
        tier=draw(names),
        cluster=draw(names),
        service=draw(st.text(max_size=20)),
        host=draw(st.text(max_size=20)),
        instance_id=draw(st.text(max_size=20)),
        topic=draw(topics),
        window_start_ms=draw(times_ms) // (minutes * 60_000) * minutes * 60_000,
        window_minutes=minutes,
        count=count,
        bytes=draw(amounts),
        send_failed=draw(amounts),
        aborted=draw(st.sampled_from([0, 0, 1, 600])),
        unknown=draw(st.booleans()),
        no_timestamp=draw(st.integers(0, count)),
        by_partition=parts or None,
        latency_ms=draw(st.none() | latencies()),
        emitted_at_ms=draw(times_ms),
    )


@st.composite
def status_records(draw):
    partitions = []
    for partition in draw(st.lists(st.integers(0, 1000), unique=True, max_size=5)):
        position = draw(st.integers(0, 10**12))
        end = position + draw(st.integers(0, 10**6))
        partitions.append(PartitionStatus(partition, position, end, end - position, draw(st.none() | times_ms)))
    return status_record(
        record_id=draw(names),
        tier=draw(names),
        cluster=draw(names),
        topic=draw(topics),
        partitions=partitions,
        watermark_ms=draw(st.none() | times_ms),
        emitted_at_ms=draw(times_ms),
    )


def valid_json() -> dict:
    return to_json(
        count_record(
            record_id="p-1:1",
            tier="producer",
            cluster="dc1",
            topic="orders",
            window_start_ms=1_700_000_400_000,
            count=3,
            bytes=30,
            by_partition={0: 1, 2: 2},
            latency_ms={"p50": 1, "p95": 2, "p99": 3, "max": 4},
            emitted_at_ms=1_700_000_500_000,
        )
    )


@given(count_records() | status_records())
def test_encode_then_decode_gives_the_same_record(record):
    assert decode(encode(record)) == record


def test_valid_record_passes_and_unknown_fields_are_ignored():
    data = valid_json() | {"future_field": {"anything": [1, 2]}, "schema_version": 2}
    record, reason = parse(json.dumps(data))
    assert reason is None and record.count == 3 and record.kind == Kind.COUNT


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.pop("count"), "count: missing"),
        (lambda d: d.pop("topic"), "topic: missing"),
        (lambda d: d.pop("record_id"), "record_id: missing"),
        (lambda d: d.update(count=-3), "count: -3 is negative"),
        (lambda d: d.update(count=True), "count: True is a boolean"),
        (lambda d: d.update(count="3"), "count: '3' is not an integer"),
        (lambda d: d.update(count=3.0), "count: 3.0 is not an integer"),
        (lambda d: d.update(bytes=MAX_COUNT + 1), "bytes: 1000000000000001 is over the limit"),
        (lambda d: d.update(count=10**400), "count:"),
        (
            lambda d: d.update(window_start="2023-11-14T22:13:00Z"),
            "window_start: 2023-11-14T22:13:00Z is not aligned to 10-minute windows",
        ),
        (lambda d: d.update(window_start="yesterday"), "window_start: 'yesterday' is not an ISO-8601 time"),
        (
            lambda d: d.update(window_start="2023-11-14T22:10:00+02:00"),
            "window_start: '2023-11-14T22:10:00+02:00' is not UTC",
        ),
        (lambda d: d.update(window_minutes=7), "window_minutes: 7 does not divide a day"),
        (lambda d: d.update(window_minutes=0), "window_minutes: 0 is not between 1 and 1440"),
        (lambda d: d.update(kind="total"), "kind: 'total' is not one of count, status"),
        (lambda d: d.update(tier="bad tier"), "tier: 'bad tier' is not a name"),
        (lambda d: d.update(tier=""), "tier: '' is not a name"),
        (lambda d: d.update(topic="a/b"), "topic: 'a/b' is not a legal Kafka topic name"),
        (lambda d: d.update(topic=".."), "topic: '..' is not a legal Kafka topic name"),
        (lambda d: d.update(topic="t" * 250), "topic:"),
        (lambda d: d.update(schema_version=0), "schema_version: 0 is not a known version"),
        (lambda d: d.update(by_partition={"0": 1, "1": 1}), "by_partition: sums to 2, but count is 3"),
        (lambda d: d.update(by_partition={"x": 3}), "by_partition: key 'x' is not a partition number"),
        (lambda d: d.update(latency_ms={"p50": 5, "p95": 2, "p99": 3, "max": 4}), "latency_ms: p50 5.0 <= p95 2.0"),
        (lambda d: d.update(latency_ms={"p50": 1}), "p95: missing"),
        (lambda d: d.update(record_id="x" * 201), "record_id: must have 1 to 200 characters"),
        (lambda d: d.pop("emitted_at"), "emitted_at: missing"),
        (lambda d: d.update(aborted=-1), "aborted: -1 is negative"),
        (lambda d: d.update(aborted="6"), "aborted: '6' is not an integer"),
        (lambda d: d.update(unknown=1), "unknown: 1 is not bool"),
    ],
)
def test_each_malformed_count_record_is_refused_with_a_reason_naming_the_field(change, reason):
    data = valid_json()
    change(data)
    record, why = parse(json.dumps(data))
    assert record is None
    assert why.startswith(reason) or reason in why, why
    with pytest.raises(RecordError, match=reason.split(":")[0]):
        decode(json.dumps(data))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "record: not JSON"),
        (b"not json", "record: not JSON"),
        (b"\xff\xfe{}", "record: not UTF-8"),
        (b"[1, 2]", "record: a JSON list is not an object"),
        (b"null", "record: a JSON NoneType is not an object"),
        (b"[" * 100_000 + b"]" * 100_000, "record:"),
        (b" " * 1_000_001, "record: 1000001 bytes is over"),
        (None, "record: empty message"),
    ],
)
def test_unreadable_payloads_are_refused_with_a_reason(payload, reason):
    record, why = parse(payload)
    assert record is None and why.startswith(reason), why


def test_status_record_with_inconsistent_lag_is_refused():
    record = status_record(
        record_id="c:1",
        tier="dc1",
        cluster="dc1",
        topic="t",
        partitions=[PartitionStatus(0, position=10, end_offset=15, lag=4)],
    )
    assert parse(encode(record)) == (None, "partitions[0]: lag 4 is not end_offset 15 - position 10")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_parse_never_raises_on_arbitrary_bytes(payload):
    record, reason = parse(payload)
    assert (record is None) != (reason is None)


@settings(max_examples=300)
@given(st.sampled_from(sorted(valid_json())), json_values)
def test_parse_never_raises_when_any_field_holds_any_json_value(key, value):
    data = valid_json()
    data[key] = value
    record, reason = parse(json.dumps(data))
    assert (record is None) != (reason is None)
    if record is None:
        assert reason


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"1700000000000", 1_700_000_000_000),
        (None, None),
        (b"", None),
        (b"abc", None),
        (b"-5", None),
        (b"0", None),
        (b"99999999999999999999", None),
        (b"\xff", None),
        (b"17e11", None),
    ],
)
def test_audit_time_header(header, expected):
    assert parse_audit_time_header(header) == expected
    assert AUDIT_TIME_HEADER == "kaudit-time"


def test_topic_statuses_withhold_a_topic_whose_end_offset_is_unknown():
    positions = {("a", 0): 10, ("a", 1): 4, ("b", 0): 7}
    ends = {("a", 0): 12, ("b", 0): 7}  # a/1's broker did not answer
    by_topic, withheld = topic_statuses(positions, ends, {("a", 0): 111, ("b", 0): 222})
    assert withheld == ["a"], "a status for `a` would claim partition 1 caught up"
    assert by_topic == {"b": [PartitionStatus(0, 7, 7, 0, 222)]}


def test_topic_statuses_never_report_an_end_below_the_position():
    by_topic, withheld = topic_statuses({("a", 0): 10}, {("a", 0): 8}, {})
    assert withheld == [] and by_topic == {"a": [PartitionStatus(0, 10, 10, 0, None)]}


@given(
    st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), st.integers(0, 1000), max_size=12),
    st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 3)), st.integers(0, 1000), max_size=12),
)
def test_topic_statuses_report_a_topic_only_when_every_partition_end_is_known(positions, ends):
    by_topic, withheld = topic_statuses(positions, ends, {})
    topics = {topic for topic, _ in positions}
    assert set(by_topic) | set(withheld) == topics and not set(by_topic) & set(withheld)
    for topic in withheld:
        assert any((topic, p) not in ends for t, p in positions if t == topic)
    for topic, statuses in by_topic.items():
        assert sorted(s.partition for s in statuses) == sorted(p for t, p in positions if t == topic)
        for s in statuses:
            assert (
                s.end_offset == max(ends[(topic, s.partition)], s.position) and s.lag == s.end_offset - s.position >= 0
            )
