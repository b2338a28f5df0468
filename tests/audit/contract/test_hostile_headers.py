"""Hostile message headers and timestamps: the `kaudit-time` header, the `kaudit-path` provenance
header and the audit time chosen from them never raise, and out-of-range times are flagged as no
usable timestamp instead of naming a window no record can hold (issue 8, part 2)."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.audit_time import audit_time, header_value, parse_audit_time_header
from audit.contract.record import (
    AUDIT_TIME_HEADER,
    MAX_AUDIT_TIME_MS,
    PROVENANCE_HEADER,
    count_record,
    encode,
    parse,
)
from audit.contract.windows import window_start
from audit.hops.replicator.hop import provenance

NOW_MS = 1_763_800_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"1700000000000", 1_700_000_000_000),
        (str(MAX_AUDIT_TIME_MS).encode(), MAX_AUDIT_TIME_MS),
        (str(MAX_AUDIT_TIME_MS + 1).encode(), None),  # past 9999-12-31
        (b"9" * 20, None),
        (b"9" * 10_000, None),  # huge header
        (b"0", None),
        (b"-1700000000000", None),
        (b"+1700000000000", None),
        (b" 1700000000000", None),
        (b"1700000000000\n", None),
        (b"1.7e12", None),
        (b"\x00" * 8, None),
        (b"\xff\xfe", None),
        ("1700000000000", None),  # a str is not what a consumer hands over
        ("\u0661\u0667\u0660\u0660", None),  # arabic-indic digits pass str.isdigit()
        (1700000000000, None),
        (b"", None),
        (None, None),
    ],
)
def test_audit_time_header_accepts_only_ascii_epoch_ms_in_range(value, expected):
    assert parse_audit_time_header(value) == expected


@pytest.mark.parametrize(
    ("timestamp", "headers", "expected"),
    [
        ((TIMESTAMP_CREATE_TIME, 1_700_000_000_000), None, (1_700_000_000_000, True)),
        ((TIMESTAMP_CREATE_TIME, 1), None, (1, True)),  # 1970 is far in the past but a real time
        # Past 9999-12-31: no window record could be written for it; counted now, flagged.
        ((TIMESTAMP_CREATE_TIME, MAX_AUDIT_TIME_MS + 1), None, (NOW_MS, False)),
        ((TIMESTAMP_CREATE_TIME, 2**63 - 1), [(AUDIT_TIME_HEADER, b"1700000000000")], (1_700_000_000_000, True)),
        ((TIMESTAMP_LOG_APPEND_TIME, 2**63 - 1), [(AUDIT_TIME_HEADER, b"junk")], (NOW_MS, False)),
        ((TIMESTAMP_LOG_APPEND_TIME, 1_763_000_000_000), [(AUDIT_TIME_HEADER, b"junk")], (1_763_000_000_000, False)),
        (
            (TIMESTAMP_LOG_APPEND_TIME, 1_763_000_000_000),
            [(AUDIT_TIME_HEADER, b"1700000000000")],
            (1_700_000_000_000, True),
        ),
        ((TIMESTAMP_NOT_AVAILABLE, -1), [(AUDIT_TIME_HEADER, None)], (NOW_MS, False)),
        (
            (TIMESTAMP_NOT_AVAILABLE, -1),
            [(AUDIT_TIME_HEADER, b"1"), (AUDIT_TIME_HEADER, b"x")],
            (NOW_MS, False),
        ),  # last wins
        ((TIMESTAMP_NOT_AVAILABLE, -1), [("kaudit-time\x00", b"1700000000000")], (NOW_MS, False)),
    ],
)
def test_audit_time_table(timestamp, headers, expected):
    assert audit_time(timestamp, headers, NOW_MS) == expected


@settings(max_examples=500)
@given(
    st.sampled_from([TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE]),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.lists(
        st.tuples(
            st.sampled_from([AUDIT_TIME_HEADER, PROVENANCE_HEADER]) | st.text(max_size=12),
            st.none() | st.binary(max_size=40),
        ),
        max_size=5,
    ),
)
def test_any_timestamp_and_headers_give_a_time_a_count_record_can_carry(kind, value, headers):
    when, usable = audit_time((kind, value), headers, NOW_MS)
    assert 0 < when <= MAX_AUDIT_TIME_MS
    record = count_record(
        record_id="c:1",
        tier="dc1",
        cluster="dc1",
        topic="t",
        window_start_ms=window_start(when),
        count=1,
        no_timestamp=0 if usable else 1,
    )
    assert parse(encode(record))[1] is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"dc1,aggregate", ["dc1", "aggregate"]),
        (b"", []),
        (None, []),
        (b",,,", []),
        (b"dc1,\xff\xfe,aggregate", ["dc1", "aggregate"]),  # one garbled name must not hide the others
        (b"dc1\x00,aggregate", ["dc1\x00", "aggregate"]),  # never equal to a cluster name: harmless
        (b"dc1," * 50_000, ["dc1"] * 50_000),  # a huge header
        ("dc1", []),  # a str is not what a consumer hands over
    ],
)
def test_provenance_header_table(value, expected):
    assert provenance([(PROVENANCE_HEADER, value)]) == expected


@settings(max_examples=500)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([PROVENANCE_HEADER, AUDIT_TIME_HEADER]) | st.text(max_size=8),
            st.none() | st.binary(max_size=60),
        ),
        max_size=6,
    )
)
def test_provenance_never_raises_and_keeps_every_clean_name(headers):
    path = provenance(headers)
    assert all(isinstance(name, str) and name for name in path)
    last = header_value(headers, PROVENANCE_HEADER)
    if last:
        clean = [part.decode() for part in last.split(b",") if part and part.isascii()]
        assert path == clean
