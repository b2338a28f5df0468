"""The local cluster launcher against real Apache Kafka brokers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer

from audit.contract.errors import ClusterError, SetupError
from audit.local.clusters import LocalCluster, LocalClusters
from audit.local.processes import marked_pids, pid_alive
from tests.conftest import SESSION_CLUSTERS, cache_dir

MESSAGES = 10_000
PARTITIONS = 3


def expected_messages(cluster: str) -> list[dict]:
    base_ts = 1_700_000_000_000
    return [
        {
            "key": f"key-{i}".encode(),
            "value": f"{cluster}-value-{i}-".encode() + bytes([i % 256]) * (i % 50),
            "headers": [("seq", str(i).encode()), ("origin", cluster.encode()), ("empty", b"")],
            "timestamp": base_ts + i * 37,
            "partition": i % PARTITIONS,
        }
        for i in range(MESSAGES)
    ]


@pytest.mark.kafka
@pytest.mark.parametrize("cluster", SESSION_CLUSTERS)
def test_ten_thousand_messages_round_trip_with_headers_and_timestamps(
    cluster, local_clusters, topic_factory, unique_name
):
    topic = topic_factory(cluster, partitions=PARTITIONS)
    bootstrap = local_clusters[cluster].bootstrap_servers
    sent = expected_messages(cluster)
    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for message in sent:
        producer.produce(
            topic,
            key=message["key"],
            value=message["value"],
            headers=message["headers"],
            timestamp=message["timestamp"],
            partition=message["partition"],
            on_delivery=lambda err, _msg: err and failures.append(err),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("group"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received = {}
    deadline = time.monotonic() + 60
    while len(received) < MESSAGES and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1):
            assert msg.error() is None, msg.error()
            seq = int(dict(msg.headers())["seq"])
            assert seq not in received, f"message {seq} delivered twice"
            received[seq] = msg
    consumer.close()

    assert len(received) == MESSAGES
    for i, message in enumerate(sent):
        got = received[i]
        assert got.key() == message["key"]
        assert got.value() == message["value"]
        assert got.headers() == message["headers"]
        assert got.timestamp() == (1, message["timestamp"])  # 1: TIMESTAMP_CREATE_TIME
        assert got.partition() == message["partition"]


@pytest.mark.kafka
def test_up_twice_does_not_start_twice(local_clusters):
    pids = {cluster.name: cluster.pid for cluster in local_clusters}
    assert all(pids.values())
    assert all(seconds == 0.0 for seconds in local_clusters.up().values())
    assert {cluster.name: cluster.pid for cluster in local_clusters} == pids


@pytest.mark.kafka
def test_status_names_address_pid_and_health(local_clusters):
    for status in local_clusters.status():
        assert status.healthy
        assert status.pid and pid_alive(status.pid)
        assert status.bootstrap_servers == local_clusters[status.name].bootstrap_servers


@pytest.mark.kafka
def test_restart_keeps_address_and_data_and_down_leaves_no_jvm(tmp_path):
    cluster = LocalCluster("scratch", state_dir=tmp_path, cache_dir=cache_dir())
    clusters = LocalClusters(["scratch"], state_dir=tmp_path, cache_dir=cache_dir())
    try:
        cluster.start()
        address = cluster.bootstrap_servers
        producer = Producer({"bootstrap.servers": address})
        from audit.io.clients import ensure_topics

        ensure_topics({"bootstrap.servers": address}, {"kept": 1})
        producer.produce("kept", value=b"survives a restart")
        assert producer.flush(10) == 0

        cluster.stop()
        assert not cluster.is_running()
        assert marked_pids(str(tmp_path)) == []

        cluster.start()
        assert cluster.bootstrap_servers == address
        consumer = Consumer({"bootstrap.servers": address, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["kept"])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1)
        consumer.close()
        assert msg is not None and msg.value() == b"survives a restart"
    finally:
        clusters.down()
    assert marked_pids(str(tmp_path)) == []


def test_broker_that_cannot_start_reports_its_log(tmp_path):
    cluster = LocalCluster(
        "broken", state_dir=tmp_path, cache_dir=cache_dir(), broker_properties={"num.io.threads": "zero"}
    )
    with pytest.raises(ClusterError) as caught:
        cluster.start(timeout_s=60)
    message = str(caught.value)
    assert "broken" in message and "num.io.threads" in message
    assert marked_pids(str(tmp_path)) == []


def test_missing_jars_say_to_run_setup(tmp_path):
    with pytest.raises(SetupError, match="make setup"):
        LocalCluster("nojars", state_dir=tmp_path, cache_dir=tmp_path / "empty-cache").start()


def test_a_broker_runs_c1_only_unless_a_bench_asks_for_c2(tmp_path):
    quick = LocalCluster("quick", state_dir=tmp_path, cache_dir=cache_dir())._java_command("kafka.Kafka")
    full = LocalCluster("full", state_dir=tmp_path, cache_dir=cache_dir(), quick_jit=False)._java_command("kafka.Kafka")
    assert "-XX:TieredStopAtLevel=1" in quick
    assert "-XX:TieredStopAtLevel=1" not in full


def test_pid_alive_is_false_for_an_exited_process():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not pid_alive(process.pid)
    assert not pid_alive(None)


def test_cluster_ids_never_look_like_an_option():
    from audit.local.kraft_format import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def _meta(folder) -> dict[str, str]:
    lines = (folder / "data" / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.mark.kafka
def test_a_cluster_formatted_from_the_kept_format_starts_with_its_own_ids(tmp_path):
    """Kafka's StorageTool (a JVM start) formats a cluster's storage once per kind; the next copies its bootstrap
    checkpoint and writes meta.properties itself: the same keys, its own cluster and directory ids."""
    from confluent_kafka.admin import AdminClient

    by_tool = LocalCluster("by-tool", state_dir=tmp_path, cache_dir=cache_dir())
    state = by_tool._state()
    by_tool._format_with_storage_tool(state, by_tool._write_config(state))
    first, second = (LocalCluster(name, state_dir=tmp_path, cache_dir=cache_dir()) for name in ("first", "second"))
    clusters = LocalClusters(["first", "second"], state_dir=tmp_path, cache_dir=cache_dir())
    try:
        first.start()
        template = first._format_template()
        assert (template / "bootstrap.checkpoint").is_file()
        second.start()
        assert (second.folder / "data" / "bootstrap.checkpoint").read_bytes() == (
            template / "bootstrap.checkpoint"
        ).read_bytes()
        for cluster in (first, second):
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            assert admin.describe_cluster().result(30).cluster_id == cluster._state().cluster_id
    finally:
        clusters.down()
    tool, copied, other = _meta(by_tool.folder), _meta(second.folder), _meta(first.folder)
    assert copied.keys() == tool.keys() and {k: copied[k] for k in ("node.id", "version")} == {
        k: tool[k] for k in ("node.id", "version")
    }
    assert copied["directory.id"] != other["directory.id"] and copied["cluster.id"] != other["cluster.id"]


def test_formats_kept_at_once_by_several_threads_leave_one_template_and_no_partial_copy(tmp_path):
    """`kaudit clusters up` on a new cache formats its clusters side by side, each keeping what it wrote."""
    from concurrent.futures import ThreadPoolExecutor

    from audit.local.kraft_format import keep_template

    checkpoints = []
    for index in range(8):
        checkpoint = tmp_path / f"formatted-{index}" / "bootstrap.checkpoint"
        checkpoint.parent.mkdir()
        checkpoint.write_bytes(b"bootstrap %d" % index)
        checkpoints.append(checkpoint)
    template = tmp_path / "kraft-formats" / "kind"
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda checkpoint: keep_template(checkpoint, template), checkpoints))
    assert [path.name for path in template.parent.iterdir()] == ["kind"]
    assert (template / "bootstrap.checkpoint").read_bytes() in {c.read_bytes() for c in checkpoints}
