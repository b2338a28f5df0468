"""The plugin's count records (native/plugin/record.c) against the contract (audit/contract/record.py): the
Python parser accepts each, and writes back the same JSON, keys in the same order; its digest_by_partition is each partition's
wrapping sum of the hashes delivered there, and is left out when the topic's digest is off; `aborted` and `unknown` are
written only when set."""

from __future__ import annotations

import ctypes
import json

import pytest

from audit.contract.digest import merge, message_hash
from audit.contract.record import encode, parse
from audit.io import plugin

START = 1_764_935_400_000
BIG = 2**63 - 1


def c_record(
    deliveries: list[tuple[int, int, int]],
    *,
    digest_on: bool = True,
    failed: int = 0,
    aborted: int = 0,
    unknown: bool = False,
) -> bytes:
    """The plugin's record of (partition, latency ms, message hash) deliveries."""
    n = len(deliveries)
    latencies = (ctypes.c_longlong * n)(*(latency for _, latency, _ in deliveries))
    partitions = (ctypes.c_int * n)(*(partition for partition, _, _ in deliveries))
    hashes = (ctypes.c_longlong * n)(*(h for _, _, h in deliveries)) if digest_on else None
    text = plugin.take_text(
        plugin.library().kaudit_sample_record(
            b"orders.v1", START, latencies, partitions, hashes, n, failed, aborted, int(unknown)
        )
    )
    assert text is not None
    return text.encode()


def same_json(a: bytes, b: bytes) -> bool:
    """The same JSON with the keys in the same order (strings may escape alike characters differently)."""
    first, second = json.loads(a), json.loads(b)
    return first == second and list(first) == list(second)


CASES = {
    "one partition": [(0, 5, message_hash(b"k", b"v")), (0, 0, message_hash(None, None))],
    "sparse partitions": [(p, p * 3, message_hash(b"%d" % p, b"")) for p in (0, 7, 2, 7, 300, 0)],
    "sums that wrap": [(1, 1, BIG), (1, 2, BIG), (1, 3, 2), (4, 1, -BIG - 1), (4, 9, -1)],
    "digests that cancel to 0": [(3, 1, 12345), (3, 1, -12345)],
}


@pytest.mark.parametrize("deliveries", CASES.values(), ids=CASES.keys())
def test_the_plugins_record_is_the_contracts(deliveries):
    text = c_record(deliveries, failed=2)
    record, why = parse(text)
    assert why is None, why
    assert same_json(encode(record), text)
    expected: dict[int, int] = {}
    for partition, _latency, h in deliveries:
        expected[partition] = merge(expected.get(partition, 0), h)
    assert record.digest_by_partition == expected
    assert record.by_partition is not None and set(record.by_partition) == set(expected)
    assert record.schema_version == 2 and record.count == len(deliveries) and record.send_failed == 2


def test_a_topic_whose_digest_is_off_gets_a_record_without_one():
    text = c_record(CASES["one partition"], digest_on=False)
    record, why = parse(text)
    assert why is None and record.digest_by_partition is None and record.by_partition == {0: 2}
    assert same_json(encode(record), text) and b"digest" not in text


def test_a_record_of_failed_sends_only_has_no_partitions_and_no_digest():
    text = c_record([], failed=3)
    record, why = parse(text)
    assert why is None and record.by_partition is None and record.digest_by_partition is None
    assert same_json(encode(record), text)


@pytest.mark.parametrize(
    ("deliveries", "aborted", "unknown"),
    [
        (CASES["sparse partitions"], 600, False),
        (CASES["one partition"], 0, True),
        (CASES["sums that wrap"], 3, True),
        ([], 25, False),  # a window whose every acknowledged message was aborted
        ([], 0, True),  # a window the tally dropped: count 0, unknown
    ],
)
def test_aborted_and_unknown_are_written_as_the_contract_writes_them(deliveries, aborted, unknown):
    text = c_record(deliveries, aborted=aborted, unknown=unknown)
    record, why = parse(text)
    assert why is None, why
    assert same_json(encode(record), text)
    assert (record.aborted, record.unknown, record.count) == (aborted, unknown, len(deliveries))
    assert (b'"aborted"' in text, b'"unknown"' in text) == (aborted != 0, unknown)
