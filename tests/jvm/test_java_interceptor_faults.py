"""The Java producer interceptor where its counts cannot be plain (tests/jvm/AuditedSends.java): a transactional
producer's records carry unknown (it never sees a commit or an abort), a failed send counts in the window of the
message it sent, and while the audit topic does not take its records the counts merge per window, the oldest
windows past kaudit.tally.max.entries dropped and reported afterwards as unknown, with count 0."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from audit.contract.names import PRODUCER_TIER
from audit.contract.record import iso
from audit.io import jvm
from audit.io.interceptor_jar import interceptor_jar
from tests.audit.hops.test_counter import BASE_MS, WINDOW_MS, counter_for
from tests.conftest import cache_dir
from tests.jvm.test_java_interceptor import audit_records, raw_messages

pytestmark = pytest.mark.kafka

PROBE = Path(__file__).with_name("AuditedSends.java")


def audited_sends(mode: str, bootstrap: str, topic: str, audit_topic: str, *args: object) -> list[str]:
    classpath = os.pathsep.join([jvm.classpath(cache_dir(), jvm.KAFKA_JARS), str(interceptor_jar(cache_dir()))])
    return [jvm.java_executable(), "-cp", classpath, str(PROBE), mode, bootstrap, topic, audit_topic, *map(str, args)]


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the futures fail once it is collected
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def until_buffered(probe: subprocess.Popen) -> str:
    """What the probe printed (log4j's default logs to stdout) up to its `buffered`; failing if it ends first."""
    printed = []
    while (line := probe.stdout.readline()) != "buffered\n":
        assert line, "".join(printed)[-3000:] + probe.stderr.read()[-3000:]
        printed.append(line)
    return "".join(printed)


def test_a_transactional_producers_records_are_all_unknown(local_clusters, topic_factory, unique_name):
    """It sees what the brokers acknowledged, aborted transactions too: its counts cannot be the committed ones, so
    the books judge its windows against the origin cluster, whose counter counts what read_committed reads."""
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    out = run(audited_sends("transactions", dc1, topic, audit_topic, 4, 50))
    assert out.split() == ["committed", "100"]

    ours = [r for r in audit_records(dc1, audit_topic) if r.tier == PRODUCER_TIER]
    assert ours and all(r.unknown and r.aborted == 0 for r in ours)
    # Acknowledged, some of the aborted half too; what an abort caught still unsent fails.
    assert sum(r.count + r.send_failed for r in ours) == 200 and sum(r.count for r in ours) >= 100
    counter = counter_for(dc1, audit_topic, topic)
    assert counter.run(until_caught_up=True, max_seconds=60).total_lag == 0
    counted = [r for r in audit_records(dc1, audit_topic) if r.tier == "dc1" and r.topic == topic]
    assert sum(r.count for r in counted) == 100 and not any(r.unknown for r in counted)


def test_a_failed_send_counts_in_the_window_of_its_message(local_clusters, topic_factory, unique_name):
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", config={"max.message.bytes": "600"})
    audit_topic = topic_factory("dc1", name=unique_name("_audit"))
    # per timestamp: refused by the producer (over max.request.size), then by the broker (over max.message.bytes)
    out = run(audited_sends("failed", dc1, topic, audit_topic, BASE_MS, BASE_MS + WINDOW_MS))
    assert out.split() == ["failed", "4"]

    records = audit_records(dc1, audit_topic)
    assert records and all(r.topic == topic and r.count == 0 and not r.unknown for r in records)
    failed = Counter()
    for record in records:
        failed[record.window_start_ms] += record.send_failed
    assert dict(failed) == {BASE_MS: 2, BASE_MS + WINDOW_MS: 2}


def test_counts_merge_while_the_audit_topic_refuses_and_dropped_windows_come_back_unknown(
    local_clusters, topic_factory, unique_name
):
    """The audit topic takes nothing (its max.message.bytes is below any record: the emitter sends again) while the
    producer writes to six windows with kaudit.tally.max.entries=3: the first window's record waits, the next five merge,
    the oldest two of them are dropped. Once the topic takes records again: the first window's record, the two
    dropped windows as count 0 and unknown, one record each for the three kept."""
    dc1 = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1")
    audit_topic = topic_factory("dc1", name=unique_name("_audit"), config={"max.message.bytes": "100"})
    windows = [BASE_MS + k * WINDOW_MS for k in range(6)]
    times = [windows[0], *windows[1:], windows[5] + 1, windows[5] + 2]
    argv = audited_sends("outage", dc1, topic, audit_topic, 3, *times)
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as probe:
        try:
            log = until_buffered(probe)
            assert raw_messages(dc1, audit_topic) == []
            set_topic_config(dc1, audit_topic, "max.message.bytes", "1000000")
            probe.stdin.write("go\n")
            probe.stdin.flush()
            assert probe.wait(timeout=60) == 0
            log += probe.stdout.read() + probe.stderr.read()
        finally:
            probe.kill()

    records = audit_records(dc1, audit_topic)
    got = sorted((r.window_start_ms, r.count, r.unknown) for r in records)
    assert got == [
        (windows[0], 1, False),
        (windows[1], 0, True),
        (windows[2], 0, True),
        (windows[3], 1, False),
        (windows[4], 1, False),
        (windows[5], 3, False),
    ]
    assert "dropped the oldest, to be reported unknown once it does: windows=" in log
    assert f"lost_windows={topic}=[{iso(windows[1], millis=False)}..{iso(windows[2], millis=False)}]" in log
