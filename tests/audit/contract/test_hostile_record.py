"""Hostile audit records: every class of bad input is refused with a reason naming the field, and
`parse` never raises, whatever it is handed (issue 8, part 2)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.contract.record import MAX_RECORD_BYTES, PartitionStatus, count_record, encode, parse, status_record, to_json

WINDOW_START_MS = 1_700_000_400_000


def valid_count() -> dict:
    return to_json(
        count_record(
            record_id="p-1:1",
            tier="producer",
            cluster="dc1",
            topic="orders",
            window_start_ms=WINDOW_START_MS,
            count=3,
            bytes=30,
            by_partition={0: 1, 2: 2},
            latency_ms={"p50": 1, "p95": 2, "p99": 3, "max": 4},
            emitted_at_ms=1_700_000_500_000,
        )
    )


def valid_status() -> dict:
    return to_json(
        status_record(
            record_id="c-1:1",
            tier="dc1",
            cluster="dc1",
            topic="orders",
            partitions=[PartitionStatus(0, 5, 7, 2, 1_700_000_000_000)],
            watermark_ms=1_700_000_000_000,
            emitted_at_ms=1_700_000_500_000,
        )
    )


def with_field(base: dict, path: str, value) -> str:
    data = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return json.dumps(data)


def test_the_base_records_are_valid():
    assert parse(json.dumps(valid_count()))[1] is None
    assert parse(json.dumps(valid_status()))[1] is None


# (what, payload, the reason starts with)
CASES = [
    # unicode and control characters in names
    ("newline after topic", with_field(valid_count(), "topic", "orders\n"), "topic:"),
    ("NUL in topic", with_field(valid_count(), "topic", "ord\x00ers"), "topic:"),
    ("RTL override in topic", with_field(valid_count(), "topic", "orders\u202e"), "topic:"),
    ("cyrillic o in topic", with_field(valid_count(), "topic", "\u043erders"), "topic:"),
    ("topic of 250 chars", with_field(valid_count(), "topic", "t" * 250), "topic:"),
    ("topic '..'", with_field(valid_count(), "topic", ".."), "topic:"),
    ("newline after cluster", with_field(valid_count(), "cluster", "dc1\n"), "cluster:"),
    ("emoji tier", with_field(valid_count(), "tier", "dc1\U0001f525"), "tier:"),
    ("NUL in record_id", with_field(valid_count(), "record_id", "p-1\x00:1"), "record_id:"),
    ("escape in record_id", with_field(valid_count(), "record_id", "p-1\x1b[2J:1"), "record_id:"),
    ("record_id of 201 chars", with_field(valid_count(), "record_id", "r" * 201), "record_id:"),
    # wrong types
    ("count as a string", with_field(valid_count(), "count", "3"), "count:"),
    ("count as true", with_field(valid_count(), "count", True), "count:"),
    ("count as a float", with_field(valid_count(), "count", 3.0), "count:"),
    ("topic as a list", with_field(valid_count(), "topic", ["orders"]), "topic:"),
    ("kind as a number", with_field(valid_count(), "kind", 1), "kind:"),
    ("window_minutes as a string", with_field(valid_count(), "window_minutes", "10"), "window_minutes:"),
    ("by_partition as a list", with_field(valid_count(), "by_partition", [1, 2]), "by_partition:"),
    ("latency as a number", with_field(valid_count(), "latency_ms", 5), "latency_ms:"),
    ("partitions as an object", with_field(valid_status(), "partitions", {"0": 1}), "partitions:"),
    ("a partition as a number", with_field(valid_status(), "partitions.0", 7), "partitions[0]:"),
    ("stalled as a string", with_field(valid_status(), "stalled", "yes"), "stalled:"),
    # NaN, Infinity and numbers out of range
    (
        "count NaN",
        json.dumps(valid_count()).replace('"count":3', '"count":NaN').replace('"count": 3', '"count": NaN'),
        "count:",
    ),
    ("count Infinity", with_field(valid_count(), "count", math.inf), "count:"),
    ("latency NaN", with_field(valid_count(), "latency_ms.p50", math.nan), "latency_ms:"),
    ("latency -Infinity", with_field(valid_count(), "latency_ms.p50", -math.inf), "latency_ms:"),
    ("latency 10**400", with_field(valid_count(), "latency_ms.p99", 10**400), "latency_ms.p99:"),
    ("count over 10**15", with_field(valid_count(), "count", 10**16), "count:"),
    ("negative bytes", with_field(valid_count(), "bytes", -1), "bytes:"),
    ("partition past int32", with_field(valid_status(), "partitions.0.partition", 2**31), "partitions[0].partition:"),
    (
        "offset past int64",
        json.dumps(
            {**valid_status(), "partitions": [{"partition": 0, "position": 2**63, "end_offset": 2**63, "lag": 0}]}
        ),
        "partitions[0].position:",
    ),
    ("by_partition key past int32", with_field(valid_count(), "by_partition", {"4294967296": 3}), "by_partition:"),
    ("by_partition key in arabic digits", with_field(valid_count(), "by_partition", {"\u0661": 3}), "by_partition:"),
    # timestamps far in the past or the future
    ("window in year 1", with_field(valid_count(), "window_start", "0001-01-01T00:00:00Z"), "window_start:"),
    ("window before the epoch", with_field(valid_count(), "window_start", "1969-12-31T23:50:00Z"), "window_start:"),
    ("window in year 10000", with_field(valid_count(), "window_start", "10000-01-01T00:00:00Z"), "window_start:"),
    ("window not UTC", with_field(valid_count(), "window_start", "2023-11-14T22:20:00+01:00"), "window_start:"),
    ("window without a zone", with_field(valid_count(), "window_start", "2023-11-14T22:20:00"), "window_start:"),
    ("window as epoch ms", with_field(valid_count(), "window_start", WINDOW_START_MS), "window_start:"),
    ("emitted_at in year 1", with_field(valid_count(), "emitted_at", "0001-01-01T00:00:00.000Z"), "emitted_at:"),
    ("watermark garbage", with_field(valid_status(), "watermark", "tomorrow"), "watermark:"),
    (
        "last_audit_time in year 1",
        with_field(valid_status(), "partitions.0.last_audit_time", "0001-01-01T00:00:00Z"),
        "partitions[0].last_audit_time:",
    ),
    # windows of the wrong size
    ("window of 7 minutes", with_field(valid_count(), "window_minutes", 7), "window_minutes:"),
    ("window of 0 minutes", with_field(valid_count(), "window_minutes", 0), "window_minutes:"),
    ("window of -10 minutes", with_field(valid_count(), "window_minutes", -10), "window_minutes:"),
    ("window of two days", with_field(valid_count(), "window_minutes", 2880), "window_minutes:"),
    ("window of 10**300 minutes", with_field(valid_count(), "window_minutes", 10**300), "window_minutes:"),
    ("window start not aligned to the size", with_field(valid_count(), "window_minutes", 60), "window_start:"),
    # duplicate keys: which value would count?
    ("count given twice", '{"count": 1000000, ' + json.dumps(valid_count())[1:], "count:"),
    ("topic given twice", json.dumps(valid_count())[:-1] + ', "topic": "payments"}', "topic:"),
    (
        "latency key given twice",
        with_field(valid_count(), "latency_ms", {}).replace(
            '"latency_ms": {}', '"latency_ms": {"p50": 1, "p95": 2, "p99": 3, "max": 4, "p50": 9}'
        ),
        "p50:",
    ),
    # shapes
    ("deeply nested JSON", '{"topic": ' + "[" * 100_000 + "]" * 100_000 + "}", "record:"),
    ("nested 900 deep in a field", with_field(valid_count(), "tier", json.loads("[" * 900 + "]" * 900)), "tier:"),
    ("a JSON array", "[1, 2, 3]", "record:"),
    ("a JSON string", '"count"', "record:"),
    ("a 5000-digit number", '{"count": ' + "9" * 5000 + "}", "record:"),
    ("oversized record", json.dumps({**valid_count(), "pad": "x" * MAX_RECORD_BYTES}), "record:"),
    ("UTF-16", json.dumps(valid_count()).encode("utf-16"), "record:"),
    ("lone surrogate escape", with_field(valid_count(), "topic", "\ud800"), "topic:"),
    ("truncated", json.dumps(valid_count())[:-5], "record:"),
    ("empty", b"", "record:"),
    ("None", None, "record:"),
]


@pytest.mark.parametrize(("what", "payload", "reason"), CASES, ids=[case[0] for case in CASES])
def test_each_hostile_record_is_refused_with_a_reason_naming_the_field(what, payload, reason):
    record, why = parse(payload)
    assert record is None, what
    assert why.startswith(reason), (what, why)
    assert len(why) < 300, "a reason is a line, not a dump of the payload"


def test_what_the_contract_allows_is_still_accepted():
    """The guards do not refuse the edges that are legal: the epoch, year 9999, unicode in free text."""
    for payload in (
        with_field(valid_count(), "window_start", "1970-01-01T00:00:00Z"),
        with_field(valid_count(), "window_start", "9999-12-31T23:50:00Z"),
        with_field(valid_count(), "service", "z\u00e4hler \U0001f525 \x00"),  # free text, not a name
        with_field(valid_count(), "by_partition", {"2147483647": 3}),
        with_field(valid_count(), "unknown_future_field", {"deep": [1, {"x": None}]}),
    ):
        record, why = parse(payload)
        assert why is None and record is not None, why


# -- properties ----------------------------------------------------------------------------------

hostile_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=("Cc", "Cf", "Zs", "Zl", "Zp", "Lo", "Nd", "So"))
    | st.sampled_from("\n\r\t\x00\x1b\u202e\ufeff"),
    min_size=1,
    max_size=12,
).filter(lambda text: any(not (ch.isascii() and (ch.isalnum() or ch in "._-")) for ch in text))  # one illegal character
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=20)
    | hostile_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["topic", "tier", "cluster", "record_id"]), st.text(max_size=4), hostile_text, st.text(max_size=4)
)
def test_a_name_with_any_control_or_foreign_character_is_refused_naming_its_field(field, before, middle, after):
    value = before + middle + after
    record, why = parse(with_field(valid_count(), field, value))
    legal_record_id = field == "record_id" and not any(ch < " " or ch == "\x7f" for ch in value) and len(value) <= 200
    if legal_record_id:
        return  # record ids are opaque: any printable text is fine
    assert record is None and why.startswith(f"{field}:"), (value, why)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["count", "status"]),
    st.dictionaries(st.text(max_size=16), json_values, max_size=8),
    st.lists(st.tuples(st.text(max_size=16), json_values), max_size=4),
)
def test_parse_never_raises_on_any_json_shape_and_refusals_name_something(kind, overlay, duplicates):
    base = valid_count() if kind == "count" else valid_status()
    text = json.dumps({**base, **overlay}, allow_nan=True)
    for key, value in duplicates:  # append keys the object may already have
        text = text[:-1] + f", {json.dumps(key)}: {json.dumps(value)}" + "}"
    record, why = parse(text)
    assert (record is None) != (why is None)
    if why is not None:
        assert ":" in why and why.split(":")[0], why


@settings(max_examples=300)
@given(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([1, 5, 7, 10, 11, 60, 1440, 2880, 0, -10]))
def test_any_window_start_and_size_is_accepted_only_when_aligned_and_in_range(start_ms, minutes):
    from audit.contract.record import MAX_AUDIT_TIME_MS, iso
    from audit.contract.windows import MINUTES_PER_DAY

    data = valid_count()
    data["window_minutes"] = minutes
    try:
        data["window_start"] = iso(start_ms)
    except (OverflowError, ValueError):
        data["window_start"] = str(start_ms)
    record, why = parse(json.dumps(data))
    legal = (
        0 < minutes <= MINUTES_PER_DAY
        and MINUTES_PER_DAY % minutes == 0
        and 0 <= start_ms <= MAX_AUDIT_TIME_MS
        and start_ms % (minutes * 60_000) == 0
    )
    assert (record is not None) == legal, why
    if not legal:
        assert why.startswith(("window_start:", "window_minutes:")), why


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=2000))
def test_any_bytes_after_a_valid_prefix_never_raise(tail):
    payload = encode(count_record(record_id="a:1", tier="dc1", cluster="dc1", topic="t", window_start_ms=0, count=1))
    for candidate in (payload[:-1] + tail, tail + payload, payload[: len(payload) // 2] + tail):
        record, why = parse(candidate)
        assert (record is None) != (why is None)


@pytest.mark.parametrize(
    "key, starts",
    [
        ("count", "count: "),
        ("extra", "extra: "),
        (":", "duplicate key: ':'"),
        ("", "duplicate key: ''"),
        ("a:b", "duplicate key: 'a:b'"),
    ],
)
def test_a_duplicate_key_leads_the_reason_unless_it_is_empty_or_holds_a_colon(key, starts):
    text = json.dumps(valid_count())[:-1] + f", {json.dumps(key)}: 1, {json.dumps(key)}: 2" + "}"
    record, why = parse(text)
    assert record is None and why.startswith(starts) and why.split(":")[0], why
