"""Kafka's own Java producer with the kafka-audit interceptor against without it, same cluster, topic and settings.

    .venv/bin/python -m bench.bench_java_interceptor [--messages 2000000] [--size 100] [--rounds 3] [--digest]

Starts its own local cluster in a temporary folder and alternates the two sides, each one run of Apache Kafka's
ProducerPerformance in a JVM of its own (--throughput -1, acks=all, linger.ms=5, the same class path and JVM flags
on both sides); the interceptor's side adds `interceptor.classes=io.kaudit.KafkaAuditInterceptor` and its settings.
One run of each side first warms the fresh cluster up and is not counted: the very first run against it is much
the slowest, and it would always be the plain side's. Both sides get the same fixed heap: left to the JVM, the
heap starts at a 64th of the machine's memory and grows during the run, and its young collections (tens of ms
each) vary more from run to run than the interceptor costs.
Reports the msg/s ProducerPerformance measures and the CPU seconds of the whole java process (utime + stime of
the child, JVM start and the interceptor's own audit producer included), then the ratio with / without.
Goal: at least 0.95 as the interceptor runs by default; with --digest (the content digest on), the figure is
reported, since that cost is why the digest is off by default for Java producers.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess

from audit.contract.names import PRODUCER_TIER
from audit.io import jvm
from audit.io.audit_log import counts_by_window, read_audit_topic
from audit.io.clients import ensure_topics
from audit.io.interceptor_jar import INTERCEPTOR_CLASS, interceptor_jar, tools_jars
from audit.settings import load_settings
from bench.harness import bench_cluster, compare, parse_args

TOPIC, AUDIT_TOPIC, PARTITIONS = "bench", "_audit", 6
PRODUCER = {"acks": "all", "linger.ms": "5"}
INTERCEPTOR = {
    "interceptor.classes": INTERCEPTOR_CLASS,
    "kaudit.cluster": "bench",
    "kaudit.audit.topic": AUDIT_TOPIC,
    "kaudit.service": "bench",
}
JVM_FLAGS = ["-Xms1g", "-Xmx1g"]
RATE = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec", re.MULTILINE)


def classpath() -> str:
    cache_dir = load_settings().cache_dir
    jars = [*map(str, tools_jars(cache_dir)), str(interceptor_jar(cache_dir))]
    return os.pathsep.join([jvm.classpath(cache_dir, jvm.KAFKA_JARS), *jars])


def producer_performance(bootstrap: str, messages: int, size: int, extra: dict[str, str]) -> tuple[float, float]:
    """One ProducerPerformance run: (msg/s as it reports them, CPU seconds of the java process)."""
    props = {"bootstrap.servers": bootstrap, **PRODUCER, **extra}
    argv = [jvm.java_executable(), *JVM_FLAGS, "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance"]
    argv += ["--topic", TOPIC, "--num-records", str(messages), "--record-size", str(size), "--throughput", "-1"]
    argv += ["--producer-props", *(f"{key}={value}" for key, value in props.items())]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = RATE.findall(done.stdout)
    if not found or int(found[-1][0]) != messages:
        raise RuntimeError(f"ProducerPerformance did not report {messages} records sent: {done.stdout[-500:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(found[-1][1]), cpu_s


def main() -> None:
    args = parse_args(__doc__, messages=2_000_000, flags={"--digest": "the interceptor's side with kaudit.digest=true"})
    interceptor = {**INTERCEPTOR, **({"kaudit.digest": "true"} if args.digest else {})}
    cpu: dict[str, list[float]] = {"plain": [], "interceptor": []}
    with bench_cluster() as bootstrap:
        ensure_topics({"bootstrap.servers": bootstrap}, {TOPIC: PARTITIONS, AUDIT_TOPIC: 1})
        warm_up = {"plain": {}, "interceptor": interceptor}
        for name, extra in warm_up.items():
            rate, _ = producer_performance(bootstrap, args.messages, args.size, extra)
            print(f"  warm-up, not counted: {name} {rate:,.0f} msg/s")

        def side(name: str, extra: dict[str, str]):
            def run() -> tuple[float, float]:
                rate, cpu_s = producer_performance(bootstrap, args.messages, args.size, extra)
                cpu[name].append(cpu_s)
                print(f"  {name}: {rate:,.0f} msg/s, {cpu_s:.2f} s CPU")
                return rate, cpu_s / args.messages * 1e6

            return name, run

        compare(side("plain", {}), side("interceptor", interceptor), rounds=args.rounds, goal=0.95)
        records, rejects = read_audit_topic({"bootstrap.servers": bootstrap}, AUDIT_TOPIC)
        counted = sum(counts_by_window(records, PRODUCER_TIER).values())
        print(
            f"the interceptor counted {counted:,} messages in {len(records)} records ({len(rejects)} rejected); "
            f"sent with it: {(args.rounds + 1) * args.messages:,} (the warm-up run included)"
        )
    plain, ours = statistics.median(cpu["plain"]), statistics.median(cpu["interceptor"])
    print(
        f"median CPU seconds of the java process: plain {plain:.2f} s, interceptor {ours:.2f} s, "
        f"ratio interceptor/plain {ours / plain:.2f}"
    )


if __name__ == "__main__":
    main()
