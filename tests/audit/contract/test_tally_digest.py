"""The tally's content digests: per partition, the wrapping sum of the hashes added, as long as every message
counted in the window came with one; the counter's records carry them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from audit.contract.digest import digest_of, merge, message_hash
from audit.contract.tally import Tally
from audit.hops.counter.records import CounterRecords
from audit.hops.counter.state import CounterOptions

START = 1_700_000_400_000
shapes = st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=8))


@given(st.lists(st.tuples(st.integers(0, 3), shapes), max_size=40))
def test_each_partitions_digest_is_the_digest_of_its_messages(messages):
    tally = Tally(10)
    for partition, (key, value) in messages:
        tally.add("t", START, 1, partition=partition, message_hash=message_hash(key, value))
    drained = tally.drain()
    if not messages:
        assert drained == {}
        return
    expected = {p: digest_of(m for q, m in messages if q == p) for p in {p for p, _ in messages}}
    assert drained[("t", START)].digests() == expected


def test_one_message_without_a_hash_makes_the_windows_digest_unknown():
    tally = Tally(10)
    tally.add("t", START, 1, partition=0, message_hash=5)
    tally.add("t", START, 1, partition=1)
    tally.add("t", START + 600_000, 1, partition=0, message_hash=5)
    drained = tally.drain()
    assert drained[("t", START)].digests() is None
    assert drained[("t", START + 600_000)].digests() == {0: 5}


def test_add_many_merges_digests_and_none_is_unknown():
    tally = Tally(10)
    tally.add_many("t", START, 2, 10, partition=0, digest=2**63 - 1)
    tally.add_many("t", START, 1, 10, partition=0, digest=1)
    tally.add_many("u", START, 1, 10, partition=0, digest=None)
    tally.add_many("v", START, 1, 10, digest=3)  # no partition: no per-partition digest either
    drained = tally.drain()
    assert drained[("t", START)].digests() == {0: merge(2**63 - 1, 1)} == {0: -(2**63)}
    assert drained[("u", START)].digests() is None
    assert drained[("v", START)].digests() is None


def test_the_counters_count_records_carry_the_digests():
    tally = Tally(10)
    tally.add_many("t", START, 2, 10, partition=1, digest=-7)
    tally.add_many("u", START, 2, 10, partition=1, digest=None)
    records = CounterRecords(CounterOptions(cluster="dc1"), host="h").counts(tally.drain())
    assert [(r.topic, r.by_partition, r.digest_by_partition) for r in records] == [
        ("t", {1: 2}, {1: -7}),
        ("u", {1: 2}, None),
    ]
