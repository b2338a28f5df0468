"""Traffic from clients kafka-audit did not write, for the tests: transactional producers that commit
and abort (the way Kafka Streams and Flink exactly-once write), and plain ones. Each returns what a
`read_committed` consumer can read: the expected count per (topic, window start ms). And a steady
background producer for tests that kill things while traffic flows."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence

from confluent_kafka import Consumer, Producer

from audit.contract.windows import window_length_ms, window_start
from audit.io.clients import watermarks
from audit.io.transactions import abort_written

WINDOW_MINUTES = 10
BASE_MS = window_start(1_763_800_000_000, WINDOW_MINUTES)


def produce_transactions(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    batches: Sequence[tuple[int, bool]],
    window_minutes: int = WINDOW_MINUTES,
) -> Counter:
    """One transactional producer writes each (messages, commit?) batch as a transaction spread over
    every partition, committing or aborting it; the committed messages per (topic, window)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"outside-{uuid.uuid4().hex[:8]}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    expected: Counter = Counter()
    sequence = 0
    for messages, commit in batches:
        producer.begin_transaction()
        for _ in range(messages):
            ts = BASE_MS + (sequence * 7_919) % (3 * window_length_ms(window_minutes))
            producer.produce(
                topic, key=b"k%d" % sequence, value=b"v%d" % sequence, timestamp=ts, partition=sequence % partitions
            )
            if commit:
                expected[(topic, window_start(ts, window_minutes))] += 1
            sequence += 1
        if commit:
            producer.commit_transaction(30)
        else:
            abort_written(producer, 30)
    return expected


# Committed, aborted, committed, and an aborted batch last: the tail of every partition is an abort marker.
MIXED = ((40, True), (25, False), (30, True), (20, False))


class SteadyProducer:
    """Writes b"<prefix><sequence>" round-robin over `partitions` partitions of `topic`, about `rate` a
    second, from a thread until the block ends: idempotent (no duplicates at the source) and riding out
    a broker's absence (no delivery timeout). On exit it waits up to `flush_s` for the last acknowledgements."""

    def __init__(
        self, bootstrap: str, topic: str, *, partitions: int, rate: int, prefix: bytes = b"", flush_s: float = 120
    ) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 0}
        )
        self.topic, self.partitions, self.rate, self.prefix, self.flush_s = topic, partitions, rate, prefix, flush_s
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sequence = 0
        while not self.stopping.is_set():
            for _ in range(max(1, self.rate // 20)):
                try:
                    value = self.prefix + b"%d" % sequence
                    self.producer.produce(self.topic, value=value, partition=sequence % self.partitions)
                    sequence += 1
                except BufferError:
                    break
            self.producer.poll(0.05)

    def __enter__(self) -> SteadyProducer:
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.producer.flush(self.flush_s)


def held_by_partition(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Messages each partition of `topic` holds (high minus low watermark): at once, without reading them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return {p: high - low for p in range(partitions) for low, high in [watermarks(consumer, topic, p)]}
    finally:
        consumer.close()
