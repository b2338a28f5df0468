"""Real Apache Kafka clusters on loopback: single-node KRaft (broker and controller in one JVM).

Each cluster has its own folder under `<state_dir>/clusters/<name>` holding its data, logs,
`server.properties` and `cluster.json` (ports, cluster id, pid). Ports are chosen free on the first
start and kept, so a stopped cluster comes back at the same address. Processes run in their own
session, so `kaudit clusters up` can exit and leave them running; every JVM carries a
`-Dkaudit.cluster=<folder>` marker so `down` can find strays whose pid file was lost. Storage is formatted
once per kind of cluster (Kafka jars and broker settings): Kafka's StorageTool, a JVM of its own, formats the
first, and later ones copy the bootstrap checkpoint it left under `<cache_dir>/kraft-formats/` and write their
own meta.properties.

Opt-in security (`security=ClusterSecurity(...)`): the client listener is SASL_SSL with SCRAM users
created when the storage is formatted, TLS certificates generated for the cluster (audit/local/certs.py),
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from audit.contract.errors import ClusterError, ConfigError
from audit.io import jvm
from audit.io.local_state import ClusterState, cluster_folder, load_state, state_file
from audit.local.broker_config import plaintext_properties, sasl_ssl_properties, write_broker_files
from audit.local.certs import ClusterSecurity, TlsFiles, ensure_tls_files
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


@dataclass(frozen=True)
class ClusterStatus:
    """What `kaudit clusters status` prints for one cluster."""

    name: str
    bootstrap_servers: str
    pid: int | None
    healthy: bool
    folder: str


class LocalCluster:
    """One single-node KRaft cluster on loopback, started from the jars `make setup` cached."""

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
    ) -> None:
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
        self._process: subprocess.Popen | None = None

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
            self._save_state(state)
        return state

    @property
    def bootstrap_servers(self) -> str:
        state = self._load_state()
        if state is None:
            raise ClusterError(f"{self.name}: never started (no {self.state_file})")
        return f"{self.host}:{state.port}"

    @property
    def pid(self) -> int | None:
        state = self._load_state()
        return state.pid if state and pid_alive(state.pid) else None

    def is_running(self) -> bool:
        return self.pid is not None

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

    def server_properties(self, state: ClusterState) -> dict[str, str]:
        props = plaintext_properties(self.host, state, self.folder / "data")
        if self.security is not None:
            props.update(sasl_ssl_properties(self.host, state, self.security, self.tls))
        props.update(self.broker_properties)
        return props

    def _write_config(self, state: ClusterState) -> Path:
        return write_broker_files(self.folder, self.logs_dir, self.server_properties(state))

    def _java_command(self, main_class: str, *args: str) -> list[str]:
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
            f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.logs_dir}",
            f"-D{MARKER_PROPERTY}={self.folder}",
            "-cp",
            jvm.classpath(self.cache_dir, jvm.KAFKA_JARS),
            main_class,
            *args,
        ]

    # -- lifecycle -----------------------------------------------------------------------------

    def _format(self, state: ClusterState, props_file: Path) -> None:
        """Format the storage: Kafka's StorageTool, a JVM of its own, the first time; later clusters of the same
        jars and settings copy what it wrote (`_format_template`)."""
        data_dir = Path(self.server_properties(state)["log.dirs"])
        template = self._format_template()
        if template is None or not format_from_template(template, data_dir, state.cluster_id):
            self._format_with_storage_tool(state, props_file)
            if template is not None:
                keep_template(data_dir / BOOTSTRAP_CHECKPOINT, template)
        state.formatted = True

    def _format_template(self) -> Path | None:
        """Where a format of this cluster's kind is kept (kraft_format.template_folder). None for a secured
        cluster, whose SCRAM users are written at format time and stay with the cluster alone, or more than one
        log directory."""
        props = self.server_properties(ClusterState(name="", cluster_id="", port=0, controller_port=0))
        if self.security is not None or "," in props["log.dirs"]:
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
        )
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()[-2000:]
            for password in self.security.users.values() if self.security else ():
                output = output.replace(password, "****")
            raise ClusterError(f"{self.name}: formatting storage failed (exit {result.returncode}): {output}")

    def launch(self) -> bool:
        """Start the JVM without waiting for it; False when it is already running."""
        state = self._state()
        if pid_alive(state.pid):
            return False
        stray = marked_pids(str(self.folder))
        if stray:
            raise ClusterError(
                f"{self.name}: a JVM of this cluster is running without a pid file (pids {stray}); run `kaudit clusters down`"
            )
        props_file = self._write_config(state)
        if not state.formatted:
            self._format(state, props_file)
        stdout = open(self.logs_dir / "stdout.log", "ab")
        self._process = subprocess.Popen(
            self._java_command("kafka.Kafka", str(props_file)),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.folder,
        )
        stdout.close()
        state.pid = self._process.pid
        self._save_state(state)
        log.info("cluster launched", extra={"cluster": self.name, "pid": state.pid, "port": state.port})
        return True

    def wait_ready(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Block until a metadata request answers with our broker; raise with the log tail if not."""
        deadline = time.monotonic() + timeout_s
        bootstrap = self.bootstrap_servers
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if not self.is_running():
                raise ClusterError(f"{self.name}: the broker exited while starting\n{self.log_tail()}")
            if port_open(self.host, int(bootstrap.rsplit(":", 1)[1])):
                try:
                    metadata = _admin(self.client_config()).list_topics(timeout=2)
                    if metadata.brokers:
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
        """SIGTERM, then SIGKILL after `timeout_s`; also ends strays carrying our marker."""
        state = self._load_state()
        pids = set(marked_pids(str(self.folder)))
        if state and pid_alive(state.pid):
            pids.add(state.pid)
        terminate(pids, timeout_s)
        if self._process is not None:
            self._process.wait(timeout=5)
            self._process = None
        if state:
            state.pid = None
            self._save_state(state)

    def kill(self) -> None:
        """kill -9, as a crash would: for fault-injection tests."""
        pid = self.pid
        if pid:
            os.kill(pid, signal.SIGKILL)
            wait_gone([pid], 10)
        if self._process is not None:
            self._process.wait(timeout=5)
            self._process = None

    def status(self) -> ClusterStatus:
        state = self._load_state()
        pid = state.pid if state and pid_alive(state.pid) else None
        bootstrap = f"{self.host}:{state.port}" if state else ""
        healthy = False
        if pid:
            try:
                healthy = bool(_admin(self.client_config()).list_topics(timeout=3).brokers)
            except Exception:  # status reports health; it never raises for an unhealthy broker
                healthy = False
        return ClusterStatus(self.name, bootstrap, pid, healthy, str(self.folder))

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for name in ("stdout.log", "server.log"):
            path = self.logs_dir / name
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


def local_clusters(settings: Settings, names: list[str] | None = None) -> LocalClusters:
    """The configured clusters that are local (no bootstrap address given), optionally a subset."""
    local = [cluster.name for cluster in settings.clusters if cluster.local]
    chosen = names or local
    unknown = sorted(set(chosen) - set(local))
    if unknown:
        raise ConfigError(f"clusters: {', '.join(unknown)} not among the local clusters ({', '.join(local) or 'none'})")
    return LocalClusters(chosen, state_dir=settings.state_dir, cache_dir=settings.cache_dir)
