"""No count dropped in silence (DESIGN invariant 15), the plugin's side: while the audit topic takes no records the
producer makes none and keeps merging its counts, within kaudit.tally.max.entries; past it the oldest windows are
dropped, logged and written as unknown once the audit topic takes records again. A client destroyed while the audit
topic is unreachable, and one still alive when the interpreter exits, neither hangs past kaudit.close.timeout.ms nor
crashes, and names what it could not deliver."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from audit.contract.windows import window_length_ms, window_start
from audit.io.plugin import plugin_config
from producers.audited import AuditedProducer
from tests.producers.test_plugin import producer_counts
from tests.traffic import BASE_MS, WINDOW_MINUTES

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
WINDOW_MS = window_length_ms(WINDOW_MINUTES)
BOUND = 4


def test_an_audit_topic_that_takes_nothing_holds_merged_bounded_counts_and_loses_no_window_in_silence(
    local_clusters, topic_factory, unique_name, capfd
):
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    audit_topic = unique_name("_audit_later").replace("-", "_")  # not there yet: the audit topic takes nothing
    producer = AuditedProducer(
        config={"bootstrap.servers": bootstrap, "linger.ms": 5},
        cluster="dc1",
        audit_topic=audit_topic,
        window_minutes=WINDOW_MINUTES,
        flush_interval_s=0.05,
        max_entries=BOUND,
    )
    produced: Counter = Counter()

    def produce(window: int, n: int) -> None:
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i, timestamp=BASE_MS + window * WINDOW_MS + i, partition=i % 2)
        assert Producer.flush(producer, 30) == 0
        produced[(topic, window_start(BASE_MS + window * WINDOW_MS, WINDOW_MINUTES))] += n

    produce(0, 10)
    assert producer.emit(2) == 1, "window 0's record is made and waits for the audit topic"
    held = []
    for window in range(1, 13):
        for _ in range(3):  # several emission intervals per window: the counts merge, no record is made
            produce(window, 10)
            time.sleep(0.1)
            held.append(producer.backlog())
    assert max(b.entries for b in held) == BOUND, "the tally holds at most its bound of entries"
    assert {b.undelivered for b in held} == {1}, "no new record while the audit topic takes none"
    assert held[-1].lost_windows == 8, "windows 1 to 8 dropped for 9 to 12"
    log = capfd.readouterr().err
    lost = [start for (_topic, start) in sorted(produced)][1:9]
    for start in lost:
        assert f"the counts of topic {topic}, window {iso(start)}, are dropped" in log

    topic_factory("dc1", name=audit_topic)
    assert producer.emit(60) == 0, "the audit topic takes records again: the held counts and the lost windows"
    producer.close()

    _delivered, _failed, records = producer_counts(bootstrap, audit_topic)
    counted, unknown = Counter(), set()
    for record in records:
        counted[(record.topic, record.window_start_ms)] += record.count
        if record.unknown:
            unknown.add((record.topic, record.window_start_ms))
    assert unknown == {(topic, start) for start in lost}
    assert all(counted[key] == 0 for key in unknown), "a lost window is written with count 0, unknown"
    assert {key: n for key, n in produced.items() if key not in unknown} == +counted, "the rest counted exactly"


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def test_a_bad_tally_bound_is_refused(local_clusters):
    config = {"bootstrap.servers": local_clusters["dc1"].bootstrap_servers, **plugin_config(cluster="dc1")}
    for bad in ("0", "-3", "lots", "1000001"):
        with pytest.raises(KafkaException, match="kaudit.tally.max.entries.*is not 1 to 1000000"):
            Producer({**config, "kaudit.tally.max.entries": bad})


def run_script(script: str, timeout_s: float) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return result, time.monotonic() - began


CLIENT = """
    import threading, time
    from confluent_kafka import Producer
    from audit.io.plugin import plugin_config
    bootstrap, topic, audit_topic, ending = {args}
    config = plugin_config(cluster="dc1", audit_topic=audit_topic, close_timeout_ms=3000, flush_interval_ms=3600000)
    producer = Producer({{"bootstrap.servers": bootstrap, **config}})
    for i in range(100):
        producer.produce(topic, value=b"v%d" % i, timestamp={ts})
    assert producer.flush(30) == 0
    print("produced", flush=True)
    began = time.monotonic()
    if ending == "destroy":
        del producer
        print(f"destroyed in {{time.monotonic() - began:.1f}} s", flush=True)
    else:  # only a daemon thread holds it: the interpreter exits and never destroys it
        keep = [producer]
        threading.Thread(target=lambda held=keep: time.sleep(3600), daemon=True).start()
        del producer, keep
"""


@pytest.mark.parametrize("ending", ["destroy", "exit"])
@pytest.mark.parametrize("reachable", [True, False], ids=["audit topic there", "audit topic missing"])
def test_a_client_ends_within_its_close_timeout_and_says_what_it_could_not_deliver(
    local_clusters, topic_factory, unique_name, ending, reachable
):
    """`destroy`: the application destroys its client; `exit`: it never does, and the interpreter exits (the plugin
    then emits the last counts itself, leaving the client to the exit: destroying it then is librdkafka#2611)."""
    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    audit_topic = unique_name("_audit").replace("-", "_")
    if reachable:
        topic_factory("dc1", name=audit_topic)
    args = ", ".join(repr(a) for a in (bootstrap, topic, audit_topic, ending))
    result, took = run_script(CLIENT.format(args=args, ts=BASE_MS), timeout_s=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "produced" in result.stdout
    assert took < 3 + 15, f"{took:.1f} s: the close timeout is 3 s (the rest is the interpreter's start)"
    if reachable:
        _delivered, _failed, records = producer_counts(bootstrap, audit_topic)
        assert sum(r.count for r in records) == 100, "the last counts are delivered"
        assert "is lost" not in result.stderr
    else:
        window = iso(window_start(BASE_MS, WINDOW_MINUTES))
        assert (
            f"did not take the count record of topic {topic}, window {window}, before the client ended" in result.stderr
        )
