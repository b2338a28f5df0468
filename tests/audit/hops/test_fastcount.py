"""The counter's native batch loop against its pure-Python loop: the same groups, tally and positions
for any batch, and a fallback whenever the native part is missing, refused or turned off."""

from __future__ import annotations

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    Message,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS
from audit.hops import fastcount
from audit.hops.counter import ClusterCounter, CounterOptions, PartitionProgress

NOW_MS = 1_800_000_000_000
WINDOW_MS = 600_000

needs_native = pytest.mark.skipif(fastcount.native_count is None, reason="the native counter loop is not built here")


def test_the_native_loop_is_built_and_fits_the_installed_confluent_kafka(monkeypatch):
    """`make setup` builds it; a failed build or a layout check that refuses it would show here."""
    if fastcount.PURE_PYTHON_ENV in __import__("os").environ:
        pytest.skip(f"{fastcount.PURE_PYTHON_ENV} is set")
    assert fastcount.native_count is not None


def counter(native: bool, *, by_partition: bool = True) -> ClusterCounter:
    options = CounterOptions(cluster="dc1", by_partition=by_partition)
    instance = ClusterCounter({}, options, lambda topic: True, host="h")
    instance.native = native
    return instance


def outcome(native: bool, batches: list[list], partitions: set[tuple[str, int]], *, by_partition: bool = True):
    """Everything a counter keeps after the batches: the groups of each batch, tally, positions, count."""
    instance = counter(native, by_partition=by_partition)
    instance.progress = {key: PartitionProgress(position=0, committed=0) for key in partitions}
    groups_seen = []
    add_groups = instance._add_groups

    def spy(groups):
        groups_seen.append({key: [*value[:3], dict(value[3]), *value[4:]] for key, value in groups.items()})
        return add_groups(groups)

    instance._add_groups = spy  # type: ignore[method-assign]
    for batch in batches:
        instance.count_batch(batch, now_ms=NOW_MS)
    positions = {key: (p.position, p.last_audit_time_ms) for key, p in instance.progress.items()}
    return groups_seen, instance.tally.drain(), positions, instance.stats.counted


times = st.one_of(
    st.integers(NOW_MS - 8 * WINDOW_MS, NOW_MS + WINDOW_MS),  # recent, a few in the future
    st.integers(-5, MAX_AUDIT_TIME_MS + 5),  # anything, around both ends of the usable range
    st.sampled_from([0, 1, MAX_AUDIT_TIME_MS, MAX_AUDIT_TIME_MS + 1, NOW_MS, NOW_MS - 1]),
)
headers = st.none() | st.lists(
    st.tuples(
        st.sampled_from([AUDIT_TIME_HEADER, "other"]),
        st.none() | st.sampled_from([b"", b"x1", str(NOW_MS - 5 * WINDOW_MS).encode(), b"17"]),
    ),
    max_size=2,
)
message_fields = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["a", "b", "orders", "ü-topic", "日本"]),
        "partition": st.integers(0, 3),
        "timestamp": st.tuples(
            st.sampled_from([TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE]), times
        ),
        "key": st.none() | st.binary(max_size=5),
        "value": st.none() | st.binary(max_size=40),
        "headers": headers,
        "eof": st.integers(0, 30).map(lambda n: n == 0),
    }
)


def build(batches_fields: list[list[dict]]) -> tuple[list[list], set[tuple[str, int]]]:
    """Messages as a consumer hands them over: offsets rising per partition across the batches."""
    next_offset: dict[tuple[str, int], int] = {}
    batches = []
    for fields_list in batches_fields:
        batch = []
        for fields in fields_list:
            fields = dict(fields)
            eof = fields.pop("eof")
            key = (fields["topic"], fields["partition"])
            offset = next_offset.get(key, 0)
            next_offset[key] = offset + 1
            error = KafkaError(KafkaError._PARTITION_EOF) if eof else None
            batch.append(Message(offset=offset, error=error, **fields))
        batches.append(batch)
    return batches, set(next_offset)


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(message_fields, max_size=60), min_size=1, max_size=4), st.booleans())
def test_native_and_python_loops_give_the_same_tally_positions_and_counts(batches_fields, by_partition):
    batches, partitions = build(batches_fields)
    assert outcome(True, batches, partitions, by_partition=by_partition) == outcome(
        False, batches, partitions, by_partition=by_partition
    )


@needs_native
def test_a_large_batch_over_many_windows_and_partitions_is_the_same_both_ways():
    batches, partitions = build(
        [
            [
                {
                    "topic": f"t{i % 3}",
                    "partition": i % 7,
                    "timestamp": (TIMESTAMP_CREATE_TIME, NOW_MS - (i * 7919) % (50 * WINDOW_MS)),
                    "key": b"%d" % i if i % 5 else None,
                    "value": b"v" * (i % 100),
                    "headers": None,
                    "eof": False,
                }
                for i in range(20_000)
            ]
        ]
    )
    native, python = outcome(True, batches, partitions), outcome(False, batches, partitions)
    assert native == python
    _groups, tallies, _positions, counted = native
    assert counted == 20_000 and len(tallies) >= 3 * 50


class Lookalike:
    """Not a confluent_kafka.Message: the native loop hands it to Python untouched."""

    def __init__(self, message):
        self._message = message

    def __getattr__(self, name):
        return getattr(self._message, name)

    def __len__(self):
        return len(self._message)


@needs_native
def test_objects_of_another_type_are_counted_by_the_python_loop():
    (batch,), partitions = build(
        [[{"topic": "t", "partition": 0, "timestamp": (TIMESTAMP_CREATE_TIME, NOW_MS - 10), "key": b"k",
           "value": b"vv", "headers": None, "eof": False}] * 3]
    )  # fmt: skip
    mixed = [batch[0], Lookalike(batch[1]), batch[2]]
    assert outcome(True, [mixed], partitions) == outcome(False, [batch], partitions)


def test_a_fatal_consumer_error_raises_with_either_loop():
    fatal = Message(topic="t", partition=0, offset=0, error=KafkaError(KafkaError._FATAL, fatal=True))
    for native in (True, False):
        with pytest.raises(Exception, match="fatal consumer error"):
            counter(native).count_batch([fatal], now_ms=NOW_MS)


def test_the_fallback_is_used_when_turned_off_missing_or_refused(monkeypatch):
    monkeypatch.setenv(fastcount.PURE_PYTHON_ENV, "1")
    assert fastcount._load() is None
    monkeypatch.delenv(fastcount.PURE_PYTHON_ENV)
    if fastcount.native_count is None:
        pytest.skip("the native counter loop is not built here")
    from audit.hops import _fastcount  # type: ignore[attr-defined]

    monkeypatch.setattr(_fastcount, "read", lambda message: ("a", "different", "layout"))
    assert fastcount._load() is None, "a struct that reads other values than the Python API must be refused"
    monkeypatch.undo()
    assert fastcount._load() is not None
