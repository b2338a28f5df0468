"""The files a local broker runs from: its `server.properties` (one node, broker and controller in one JVM,
PLAINTEXT on loopback, or SASL_SSL with SCRAM users when secured; or one node of a multi-broker cluster, a
controller or a broker, PLAINTEXT) and its log4j2 configuration."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from audit.io.local_state import ClusterState
from audit.local.certs import ClusterSecurity, TlsFiles
from audit.local.cluster_nodes import CONTROLLER_NODE_ID, CONTROLLER_ROLE, Node, replication_properties

# Small internal topics: a single node needs no replication, and fewer partitions make the first
# consumer group and the first transaction ready in well under a second.
BASE_BROKER_PROPERTIES: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "4",
    # Keep by size, not age: tests and demos backfill messages with old timestamps, which an age
    # limit would delete at the next retention check.
    "log.retention.ms": "-1",
    "log.retention.bytes": str(1 << 30),
    # The controller writes a no-op record this often when nothing else happens (default 500 ms). A single
    # node has no follower to keep informed, and the default keeps an idle broker busy for nothing.
    "metadata.max.idle.interval.ms": "5000",
}

LOG4J2_TEMPLATE = """\
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {logs}/server.log
appender.file.filePattern = {logs}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


def plaintext_properties(host: str, state: ClusterState, data_dir: Path) -> dict[str, str]:
    """The broker's settings without security: the base ones, PLAINTEXT and CONTROLLER listeners on `host` at
    the state's ports, and its log directory."""
    return {
        **BASE_BROKER_PROPERTIES,
        "listeners": f"PLAINTEXT://{host}:{state.port},CONTROLLER://{host}:{state.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{state.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": f"1@{host}:{state.controller_port}",
        "log.dirs": str(data_dir),
    }


def multi_node_properties(host: str, node: Node, controller_port: int, brokers: int) -> dict[str, str]:
    """The settings of one node of a multi-broker cluster: the base ones with the replication of `brokers`
    brokers, its role and node id, its listener on `host` (the controller's alone, or PLAINTEXT) and its log
    directory. The controller holds the topic defaults too: it creates the topics."""
    props = {
        **BASE_BROKER_PROPERTIES,
        **replication_properties(brokers),
        "process.roles": node.roles,
        "node.id": str(node.node_id),
        "controller.quorum.voters": f"{CONTROLLER_NODE_ID}@{host}:{controller_port}",
        "log.dirs": str(node.data_dir),
    }
    if node.roles == CONTROLLER_ROLE:
        del props["inter.broker.listener.name"]
        props["listeners"] = f"CONTROLLER://{host}:{controller_port}"
        props["listener.security.protocol.map"] = "CONTROLLER:PLAINTEXT"
    else:
        props["listeners"] = props["advertised.listeners"] = f"PLAINTEXT://{host}:{node.port}"
        props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    return props


def sasl_ssl_properties(host: str, state: ClusterState, security: ClusterSecurity, tls: TlsFiles) -> dict[str, str]:
    """What a secured broker changes of `plaintext_properties`: the client listener as SASL_SSL with SCRAM, the
    broker talking to itself over it as its first user; the controller listener stays PLAINTEXT on loopback."""
    jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{security.broker_user}" '
        f'password="{security.users[security.broker_user]}";'
    )
    return {
        "listeners": f"SASL_SSL://{host}:{state.port},CONTROLLER://{host}:{state.controller_port}",
        "advertised.listeners": f"SASL_SSL://{host}:{state.port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": security.mechanism,
        "sasl.mechanism.inter.broker.protocol": security.mechanism,
        f"listener.name.sasl_ssl.{security.mechanism.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca),
        "ssl.client.auth": "none",
    }


def write_broker_files(folder: Path, logs_dir: Path, properties: Mapping[str, str]) -> Path:
    """`server.properties` (sorted) and `log4j2.properties` in `folder`; returns the first."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    props_file = folder / "server.properties"
    lines = [f"{key}={value}" for key, value in sorted(properties.items())]
    props_file.write_text("\n".join(lines) + "\n")
    (folder / "log4j2.properties").write_text(LOG4J2_TEMPLATE.format(logs=logs_dir))
    return props_file
