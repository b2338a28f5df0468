"""`kaudit produce`: a load generator for tests, benchmarks and the demo.

Deterministic for a seed. With `backfill_hours`, audit times are spread uniformly over the last
hours, so many windows fill in seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO

from confluent_kafka import Producer

from audit.contract.windows import DEFAULT_WINDOW_MINUTES, window_start
from audit.io.clients import check_credentials, client_config, ensure_topics
from producers.audited import AuditedProducer

PROGRESS_INTERVAL_S = 1.0


@dataclass
class LoadStats:
    """What a run produced: totals (bytes of keys and values), and per (topic, window_start_ms) the
    acknowledged messages."""

    sent: int = 0
    acked: int = 0
    failed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    acked_by_window: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


class Progress:
    """A line on `stream` every second with messages, rate and throughput."""

    def __init__(self, label: str, total: int | None, stream: TextIO | None = sys.stderr) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.began = self.last = time.monotonic()

    def update(self, done: int, size_bytes: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.stream is None or (not force and now - self.last < PROGRESS_INTERVAL_S):
            return
        self.last = now
        elapsed = max(now - self.began, 1e-9)
        of = f"/{self.total:,}" if self.total else ""
        self.stream.write(
            f"{self.label}: {done:,}{of} msgs, {done / elapsed:,.0f} msg/s, {size_bytes / elapsed / 1e6:.1f} MB/s\n"
        )
        self.stream.flush()


def delivered(stats: LoadStats, topic: str, audit_ms: int, window_minutes: int):
    """A delivery callback that counts the message in `stats` as acknowledged (per window) or failed."""

    def callback(err, _msg) -> None:
        if err is None:
            stats.acked += 1
            stats.acked_by_window[(topic, window_start(audit_ms, window_minutes))] += 1
        else:
            stats.failed += 1

    return callback


def generate(
    producer: Producer | AuditedProducer,
    topics: list[str],
    *,
    count: int | None = None,
    rate: float | None = None,
    duration_s: float | None = None,
    size: int = 100,
    keys: int = 1000,
    seed: int = 0,
    backfill_hours: float = 0.0,
    window_minutes: int = DEFAULT_WINDOW_MINUTES,
    progress: Progress | None = None,
    tombstone_every: int = 0,
) -> LoadStats:
    """Produce `count` messages (or `rate` per second for `duration_s`) round-robin over `topics`; with
    `tombstone_every` N, every N-th message has a null value (a delete on a compacted topic)."""
    if count is None and duration_s is None:
        raise ValueError("give count, or rate with duration_s")
    rng = random.Random(seed)
    stats = LoadStats()
    payload = bytes(rng.randrange(256) for _ in range(max(size, 0)))
    now_ms = time.time_ns() // 1_000_000
    spread_ms = int(backfill_hours * 3_600_000)
    began = time.monotonic()

    i = 0
    while (count is None or i < count) and (duration_s is None or time.monotonic() - began < duration_s):
        if rate:
            ahead = i / rate - (time.monotonic() - began)
            if ahead > 0:
                producer.poll(min(ahead, 0.1))
                continue
        topic = topics[i % len(topics)]
        audit_ms = now_ms - rng.randrange(spread_ms) if spread_ms else time.time_ns() // 1_000_000
        key = b"key-%d" % rng.randrange(keys) if keys else None
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else payload
        producer.produce(
            topic,
            value=value,
            key=key,
            timestamp=audit_ms,
            on_delivery=delivered(stats, topic, audit_ms, window_minutes),
        )
        stats.sent += 1
        stats.bytes += len(value or b"") + (len(key) if key else 0)
        i += 1
        if i % 1000 == 0:
            producer.poll(0)
            if progress:
                progress.update(stats.sent, stats.bytes)
    producer.flush()
    stats.seconds = time.monotonic() - began
    if progress:
        progress.update(stats.sent, stats.bytes, force=True)
    return stats


def add_command(commands) -> None:
    parser = commands.add_parser(
        "produce",
        help="generate test traffic into a cluster (audited by default)",
        description="Produce synthetic messages to one cluster through the audited producer, which also writes "
        "the producer tier's counts into the audit topic. Give --count, or --rate with --duration-s.",
    )
    parser.add_argument("--cluster", required=True, help="cluster name from the configuration")
    parser.add_argument("--topics", required=True, help="comma-separated topic names; missing ones are created")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of topics it creates (default 6)")
    parser.add_argument("--count", type=int, help="messages to produce in total")
    parser.add_argument("--rate", type=float, help="messages per second (default: as fast as possible)")
    parser.add_argument("--duration-s", type=float, help="stop after this many seconds")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes (default 100)")
    parser.add_argument("--keys", type=int, default=1000, help="distinct keys (default 1000; 0: no keys)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: same seed, same messages and times")
    parser.add_argument(
        "--backfill-hours",
        type=float,
        default=0.0,
        help="spread audit times over the last H hours (fills many windows at once)",
    )
    parser.add_argument("--plain", action="store_true", help="use a plain producer that writes no audit records")
    parser.add_argument(
        "--tombstone-every", type=int, default=0, help="every N-th message has a null value (a delete); default none"
    )
    parser.add_argument(
        "--transactional",
        action="store_true",
        help="a plain transactional producer (like Kafka Streams exactly-once): transactions of "
        "--transaction-size messages, every --abort-every-th aborted; writes no audit records",
    )
    parser.add_argument("--transaction-size", type=int, default=20, help="messages per transaction (default 20)")
    parser.add_argument("--abort-every", type=int, default=4, help="abort every N-th transaction (default 4; 0: never)")
    parser.set_defaults(handler=run)


def audited_producer(
    settings, cluster: str, *, service: str = "kaudit-produce", overrides: Mapping[str, object] | None = None
) -> AuditedProducer:
    """An AuditedProducer for a configured cluster, with the configuration's audit settings."""
    return AuditedProducer(
        config=client_config(settings, cluster, {"linger.ms": 20, **(overrides or {})}),
        cluster=cluster,
        audit_topic=settings.audit_topic,
        window_minutes=settings.window_minutes,
        flush_interval_s=settings.flush_interval_s,
        service=service,
        digest_exclude=settings.topics.digest_exclude,
    )


def run(args: argparse.Namespace, settings) -> int:
    if args.count is None and args.duration_s is None:
        print("kaudit produce: give --count N, or --rate R with --duration-s S", file=sys.stderr)
        return 2
    topics = [topic.strip() for topic in args.topics.split(",") if topic.strip()]
    config = client_config(settings, args.cluster)
    check_credentials(config, args.cluster)
    ensure_topics(config, {topic: args.partitions for topic in topics} | {settings.audit_topic: 1})
    if args.transactional:
        return _run_transactional(args, config, topics)
    producer = Producer({**config, "linger.ms": 20}) if args.plain else audited_producer(settings, args.cluster)
    stats = generate(
        producer,
        topics,
        count=args.count,
        rate=args.rate,
        duration_s=args.duration_s,
        size=args.size,
        keys=args.keys,
        seed=args.seed,
        backfill_hours=args.backfill_hours,
        window_minutes=settings.window_minutes,
        progress=Progress(f"produce {args.cluster}", args.count),
        tombstone_every=args.tombstone_every,
    )
    if isinstance(producer, AuditedProducer):
        producer.close()
    print(
        f"produced {stats.acked:,} acked, {stats.failed:,} failed, {stats.bytes / 1e6:.1f} MB in {stats.seconds:.1f} s "
        f"({stats.rate:,.0f} msg/s) into {len(stats.acked_by_window)} topic-windows"
    )
    return 0 if stats.failed == 0 else 1


def _run_transactional(args: argparse.Namespace, config: dict, topics: list[str]) -> int:
    from producers.transactional import TransactionalLoad

    load = TransactionalLoad(config, transactional_id=f"kaudit-load-{args.cluster}-{args.seed}")
    stats = load.run(
        topics,
        count=args.count,
        rate=args.rate,
        duration_s=args.duration_s,
        transaction_size=args.transaction_size,
        abort_every=args.abort_every,
        size=args.size,
        seed=args.seed,
    )
    load.close()
    print(
        f"transactions: {stats.transactions:,} ({stats.errors} failed), {stats.committed:,} messages committed, "
        f"{stats.aborted:,} aborted in {stats.seconds:.1f} s"
    )
    return 0
