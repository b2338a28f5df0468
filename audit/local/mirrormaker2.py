"""Apache MirrorMaker 2 (dedicated mode, from the Maven Central jars `make setup` caches) as a replicator
kafka-audit did not write: for the tests that hold the audit to it and for `bench/bench_mirror.py`.

MM2's default replication policy names a copy `<source alias>.<topic>`, as `--naming prefix` does, so a
source cluster's alias is its kafka-audit cluster name and the books read MM2's copies like our own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from audit.io import jvm
from audit.local.clusters import JVM_OPTIONS
from audit.local.processes import free_port, terminate

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
"""


def mm2_properties(
    bootstrap: dict[str, str], source: str, target: str, topics: str, *, exactly_once: bool = False
) -> dict[str, str]:
    """One flow `source` -> `target` of the clusters in `bootstrap` (alias -> servers), copying the topics
    matching the regex `topics`: acks=all, idempotent, one task, heartbeats and checkpoints off (offset syncs
    stay on: the source connector refuses to run without them), replication factor 1 for loopback clusters."""
    properties = {
        "clusters": ", ".join(bootstrap),
        **{f"{alias}.bootstrap.servers": servers for alias, servers in bootstrap.items()},
        f"{source}->{target}.enabled": "true",
        f"{target}->{source}.enabled": "false",
        f"{source}->{target}.topics": topics,
        "tasks.max": "1",
        **{
            f"{kind}.replication.factor": "1"
            for kind in ("offset-syncs.topic", "heartbeats.topic", "checkpoints.topic", "config.storage")
        },
        "replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "5",
        f"{target}.producer.acks": "all",
        f"{target}.producer.enable.idempotence": "true",
        f"{source}.consumer.auto.offset.reset": "earliest",
    }
    if exactly_once:
        properties[f"{target}.exactly.once.source.support"] = "enabled"
        properties["dedicated.mode.enable.internal.rest"] = "true"  # KIP-618 asks for it
        properties["listeners"] = f"http://127.0.0.1:{free_port()}"
        properties[f"{source}.consumer.isolation.level"] = "read_committed"
    return properties


def mm2_command(folder: Path, name: str, properties: dict[str, str], target: str, cache_dir: str) -> list[str]:
    """The command line of MM2 with `properties`, driving the flows into `target`; its files are `folder/<name>*`,
    its log `folder/<name>.log`."""
    config = folder / f"{name}.properties"
    config.write_text("".join(f"{key} = {value}\n" for key, value in properties.items()))
    log4j = folder / f"{name}-log4j2.properties"
    log4j.write_text(LOG4J2.format(log=folder / f"{name}.log"))
    return [
        jvm.java_executable(),
        "-Xms256m",
        "-Xmx1024m",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        jvm.classpath(cache_dir, jvm.MIRRORMAKER_JARS),
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(config),
        "--clusters",
        target,
    ]


@contextmanager
def running_mm2(folder: Path, name: str, properties: dict[str, str], target: str, cache_dir: str) -> Iterator[Path]:
    """MM2 running until the block ends (then stopped: SIGTERM, SIGKILL after 20 s); yields its log's path."""
    process = subprocess.Popen(
        mm2_command(folder, name, properties, target, cache_dir), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        yield folder / f"{name}.log"
    finally:
        terminate({process.pid}, 20)
