"""Window bookkeeping shared by every counting point: per (topic, window) deltas since the last drain.

A pure object with no Kafka client inside: the audited producer feeds it from delivery callbacks,
the cluster counter from consumed batches, and both drain it into count records on each flush.
Each partition's content digest (audit.contract.digest) is kept beside its count while every message added
came with its hash; one added without makes the window's digest unknown until the drain. Latencies are kept as a histogram of whole milliseconds and turned into percentiles by a DDSketch
(mergeable, 1 % relative accuracy) at drain. Each latency is first rounded down to the first whole
millisecond of its sketch bucket (`latency_floor`): the sketch cannot tell the values of one bucket
apart, so the percentiles are exactly those of the unrounded latencies, while a window's histogram
holds at most a few hundred entries however many messages it counts (memory bounded by windows,
not messages).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from dataclasses import dataclass, field

from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

from audit.contract.digest import merge
from audit.contract.windows import MS_PER_MINUTE, window_start_ms

SKETCH_RELATIVE_ACCURACY = 0.01
_LARGEST_LATENCY_MS = 2**53  # far beyond any latency (now - audit time): 285,000 years


def _latency_floors(relative_accuracy: float) -> tuple[int, ...]:
    """The first whole millisecond of each sketch bucket that holds one, from 1 ms up: rising, and
    every latency L >= 1 is in the bucket of the largest floor <= L (the sketch's key is monotone)."""
    mapping = LogarithmicMapping(relative_accuracy)
    floors = [1]
    while floors[-1] < _LARGEST_LATENCY_MS:
        key = mapping.key(floors[-1])
        # The next bucket starts just above gamma ** key; the float guess is corrected by the mapping itself.
        guess = max(floors[-1] + 1, math.floor(mapping.gamma**key))
        while guess - 1 > floors[-1] and mapping.key(guess - 1) > key:
            guess -= 1
        while mapping.key(guess) <= key:
            guess += 1
        floors.append(guess)
    return tuple(floors)


LATENCY_FLOORS = _latency_floors(SKETCH_RELATIVE_ACCURACY)


def latency_floor_values() -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The floors and, for each, the value the sketch reports for its bucket: the native plugin's table
    (native/build.py writes it into C), so its percentiles are this module's."""
    mapping = DDSketch(SKETCH_RELATIVE_ACCURACY)._mapping
    return LATENCY_FLOORS, tuple(mapping.value(mapping.key(floor)) for floor in LATENCY_FLOORS)


def latency_floor(latency_ms: int) -> int:
    """`latency_ms` rounded down to the first whole millisecond of its sketch bucket (0 stays 0)."""
    if latency_ms <= 0:
        return 0
    return LATENCY_FLOORS[bisect_right(LATENCY_FLOORS, latency_ms) - 1]


@dataclass(slots=True)
class WindowTally:
    """What one (topic, window) has accumulated since the last drain."""

    count: int = 0
    bytes: int = 0
    send_failed: int = 0
    no_timestamp: int = 0
    by_partition: dict[int, int] = field(default_factory=dict)
    latency_histogram: dict[int, int] = field(default_factory=dict)  # latency_floor(ms) -> messages
    digest_by_partition: dict[int, int] = field(default_factory=dict)
    all_hashed: bool = True  # every message counted came with its hash

    def add_digest(self, partition: int | None, digest: int | None) -> None:
        """Merge the digest (or hash) of messages just counted on `partition`; None: they were not hashed."""
        if digest is None:
            self.all_hashed = False
        elif partition is not None:
            self.digest_by_partition[partition] = merge(self.digest_by_partition.get(partition, 0), digest)

    def digests(self) -> dict[int, int] | None:
        """The content digest of each partition counted, or None when a message counted was not hashed (or no
        partition was counted): the count record's digest_by_partition."""
        if not (self.all_hashed and self.by_partition):
            return None
        return {partition: self.digest_by_partition.get(partition, 0) for partition in self.by_partition}

    def latency_sketch(self) -> DDSketch | None:
        if not self.latency_histogram:
            return None
        sketch = DDSketch(SKETCH_RELATIVE_ACCURACY)
        for latency, weight in self.latency_histogram.items():
            sketch.add(latency, weight)
        return sketch

    def latency_ms(self) -> dict[str, float] | None:
        """p50/p95/p99/max of the latencies added, or None when none were."""
        sketch = self.latency_sketch()
        if sketch is None:
            return None
        quantiles = {"p50": 0.50, "p95": 0.95, "p99": 0.99, "max": 1.0}
        # A sketch with at least one value answers every quantile.
        return {name: float(sketch.get_quantile_value(q) or 0.0) for name, q in quantiles.items()}

    @property
    def empty(self) -> bool:
        return not (self.count or self.send_failed)


class Tally:
    """Thread-safe accumulator of per-(topic, window) deltas; `drain()` hands them over and resets.

    It holds only what was added since the last drain, which every owner calls on each flush (and the counter on
    each rewind): one WindowTally per (topic, window) touched since, each with at most one count per partition
    and one histogram entry per sketch bucket (len(LATENCY_FLOORS), under 1,700), however long it runs."""

    def __init__(self, window_minutes: int) -> None:
        self.window_minutes = window_minutes
        self._window_ms = window_minutes * MS_PER_MINUTE
        self._windows: dict[tuple[str, int], WindowTally] = {}
        self._lock = threading.Lock()

    def _window(self, topic: str, audit_time_ms: int) -> WindowTally:
        key = (topic, window_start_ms(audit_time_ms, self._window_ms))
        tally = self._windows.get(key)
        if tally is None:
            tally = self._windows[key] = WindowTally()
        return tally

    def add(
        self,
        topic: str,
        audit_time_ms: int,
        size_bytes: int,
        *,
        partition: int | None = None,
        latency_ms: float | None = None,
        usable_time: bool = True,
        message_hash: int | None = None,
    ) -> None:
        """Count one message delivered (producer) or seen (cluster, lake), with its content hash when known."""
        key = (topic, window_start_ms(audit_time_ms, self._window_ms))
        with self._lock:
            tally = self._windows.get(key)
            if tally is None:
                tally = self._windows[key] = WindowTally()
            tally.count += 1
            tally.bytes += size_bytes
            if not usable_time:
                tally.no_timestamp += 1
            if partition is not None:
                tally.by_partition[partition] = tally.by_partition.get(partition, 0) + 1
            tally.add_digest(partition, message_hash)
            if latency_ms is not None:
                histogram = tally.latency_histogram
                bucket = latency_floor(int(latency_ms))
                histogram[bucket] = histogram.get(bucket, 0) + 1

    def add_many(
        self,
        topic: str,
        window_start_ms: int,
        count: int,
        size_bytes: int,
        *,
        partition: int | None = None,
        no_timestamp: int = 0,
        latencies_ms: dict[int, int] | None = None,
        digest: int | None = None,
    ) -> None:
        """Count `count` messages of one already-bucketed window at once (the counter's hot path).
        `latencies_ms` maps latencies already rounded by `latency_floor` to their number of messages; `digest`
        is the content digest of the `count` messages, None when they were not all hashed."""
        with self._lock:
            key = (topic, window_start_ms)
            tally = self._windows.get(key)
            if tally is None:
                tally = self._windows[key] = WindowTally()
            tally.count += count
            tally.bytes += size_bytes
            tally.no_timestamp += no_timestamp
            if partition is not None:
                tally.by_partition[partition] = tally.by_partition.get(partition, 0) + count
            tally.add_digest(partition, digest)
            if latencies_ms:
                histogram = tally.latency_histogram
                for latency, count_ in latencies_ms.items():
                    histogram[latency] = histogram.get(latency, 0) + count_

    def fail(self, topic: str, audit_time_ms: int) -> None:
        """Count one message the producer could not deliver."""
        with self._lock:
            self._window(topic, audit_time_ms).send_failed += 1

    def drain(self) -> dict[tuple[str, int], WindowTally]:
        """Everything accumulated since the last drain, keyed by (topic, window_start_ms)."""
        with self._lock:
            drained, self._windows = self._windows, {}
        return {key: tally for key, tally in drained.items() if not tally.empty}

    def __len__(self) -> int:
        with self._lock:
            return len(self._windows)
