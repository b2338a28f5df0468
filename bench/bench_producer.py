"""Audited producer against the plain confluent-kafka producer, same topic and settings, one run.

    .venv/bin/python bench/bench_producer.py [--messages 300000] [--size 100] [--rounds 3]

Starts its own local cluster in a temporary folder and alternates the two producers (acks=all,
idempotence, linger.ms=20 for both), timing produce + flush. Prints messages per second of each and
the ratio audited / plain. Goal: at least 0.97.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from audit.clients import ensure_topics
from audit.local_cluster import LocalCluster
from producers.audited import AuditedProducer

CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 20}


def run(producer, topic: str, messages: int, size: int) -> float:
    value = b"v" * size
    began = time.monotonic()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush()
    return messages / (time.monotonic() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cache_dir = Path(os.environ.get("KAUDIT_CACHE_DIR", "~/.cache/kafka-audit")).expanduser()
    with tempfile.TemporaryDirectory() as state_dir:
        cluster = LocalCluster("bench", state_dir=Path(state_dir), cache_dir=cache_dir, heap_mb=1024)
        print(f"cluster ready in {cluster.start():.1f} s")
        try:
            bootstrap = cluster.bootstrap_servers
            ensure_topics({"bootstrap.servers": bootstrap}, {"bench": 6, "_audit": 1})
            config = {"bootstrap.servers": bootstrap, **CONFIG}
            run(Producer(config), "bench", 20_000, args.size)  # warm-up: producer id, topic metadata, JIT
            plain, audited = [], []
            for round_ in range(1, args.rounds + 1):
                plain.append(run(Producer(config), "bench", args.messages, args.size))
                with AuditedProducer(config=config, cluster="bench", service="bench") as producer:
                    audited.append(run(producer, "bench", args.messages, args.size))
                print(f"round {round_}: plain {plain[-1]:,.0f} msg/s, audited {audited[-1]:,.0f} msg/s")
            plain_rate, audited_rate = statistics.median(plain), statistics.median(audited)
            print(f"median: plain {plain_rate:,.0f} msg/s, audited {audited_rate:,.0f} msg/s, "
                  f"ratio audited/plain {audited_rate / plain_rate:.2f} (goal >= 0.97)")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
