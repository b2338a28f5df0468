"""Window bookkeeping: deltas per (topic, window), drained once."""

from __future__ import annotations

import threading

from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.tally import LATENCY_FLOORS, SKETCH_RELATIVE_ACCURACY, Tally, latency_floor

WINDOW_MS = 600_000


def test_counts_bytes_failures_and_partitions_land_in_their_windows():
    tally = Tally(10)
    tally.add("t", 5, 10, partition=0, latency_ms=3)
    tally.add("t", WINDOW_MS - 1, 20, partition=1, latency_ms=5)
    tally.add("t", WINDOW_MS, 1, usable_time=False)
    tally.fail("t", WINDOW_MS + 7)
    drained = tally.drain()
    first, second = drained[("t", 0)], drained[("t", WINDOW_MS)]
    assert (first.count, first.bytes, first.by_partition) == (2, 30, {0: 1, 1: 1})
    assert (second.count, second.no_timestamp, second.send_failed) == (1, 1, 1)
    assert first.latency_ms()["max"] >= 4.9 and second.latency_ms() is None
    assert tally.drain() == {}, "a drain hands deltas over once"


def test_latency_percentiles_are_within_one_percent():
    tally = Tally(10)
    for latency in range(1, 10_001):
        tally.add("t", 0, 1, latency_ms=latency)
    percentiles = tally.drain()[("t", 0)].latency_ms()
    for name, exact in (("p50", 5000), ("p95", 9500), ("p99", 9900), ("max", 10_000)):
        assert abs(percentiles[name] - exact) / exact <= 0.011, (name, percentiles[name])


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 10 * WINDOW_MS), st.integers(0, 1000)), max_size=200),
    st.lists(st.integers(0, 199), max_size=5),
)
def test_drains_at_any_moments_sum_to_the_whole(messages, cut_points):
    tally = Tally(10)
    total_count, total_bytes = 0, 0
    cuts = set(cut_points)
    for index, (topic, ts, size) in enumerate(messages):
        tally.add(topic, ts, size)
        if index in cuts:
            drained = tally.drain().values()
            total_count += sum(w.count for w in drained)
            total_bytes += sum(w.bytes for w in drained)
    drained = tally.drain().values()
    total_count += sum(w.count for w in drained)
    total_bytes += sum(w.bytes for w in drained)
    assert (total_count, total_bytes) == (len(messages), sum(size for _t, _ts, size in messages))


def test_concurrent_adds_and_drains_lose_nothing():
    tally = Tally(10)
    drained_counts = []
    stop = threading.Event()

    def drain_repeatedly():
        while not stop.is_set():
            drained_counts.append(sum(w.count for w in tally.drain().values()))

    drainer = threading.Thread(target=drain_repeatedly)
    drainer.start()
    adders = [threading.Thread(target=lambda: [tally.add("t", i, 1) for i in range(20_000)]) for _ in range(4)]
    for adder in adders:
        adder.start()
    for adder in adders:
        adder.join()
    stop.set()
    drainer.join()
    assert sum(drained_counts) + sum(w.count for w in tally.drain().values()) == 80_000


@given(st.lists(st.integers(0, 10**13), min_size=1, max_size=300))
def test_rounding_latencies_to_their_sketch_bucket_changes_no_percentile(latencies):
    """The histogram keeps latency_floor(ms); the sketch gives exactly the percentiles of the raw latencies."""
    tally = Tally(10)
    raw = DDSketch(SKETCH_RELATIVE_ACCURACY)
    for latency in latencies:
        tally.add("t", 0, 1, latency_ms=latency)
        raw.add(latency)
    expected = {
        name: float(raw.get_quantile_value(q)) for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
    }
    window = tally.drain()[("t", 0)]
    assert window.latency_ms() == expected
    assert len(window.latency_histogram) <= len(LATENCY_FLOORS) + 1


def test_latency_floors_start_each_sketch_bucket():
    mapping = LogarithmicMapping(SKETCH_RELATIVE_ACCURACY)
    assert LATENCY_FLOORS[0] == 1 and latency_floor(0) == 0 and latency_floor(-3) == 0
    for previous, floor in zip(LATENCY_FLOORS, LATENCY_FLOORS[1:]):
        assert mapping.key(floor) > mapping.key(previous) and mapping.key(floor - 1) == mapping.key(previous)
