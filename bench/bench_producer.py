"""confluent-kafka's Producer with the kaudit plugin (the AuditedProducer) against the same without it.

    .venv/bin/python -m bench.bench_producer [--messages 300000] [--size 100] [--rounds 3] [--transactional]

Starts its own local cluster in a temporary folder and alternates the two producers (acks=all,
idempotence, linger.ms=20 for both), timing produce + flush. Each producer first sends and flushes
WARM_UP messages, untimed: the steady state is measured, not a client's start (its producer id, the
topic's metadata, the plugin's own producer for the audit records). Prints messages per second of each
and the ratio audited / plain. Goal: at least 0.95. Last, one round of each side in its own process
gives each side's peak RSS and CPU time per message (utime + stime of the process, the client's and the
plugin's threads included; steadier than wall time on a machine that also runs the broker).

With --transactional both sides have a transactional.id and commit every TRANSACTION_SIZE messages: the audited
side's plugin keeps each transaction's acknowledgements apart and merges them at its commit.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer

from audit.io.clients import ensure_topics
from bench.harness import bench_cluster, compare, parse_args, peak_rss, report_side
from producers.audited import AuditedProducer

CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 20}
WARM_UP = 20_000
TRANSACTION_SIZE = 1_000


def run(producer, topic: str, messages: int, size: int) -> tuple[float, float]:
    """(msg/s, CPU µs a message) of produce + flush, after WARM_UP untimed messages."""
    send(producer, topic, WARM_UP, size)
    began, cpu_began = time.monotonic(), time.process_time()
    send(producer, topic, messages, size)
    return messages / (time.monotonic() - began), (time.process_time() - cpu_began) / messages * 1e6


def send(producer, topic: str, messages: int, size: int) -> None:
    value = b"v" * size
    chunk = TRANSACTION_SIZE if is_transactional(producer) else messages
    for start in range(0, messages, chunk):
        if chunk != messages:
            producer.begin_transaction()
        for i in range(start, min(messages, start + chunk)):
            while True:
                try:
                    producer.produce(topic, value=value, key=b"%d" % (i % 1000))
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        if chunk != messages:
            producer.commit_transaction()
    producer.flush()


def is_transactional(producer) -> bool:
    return getattr(producer, "transactional", False)


class PlainProducer(Producer):
    transactional = False


class BenchAudited(AuditedProducer):
    transactional = False


def new_producer(side: str, config: dict):
    """The side's producer: `plain` or `audited`, with `-txn` a transactional one, its transactions initialised."""
    transactional = side.endswith("-txn")
    if transactional:
        config = {**config, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"}
    if side.startswith("plain"):
        producer = PlainProducer(config)
    else:
        producer = BenchAudited(config=config, cluster="bench", service="bench")
    producer.transactional = transactional
    if transactional:
        producer.init_transactions(30)
    return producer


def side_run(side: str, config: dict, size: int, messages: int) -> tuple[float, float]:
    producer = new_producer(side, config)
    try:
        return run(producer, "bench", messages, size)
    finally:
        if isinstance(producer, AuditedProducer):
            producer.close()


def main() -> None:
    args = parse_args(__doc__, messages=300_000, flags={"--transactional": "both sides commit transactions"})
    if args.side:
        config = {"bootstrap.servers": args.bootstrap, **CONFIG}
        rate, cpu_us = side_run(args.side, config, args.size, args.messages)
        report_side(rate, cpu_us=cpu_us)
        return
    sides = ["plain-txn", "audited-txn"] if args.transactional else ["plain", "audited"]
    with bench_cluster() as bootstrap:
        ensure_topics({"bootstrap.servers": bootstrap}, {"bench": 6, "_audit": 1})
        config = {"bootstrap.servers": bootstrap, **CONFIG}
        compare(
            *((side, lambda side=side: side_run(side, config, args.size, args.messages)) for side in sides),
            rounds=args.rounds,
            goal=0.95,
        )
        peak_rss("bench.bench_producer", sides, bootstrap, args)


if __name__ == "__main__":
    main()
