"""confluent-kafka's Producer with the kaudit plugin (the AuditedProducer) against the same without it.

    .venv/bin/python -m bench.bench_producer [--messages 300000] [--size 100] [--rounds 3]

Starts its own local cluster in a temporary folder and alternates the two producers (acks=all,
idempotence, linger.ms=20 for both), timing produce + flush. Each producer first sends and flushes
WARM_UP messages, untimed: the steady state is measured, not a client's start (its producer id, the
topic's metadata, the plugin's own producer for the audit records). Prints messages per second of each
and the ratio audited / plain. Goal: at least 0.95. Last, one round of each side in its own process
gives each side's peak RSS and CPU time per message (utime + stime of the process, the client's and the
plugin's threads included; steadier than wall time on a machine that also runs the broker).
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from audit.io.clients import ensure_topics
from bench.harness import bench_cluster, compare, parse_args, peak_rss, report_side
from producers.audited import AuditedProducer

CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 20}
WARM_UP = 20_000


def run(producer, topic: str, messages: int, size: int) -> tuple[float, float]:
    """(msg/s, CPU µs a message) of produce + flush, after WARM_UP untimed messages."""
    send(producer, topic, WARM_UP, size)
    began, cpu_began = time.monotonic(), time.process_time()
    send(producer, topic, messages, size)
    return messages / (time.monotonic() - began), (time.process_time() - cpu_began) / messages * 1e6


def send(producer, topic: str, messages: int, size: int) -> None:
    value = b"v" * size
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


def audited_run(config: dict, size: int, messages: int) -> tuple[float, float]:
    with AuditedProducer(config=config, cluster="bench", service="bench") as producer:
        return run(producer, "bench", messages, size)


def main() -> None:
    args = parse_args(__doc__, messages=300_000)
    if args.side:
        config = {"bootstrap.servers": args.bootstrap, **CONFIG}
        if args.side == "plain":
            rate, cpu_us = run(Producer(config), "bench", args.messages, args.size)
        else:
            rate, cpu_us = audited_run(config, args.size, args.messages)
        report_side(rate, cpu_us=cpu_us)
        return
    with bench_cluster() as bootstrap:
        ensure_topics({"bootstrap.servers": bootstrap}, {"bench": 6, "_audit": 1})
        config = {"bootstrap.servers": bootstrap, **CONFIG}
        compare(
            ("plain", lambda: run(Producer(config), "bench", args.messages, args.size)),
            ("audited", lambda: audited_run(config, args.size, args.messages)),
            rounds=args.rounds,
            goal=0.95,
        )
        peak_rss("bench.bench_producer", ["plain", "audited"], bootstrap, args)


if __name__ == "__main__":
    main()
