"""Counter throughput against a bare confluent-kafka consume loop, on the same topic, in one run.

    .venv/bin/python -m bench.bench_counter [--messages 500000] [--size 100] [--rounds 3]

Starts its own local cluster in a temporary folder, fills one topic once, runs one short round of
each side as a warm-up (group and transaction coordinators, the cluster's first transaction), then
alternates a bare consume loop (fresh group, reads every message, touches nothing) with the audit
counter (fresh group, counts into a throw-away audit topic, one exactly-once flush at the end, inside
the timing) and prints messages per second of each and the ratio counter / bare. Goal: at least 0.9.
Last, one round of each side in its own process gives each side's peak RSS.
"""

from __future__ import annotations

import random
import time
import uuid

from confluent_kafka import Consumer, Producer

from audit.hops.counter import ClusterCounter, CounterOptions
from audit.io.clients import ensure_topics
from bench.harness import bench_cluster, compare, parse_args, peak_rss, report_side

PARTITIONS = 6
TOPIC = "bench"
WINDOW_MS = 600_000


def fill(bootstrap: str, topic: str, messages: int, size: int) -> None:
    rng = random.Random(1)
    base = int(time.time() * 1000) - 6 * WINDOW_MS
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4"}
    )
    value = b"v" * size
    began = time.monotonic()
    for i in range(messages):
        while True:
            try:
                producer.produce(
                    topic, value=value, key=b"%d" % (i % 1000), timestamp=base + rng.randrange(6 * WINDOW_MS)
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
            if i % 100_000 == 0:
                print(f"filling {topic}: {i:,}/{messages:,}", flush=True)
    producer.flush(120)
    print(f"filled {messages:,} messages of {size} B in {time.monotonic() - began:.1f} s")


def bare_loop(bootstrap: str, topic: str, messages: int) -> tuple[float, float]:
    """(msg/s, CPU µs a message) from the first batch to the last message."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bare-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    began = None
    while seen < messages:
        batch = consumer.consume(5000, timeout=1)
        if began is None and batch:
            began, cpu_began = time.monotonic(), time.process_time()
        for message in batch:
            if message.error() is None:
                seen += 1
    elapsed, cpu = time.monotonic() - began, time.process_time() - cpu_began
    consumer.close()
    return messages / elapsed, cpu / messages * 1e6


def counter_loop(bootstrap: str, topic: str, messages: int) -> tuple[float, float]:
    """(msg/s, CPU µs a message) from the first batch to the end of the final flush."""
    audit_topic = f"_bench_audit_{uuid.uuid4().hex[:8]}"
    ensure_topics({"bootstrap.servers": bootstrap}, {audit_topic: 1})
    options = CounterOptions(
        cluster="bench",
        audit_topic=audit_topic,
        flush_interval_s=3600,
        group_id=f"counter-{uuid.uuid4().hex}",
        topic_refresh_s=3600,
    )
    counter = ClusterCounter({"bootstrap.servers": bootstrap}, options, lambda name: name == topic)
    counter.open()
    counter.refresh_topics()
    began = None
    while counter.stats.counted < messages:
        batch = counter._consumer.consume(options.batch_size, timeout=1)
        if began is None and batch:
            began, cpu_began = time.monotonic(), time.process_time()
        counter.count_batch(batch)
    counter.flush()
    elapsed, cpu = time.monotonic() - began, time.process_time() - cpu_began
    counter.close()
    return messages / elapsed, cpu / messages * 1e6


def main() -> None:
    args = parse_args(__doc__, messages=500_000)
    if args.side:
        side = bare_loop if args.side == "bare" else counter_loop
        rate, cpu_us = side(args.bootstrap, TOPIC, args.messages)
        report_side(rate, cpu_us=cpu_us)
        return
    with bench_cluster() as bootstrap:
        topic = TOPIC
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: PARTITIONS})
        fill(bootstrap, topic, args.messages, args.size)
        warm_up = min(args.messages, 20_000)
        bare_loop(bootstrap, topic, warm_up)
        counter_loop(bootstrap, topic, warm_up)
        compare(
            ("bare", lambda: bare_loop(bootstrap, topic, args.messages)),
            ("counter", lambda: counter_loop(bootstrap, topic, args.messages)),
            rounds=args.rounds,
            goal=0.9,
        )
        peak_rss("bench.bench_counter", ["bare", "counter"], bootstrap, args)


if __name__ == "__main__":
    main()
