"""The whole `kaudit count` process against a truly bare consume-loop process over the same topic, one run.

    .venv/bin/python -m bench.bench_counter [--messages 3000000] [--size 100] [--rounds 3]

Starts its own local cluster in a temporary folder and fills one topic once. Then it alternates two
processes, each reading every message from a fresh consumer group: a bare loop (`consume()` and `len()` of
each batch, nothing per message) and `kaudit count --until-caught-up` (its real loop: the plugin's counts per
batch, a transaction with counts, status and offsets every --flush-interval-s, the last one at the end).
Each process's CPU seconds come from the kernel (wait4's rusage: utime + stime, every thread), its wall time
from start to exit. Start-up is measured apart, by the same process on an empty topic, and taken off both
figures. Prints messages per second and per CPU-second of each and the ratios counter / bare. Goal: 0.9.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from audit.contract.windows import window_length_ms
from audit.io.clients import ensure_topics
from bench.harness import Run, bench_cluster, compare, parse_args

PARTITIONS = 6
TOPIC = "bench"
EMPTY_TOPIC = "bench-empty"
AUDIT_TOPIC = "_bench_audit"
FLUSH_INTERVAL_S = 10.0  # the default: a transaction every 10 s
WINDOW_MS = window_length_ms()


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


BARE_LOOP = """
import gc, sys, uuid
from confluent_kafka import Consumer
gc.freeze()  # as the counter does after its start-up: neither side's collector walks its start-up's objects
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{uuid.uuid4().hex}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([topic])
seen = 0
while seen < expected or not consumer.assignment():
    seen += len(consumer.consume(5000, timeout=0.1))
consumer.close()
"""


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a process from start to exit."""
    began = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - began
    if status != 0:
        raise RuntimeError(f"{argv[:3]} exited with {status}: {process.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def bare_side(bootstrap: str) -> Callable[[str, int], tuple[float, float]]:
    return lambda topic, expected: timed([sys.executable, "-c", BARE_LOOP, bootstrap, topic, str(expected)])


def counter_side(bootstrap: str, folder: Path, flush_interval_s: float) -> Callable[[str, int], tuple[float, float]]:
    def run(topic: str, expected: int) -> tuple[float, float]:
        config = folder / f"{uuid.uuid4().hex}.toml"
        config.write_text(
            f'state_dir = "{folder}"\naudit_topic = "{AUDIT_TOPIC}"\n'
            f'[topics]\ninclude = ["^{topic}$"]\n'
            f'[[clusters]]\nname = "bench"\nbootstrap_servers = "{bootstrap}"\n'
        )
        argv = [str(Path(sys.executable).with_name("kaudit")), "count", "--cluster", "bench", "--until-caught-up"]
        argv += ["--group-id", f"counter-{uuid.uuid4().hex}", "--flush-interval-s", str(flush_interval_s)]
        return timed(argv, env={**os.environ, "KAUDIT_CONFIG": str(config)})

    return run


def steady(side: Callable[[str, int], tuple[float, float]], start_up: tuple[float, float], messages: int) -> Run:
    """One round of `side` over TOPIC: (msg/s, CPU µs a message), its start-up taken off."""

    def run() -> tuple[float, float]:
        wall, cpu = side(TOPIC, messages)
        return messages / (wall - start_up[0]), (cpu - start_up[1]) / messages * 1e6

    return run


def start_up(side: Callable[[str, int], tuple[float, float]]) -> tuple[float, float]:
    """The median (wall, CPU) seconds of `side` on the empty topic, over 3 runs."""
    runs = [side(EMPTY_TOPIC, 0) for _ in range(3)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    parser_args = parse_args(__doc__, messages=3_000_000)
    with bench_cluster() as bootstrap, tempfile.TemporaryDirectory() as folder:
        ensure_topics({"bootstrap.servers": bootstrap}, {TOPIC: PARTITIONS, EMPTY_TOPIC: PARTITIONS, AUDIT_TOPIC: 1})
        fill(bootstrap, TOPIC, parser_args.messages, parser_args.size)
        bare, counter = bare_side(bootstrap), counter_side(bootstrap, Path(folder), FLUSH_INTERVAL_S)
        bare_start, counter_start = start_up(bare), start_up(counter)
        print(
            f"start-up (empty topic, median of 3): bare {bare_start[0]:.1f} s wall, {bare_start[1]:.2f} s CPU; "
            f"counter {counter_start[0]:.1f} s wall, {counter_start[1]:.2f} s CPU"
        )
        compare(
            ("bare", steady(bare, bare_start, parser_args.messages)),
            ("counter", steady(counter, counter_start, parser_args.messages)),
            rounds=parser_args.rounds,
            goal=0.9,
        )


if __name__ == "__main__":
    main()
