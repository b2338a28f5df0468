"""Real Apache Kafka clusters on loopback in KRaft mode: a single node (broker and controller in one JVM) by
default, or a controller and N brokers, each a process of its own (audit/local/cluster_nodes.py).

Each cluster has its own folder under `<state_dir>/clusters/<name>` holding its data, logs,
`server.properties` and `cluster.json` (ports, cluster id, pids). Ports are chosen free on the first
start and kept, so a stopped cluster comes back at the same address. Processes run in their own
session, so `kaudit clusters up` can exit and leave them running; every JVM carries a
`-Dkaudit.cluster=<folder>` marker so `down` can find strays whose pid file was lost. Storage is formatted
once per kind of cluster (Kafka jars and broker settings): Kafka's StorageTool, a JVM of its own, formats the
first, and later ones copy the bootstrap checkpoint it left under `<cache_dir>/kraft-formats/` and write their
own meta.properties.

Opt-in security (`security=ClusterSecurity(...)`, single node only): the client listener is SASL_SSL with SCRAM
users created when the storage is formatted, TLS certificates generated for the cluster (audit/local/certs.py),
and the broker talks to itself over the same listener as its first user; the controller listener
stays PLAINTEXT on loopback. Without it, the cluster is PLAINTEXT as before.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from audit.contract.errors import ClusterError, ConfigError
from audit.io import jvm
from audit.io.local_state import ClusterState, cluster_folder, load_state, state_file
from audit.local.broker_config import (
    multi_node_properties,
    plaintext_properties,
    sasl_ssl_properties,
    write_broker_files,
)
from audit.local.certs import ClusterSecurity, TlsFiles, ensure_tls_files
from audit.local.cluster_nodes import ClusterStatus, Node, cluster_nodes, node_pid, set_node_pid
from audit.local.kraft_format import (
    BOOTSTRAP_CHECKPOINT,
    format_from_template,
    keep_template,
    new_cluster_id,
    template_folder,
)
from audit.local.processes import MARKER_PROPERTY, free_port, marked_pids, pid_alive, port_open, terminate, wait_gone

if TYPE_CHECKING:
    from audit.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_HEAP_MB = 512
DEFAULT_START_TIMEOUT_S = 90.0
DEFAULT_STOP_TIMEOUT_S = 30.0

JVM_OPTIONS = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    # Two cores are shared by several brokers, Spark and the tests: keep GC threads few.
    "-XX:ParallelGCThreads=1",
    "-XX:ConcGCThreads=1",
    "-Djava.awt.headless=true",
]

# A local broker serves tests, demos and soaks: short lives and light traffic. There the C2 compiler costs
# more CPU than its code saves: C1 only cuts a broker's CPU for its start and nearly halves it for serving,
# on cores Spark shares. A bench that pushes a million messages through wants C2 (`quick_jit=False`), whose
# code then serves them much faster.
BROKER_JIT_OPTIONS = ["-XX:TieredStopAtLevel=1"]


class LocalCluster:
    """One KRaft cluster on loopback, started from the jars `make setup` cached: a single node (broker and
    controller in one JVM) by default, or a controller and `brokers` brokers, each a process of its own."""

    def __init__(
        self,
        name: str,
        *,
        state_dir: Path,
        cache_dir: Path,
        heap_mb: int = DEFAULT_HEAP_MB,
        broker_properties: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        security: ClusterSecurity | None = None,
        quick_jit: bool = True,
        class_data_options: list[str] | None = None,
        brokers: int | None = None,
    ) -> None:
        if brokers is not None and brokers < 1:
            raise ConfigError(f"{name}: brokers must be at least 1, not {brokers}")
        if security is not None and (brokers or 1) > 1:
            raise ConfigError(f"{name}: a secured local cluster runs a single node")
        self.name = name
        self.folder = cluster_folder(state_dir, name)
        self.cache_dir = Path(cache_dir).expanduser()
        self.heap_mb = heap_mb
        self.host = host
        self.broker_properties = dict(broker_properties or {})
        self.security = security
        self.jit_options = BROKER_JIT_OPTIONS if quick_jit else []
        # None: map the class-data archive `make setup` recorded (jvm.class_archive_options).
        self.class_data_options = class_data_options
        # None: as many as the cluster had when it was first started (1 for a new one).
        self.brokers = brokers
        self._processes: dict[int, subprocess.Popen] = {}

    # -- state ---------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return state_file(self.folder)

    @property
    def logs_dir(self) -> Path:
        return self.folder / "logs"

    def _load_state(self) -> ClusterState | None:
        return load_state(self.state_file)

    def _save_state(self, state: ClusterState) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)

    def _state(self) -> ClusterState:
        state = self._load_state()
        if state is None:
            state = ClusterState(
                name=self.name,
                cluster_id=new_cluster_id(),
                port=free_port(self.host),
                controller_port=free_port(self.host),
            )
            brokers = self.brokers or 1
            if brokers > 1:
                state.broker_ports = [state.port] + [free_port(self.host) for _ in range(brokers - 1)]
                state.broker_pids = [None] * brokers
            self._save_state(state)
        elif self.brokers is not None and self.brokers != len(state.client_ports):
            raise ClusterError(
                f"{self.name}: formatted for {len(state.client_ports)} broker(s), not {self.brokers}; "
                f"`kaudit clusters down {self.name}` and remove {self.folder} to change it"
            )
        return state

    def nodes(self, state: ClusterState | None = None) -> list[Node]:
        """Every JVM of the cluster, the controller (or the single node) first."""
        return cluster_nodes(self.folder, state or self._state())

    @property
    def bootstrap_servers(self) -> str:
        state = self._load_state()
        if state is None:
            raise ClusterError(f"{self.name}: never started (no {self.state_file})")
        return ",".join(f"{self.host}:{port}" for port in state.client_ports)

    @property
    def pid(self) -> int | None:
        """The single node's pid, or a multi-broker cluster's controller's; None when it is not running."""
        state = self._load_state()
        return state.pid if state and pid_alive(state.pid) else None

    def broker_pid(self, node_id: int) -> int | None:
        """The pid of broker `node_id` (1..N; 1 is a single node's JVM), None when it is not running."""
        state = self._state()
        for node in self.nodes(state):
            if node.port and node.node_id == node_id:
                pid = node_pid(state, node)
                return pid if pid_alive(pid) else None
        raise ClusterError(f"{self.name}: no broker {node_id}")

    def is_running(self) -> bool:
        """Whether every JVM of the cluster runs."""
        state = self._load_state()
        return state is not None and all(pid_alive(node_pid(state, node)) for node in self.nodes(state))

    # -- security ------------------------------------------------------------------------------

    @property
    def tls(self) -> TlsFiles:
        """The cluster's certificates (generated on first use); only for a secured cluster."""
        if self.security is None:
            raise ClusterError(f"{self.name}: a PLAINTEXT cluster has no certificates")
        return ensure_tls_files(self.folder / "tls", hosts=(self.host, "localhost"))

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """librdkafka settings that reach this cluster: the address and, when secured, SASL_SSL as
        `user` (default: the broker's own user)."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.security is not None:
            user = user or self.security.broker_user
            config.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": self.security.mechanism,
                    "sasl.username": user,
                    "sasl.password": self.security.users[user],
                    "ssl.ca.location": str(self.tls.ca),
                }
            )
        return config

    # -- configuration files -------------------------------------------------------------------

    def server_properties(self, state: ClusterState, node: Node | None = None) -> dict[str, str]:
        """The settings of `node` (default: the single node, or the controller)."""
        node = node or self.nodes(state)[0]
        if state.broker_ports:
            props = multi_node_properties(self.host, node, state.controller_port, len(state.broker_ports))
        else:
            props = plaintext_properties(self.host, state, node.data_dir)
            if self.security is not None:
                props.update(sasl_ssl_properties(self.host, state, self.security, self.tls))
        props.update(self.broker_properties)
        return props

    def _write_config(self, state: ClusterState, node: Node | None = None) -> Path:
        node = node or self.nodes(state)[0]
        return write_broker_files(node.folder, node.logs_dir, self.server_properties(state, node))

    def _java_command(self, main_class: str, *args: str, node: Node | None = None) -> list[str]:
        folder = node.folder if node else self.folder
        return [
            jvm.java_executable(),
            f"-Xms{min(256, self.heap_mb)}m",
            f"-Xmx{self.heap_mb}m",
            *JVM_OPTIONS,
            *self.jit_options,
            *(
                jvm.class_archive_options(self.cache_dir, jvm.KAFKA_JARS)
                if self.class_data_options is None
                else self.class_data_options
            ),
            f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={folder / 'logs'}",
            f"-D{MARKER_PROPERTY}={folder}",
            "-cp",
            jvm.classpath(self.cache_dir, jvm.KAFKA_JARS),
            main_class,
            *args,
        ]

    # -- lifecycle -----------------------------------------------------------------------------

    def _format(self, state: ClusterState) -> None:
        """Format the storage: Kafka's StorageTool, a JVM of its own, the first time; later clusters of the same
        jars and settings copy what it wrote (`_format_template`). A multi-broker cluster's brokers copy its
        controller's format, each with its own node id."""
        first, *others = self.nodes(state)
        template = self._format_template(state)
        if template is None or not format_from_template(template, first.data_dir, state.cluster_id, first.node_id):
            self._format_with_storage_tool(state, self._write_config(state, first))
            if template is not None:
                keep_template(first.data_dir / BOOTSTRAP_CHECKPOINT, template)
        for node in others:
            format_from_template(first.data_dir, node.data_dir, state.cluster_id, node.node_id)
        state.formatted = True

    def _format_template(self, state: ClusterState | None = None) -> Path | None:
        """Where a format of this cluster's kind is kept (kraft_format.template_folder). None for a secured
        cluster, whose SCRAM users are written at format time and stay with the cluster alone, or more than one
        log directory."""
        if self.security is not None:
            return None
        props = self.server_properties(state or self._state())
        if "," in props["log.dirs"]:
            return None
        return template_folder(self.cache_dir, jvm.classpath(self.cache_dir, jvm.KAFKA_JARS), props)

    def _format_with_storage_tool(self, state: ClusterState, props_file: Path) -> None:
        scram = []
        if self.security is not None:  # SCRAM credentials live in the metadata log, written at format time
            for user, password in self.security.users.items():
                scram += ["--add-scram", f"{self.security.mechanism}=[name={user},password={password}]"]
        command = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            f"--cluster-id={state.cluster_id}",
            "--config",
            str(props_file),
            *scram,
            node=self.nodes(state)[0],
        )
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()[-2000:]
            for password in self.security.users.values() if self.security else ():
                output = output.replace(password, "****")
            raise ClusterError(f"{self.name}: formatting storage failed (exit {result.returncode}): {output}")

    def launch(self) -> bool:
        """Start every JVM of the cluster that is not running, without waiting for them; False when all run."""
        state = self._state()
        nodes = self.nodes(state)
        stopped = [node for node in nodes if not pid_alive(node_pid(state, node))]
        if not stopped:
            return False
        running = {node_pid(state, node) for node in nodes} - {None}
        stray = [pid for node in stopped for pid in marked_pids(str(node.folder)) if pid not in running]
        if stray:
            raise ClusterError(
                f"{self.name}: a JVM of this cluster is running without a pid file (pids {stray}); run `kaudit clusters down`"
            )
        props_files = {node.node_id: self._write_config(state, node) for node in stopped}
        if not state.formatted:
            self._format(state)
        for node in stopped:
            set_node_pid(state, node, self._start_node(node, props_files[node.node_id]))
        self._save_state(state)
        log.info("cluster launched", extra={"cluster": self.name, "pid": state.pid, "port": state.port})
        return True

    def _start_node(self, node: Node, props_file: Path) -> int:
        stdout = open(node.logs_dir / "stdout.log", "ab")
        process = subprocess.Popen(
            self._java_command("kafka.Kafka", str(props_file), node=node),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=node.folder,
        )
        stdout.close()
        self._processes[node.node_id] = process
        return process.pid

    def wait_ready(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Block until a metadata request answers with every broker; raise with the log tail if not."""
        deadline = time.monotonic() + timeout_s
        state = self._state()
        bootstrap = self.bootstrap_servers
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            exited = [node for node in self.nodes(state) if not pid_alive(node_pid(state, node))]
            if exited:
                raise ClusterError(f"{self.name}: {exited[0].label} exited while starting\n{self.log_tail()}")
            if port_open(self.host, state.client_ports[0]):
                try:
                    metadata = _admin(self.client_config()).list_topics(timeout=2)
                    if len(metadata.brokers) >= len(state.client_ports):
                        return
                except Exception as exc:  # the broker is still coming up; retry until the deadline
                    last_error = str(exc)
            time.sleep(0.2)
        raise ClusterError(
            f"{self.name}: not ready after {timeout_s:.0f} s at {bootstrap} ({last_error})\n{self.log_tail()}"
        )

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Start (if not running) and wait until ready; returns the seconds it took."""
        began = time.monotonic()
        self.launch()
        self.wait_ready(timeout_s)
        return time.monotonic() - began

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`; also ends strays carrying our marker. A multi-broker cluster's
        brokers go first: a broker's controlled shutdown asks the controller to move its leaders."""
        state = self._load_state()
        if state:
            terminate({pid for pid in state.broker_pids if pid_alive(pid)}, timeout_s)
        pids = set(marked_pids(str(self.folder)))
        if state and pid_alive(state.pid):
            pids.add(state.pid)
        terminate(pids, timeout_s)
        self._reap()
        if state:
            state.pid = None
            state.broker_pids = [None] * len(state.broker_pids)
            self._save_state(state)

    def kill(self) -> None:
        """kill -9 every JVM of the cluster, as a crash would: for fault-injection tests."""
        state = self._load_state()
        pids = [node_pid(state, node) for node in self.nodes(state)] if state else []
        self._kill([pid for pid in pids if pid_alive(pid)])

    def kill_broker(self, node_id: int) -> None:
        """kill -9 broker `node_id` alone, as a crash of that machine would."""
        pid = self.broker_pid(node_id)
        self._kill([pid] if pid else [])

    def _kill(self, pids: list[int]) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        wait_gone(pids, 10)
        self._reap()

    def _reap(self) -> None:
        """Collect the exits of the JVMs this object started that are gone."""
        for node_id, process in list(self._processes.items()):
            if not pid_alive(process.pid):
                process.wait(timeout=5)
                del self._processes[node_id]

    def status(self) -> ClusterStatus:
        state = self._load_state()
        pid = state.pid if state and pid_alive(state.pid) else None
        bootstrap = self.bootstrap_servers if state else ""
        broker_pids = tuple(p if pid_alive(p) else None for p in state.broker_pids) if state else ()
        healthy = False
        if pid:
            try:
                brokers = _admin(self.client_config()).list_topics(timeout=3).brokers
                healthy = len(brokers) >= len(state.client_ports)
            except Exception:  # status reports health; it never raises for an unhealthy broker
                healthy = False
        return ClusterStatus(self.name, bootstrap, pid, healthy, str(self.folder), broker_pids)

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        state = self._load_state()
        for node in self.nodes(state) if state else []:
            for name in ("stdout.log", "server.log"):
                path = node.logs_dir / name
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    parts.append(f"--- {path} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)


class LocalClusters:
    """Several independent local clusters, started in parallel."""

    def __init__(self, names: Iterable[str], *, state_dir: Path, cache_dir: Path, **options) -> None:
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.clusters = {
            name: LocalCluster(name, state_dir=state_dir, cache_dir=cache_dir, **options) for name in names
        }

    def __getitem__(self, name: str) -> LocalCluster:
        return self.clusters[name]

    def __iter__(self):
        return iter(self.clusters.values())

    def bootstrap_servers(self) -> dict[str, str]:
        return {name: cluster.bootstrap_servers for name, cluster in self.clusters.items()}

    def up(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> dict[str, float]:
        """Start every cluster not yet running; seconds until each was ready (0.0: already up)."""
        began = time.monotonic()
        launched = {}
        with ThreadPoolExecutor(max_workers=len(self.clusters) or 1) as pool:
            for name, started in zip(self.clusters, pool.map(LocalCluster.launch, self.clusters.values())):
                launched[name] = started
        ready = {}
        for name, cluster in self.clusters.items():
            cluster.wait_ready(max(1.0, timeout_s - (time.monotonic() - began)))
            ready[name] = (time.monotonic() - began) if launched[name] else 0.0
        return ready

    def down(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        with ThreadPoolExecutor(max_workers=len(self.clusters) or 1) as pool:
            list(pool.map(lambda cluster: cluster.stop(timeout_s), self.clusters.values()))
        strays = marked_pids(str(self.state_dir / "clusters"))
        terminate(set(strays), timeout_s)

    def status(self) -> list[ClusterStatus]:
        return [cluster.status() for cluster in self.clusters.values()]


def _admin(config: Mapping[str, str]) -> AdminClient:
    # log_level 3 (error) hides librdkafka's connection-refused chatter while a broker starts.
    return AdminClient({**config, "log_level": 3, "socket.timeout.ms": 2000})


def local_clusters(settings: Settings, names: list[str] | None = None, brokers: int | None = None) -> LocalClusters:
    """The configured clusters that are local (no bootstrap address given), optionally a subset; `brokers`:
    how many brokers each has (None: as each was first started, 1 for a new one)."""
    local = [cluster.name for cluster in settings.clusters if cluster.local]
    chosen = names or local
    unknown = sorted(set(chosen) - set(local))
    if unknown:
        raise ConfigError(f"clusters: {', '.join(unknown)} not among the local clusters ({', '.join(local) or 'none'})")
    return LocalClusters(chosen, state_dir=settings.state_dir, cache_dir=settings.cache_dir, brokers=brokers)
