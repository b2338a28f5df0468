"""The count record's digest_by_partition: round trips, and every malformed shape refused with a reason
naming the field; a record of schema version 1, without it, stays valid."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.record import SCHEMA_VERSION, Kind, decode, encode, parse, to_json, validate
from tests.audit.contract.test_record import count_records, valid_json

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def digested_records(draw):
    record = draw(count_records())
    if not record.by_partition:
        return record
    digests = {partition: draw(INT64) for partition in record.by_partition}
    return dataclasses.replace(record, digest_by_partition=digests)


@given(digested_records())
def test_a_record_with_digests_round_trips(record):
    assert decode(encode(record)) == record
    assert ("digest_by_partition" in to_json(record)) == (record.digest_by_partition is not None)


def with_digests() -> dict:
    return valid_json() | {"digest_by_partition": {"0": -(2**63), "2": 2**63 - 1}}


def test_digests_are_read_by_partition_and_written_beside_by_partition():
    record, reason = parse(json.dumps(with_digests()))
    assert reason is None and record.digest_by_partition == {0: -(2**63), 2: 2**63 - 1}
    text = encode(record).decode()
    assert (
        text.index('"count"')
        < text.index('"digest_by_partition":{"0":-9223372036854775808,"2"')
        < text.index('"emitted_at"')
    )
    assert SCHEMA_VERSION == 2 and record.schema_version == 2


def test_a_version_1_record_without_digests_stays_valid():
    record, reason = parse(json.dumps(valid_json() | {"schema_version": 1}))
    assert reason is None and record.schema_version == 1 and record.digest_by_partition is None


@pytest.mark.parametrize(
    ("digests", "reason"),
    [
        ({"0": 1}, "digest_by_partition: partitions [0] are not by_partition's [0, 2]"),
        ({"0": 1, "1": 2, "2": 3}, "digest_by_partition: partitions [0, 1, 2] are not by_partition's [0, 2]"),
        ({"0": 1, "2": 2**63}, "digest_by_partition[2]: 9223372036854775808 is not a signed 64-bit integer"),
        ({"0": 1, "2": -(2**63) - 1}, "digest_by_partition[2]: -9223372036854775809 is not a signed 64-bit"),
        ({"0": 1, "2": "7"}, "digest_by_partition.2: '7' is not an integer"),
        ({"0": 1, "2": 7.0}, "digest_by_partition.2: 7.0 is not an integer"),
        ({"0": 1, "2": True}, "digest_by_partition.2: True is a boolean"),
        ({"x": 1}, "digest_by_partition: key 'x' is not a partition number"),
        ({"-1": 1}, "digest_by_partition: key '-1' is not a partition number"),
        ({"4294967296": 1}, "digest_by_partition: key '4294967296' is over the largest partition number"),
        ([1, 2], "digest_by_partition: [1, 2] is not an object"),
        ("abc", "digest_by_partition: 'abc' is not an object"),
    ],
)
def test_each_malformed_digest_is_refused_with_a_reason_naming_the_field(digests, reason):
    record, why = parse(json.dumps(valid_json() | {"digest_by_partition": digests}))
    assert record is None and why is not None and why.startswith(reason), why


def test_digests_without_partition_counts_are_refused():
    data = with_digests()
    data.pop("by_partition")
    record, why = parse(json.dumps(data))
    assert record is None and why == "digest_by_partition: present without by_partition"


def test_a_null_digest_field_is_no_digest():
    record, why = parse(json.dumps(valid_json() | {"digest_by_partition": None}))
    assert why is None and record.digest_by_partition is None


def test_only_count_records_carry_digests():
    record, _ = parse(json.dumps(with_digests()))
    status = dataclasses.replace(record, kind=Kind.STATUS)
    assert validate(status) == "digest_by_partition: only a count record carries one"
