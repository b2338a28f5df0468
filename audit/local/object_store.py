"""A real S3-compatible object store on loopback: SeaweedFS, started by the project as it starts Kafka, so the
tests run the lake (Spark's S3A, delta-rs, boto3) against the S3 protocol rather than a local folder or a mock.

    with start_object_store(state_dir, cache_dir) as store:
        store.create_bucket("lake")
        spark_session(..., conf=store.spark_conf())  # then s3a://lake/...

`make setup` builds the pinned `weed` from source with Go. `weed mini` runs master, volume server, filer and S3
gateway in one process; every port it listens on is a free loopback port, requests must carry a SigV4 signature
of the one identity written at start, and data and log stay under the state folder.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from audit.contract.errors import HarnessError, SetupError
from audit.local.processes import free_port, pid_alive, terminate

# The SeaweedFS module version the Makefile builds (it reads this line); a new one is built beside the old.
WEED_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
HOST = "127.0.0.1"
REGION = "us-east-1"
START_TIMEOUT_S = 60.0
# SIGTERM's grace before SIGKILL. `weed mini` stops its parts in order (S3 and filer before the volume server) in
# under a second; `weed server` stops the volume server first, then its filer waits 15 s to flush its log.
STOP_GRACE_S = 8.0

# The ports of one `weed mini`, each given explicitly: a gRPC port left out is the HTTP port + 10000, which can
# land in the kernel's ephemeral range, and the Iceberg, Lance and legacy admin ports have fixed defaults.
PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
    "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
)  # fmt: skip
DISABLED_PORT_FLAGS = ("s3.port.iceberg", "s3.port.lance", "admin.port.legacy")


def weed_binary(cache_dir: Path) -> Path:
    """The `weed` binary `make setup` built for WEED_VERSION; an error that says to run it when missing."""
    path = Path(cache_dir).expanduser() / "bin" / f"weed-{WEED_VERSION}"
    if not os.access(path, os.X_OK):
        raise SetupError(f"no SeaweedFS binary at {path}: run `make setup` to build it (needs Go)")
    return path


@dataclass(frozen=True)
class ObjectStore:
    """A running store: where it answers, who may call it, where it keeps its data and log."""

    endpoint: str
    access_key_id: str
    secret_access_key: str = field(repr=False)  # kept out of test reports and logs
    data_dir: Path
    log_file: Path
    pid: int
    ports: tuple[int, ...]  # every TCP port it was told to listen on
    region: str = REGION
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)  # when we started it

    def client(self):
        """A boto3 S3 client with this store's identity, path-style addressing (no bucket DNS on loopback)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, connect_timeout=2),
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket `name` with a real S3 call (one the store already has is kept); returns the name."""
        client = self.client()
        try:
            client.create_bucket(Bucket=name)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name

    def spark_conf(self) -> dict[str, str]:
        """`spark.hadoop.fs.s3a.*` settings that point S3A at this store (for `spark_session(conf=...)`)."""
        s3a = {
            "endpoint": self.endpoint,
            "endpoint.region": self.region,
            "path.style.access": "true",
            "connection.ssl.enabled": "false",
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "access.key": self.access_key_id,
            "secret.key": self.secret_access_key,
        }
        return {f"spark.hadoop.fs.s3a.{key}": value for key, value in s3a.items()}

    def deltalake_options(self) -> dict[str, str]:
        """`storage_options` for the deltalake package (Rust object_store keys). Commits are put-if-absent, which
        the store does atomically, so no lock service (DynamoDB) is needed; `etag` makes updates If-Match."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_CONDITIONAL_PUT": "etag",
        }

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after `grace_s`: gone within 15 s in any case, so a test run never waits on it."""
        terminate({self.pid}, grace_s)
        if self.process is not None:
            self.process.wait(timeout=5)  # reaped, so no ResourceWarning for a child still "running"

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


def start_object_store(
    state_dir: Path,
    cache_dir: Path,
    *,
    access_key_id: str = "kaudit",
    secret_access_key: str | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> ObjectStore:
    """Start `weed mini` with its data in `<state_dir>/data` and its log in `<state_dir>/weed.log`, and return
    once a signed S3 request succeeds. Without `secret_access_key` the store gets a random one: nobody else on
    the machine can use it, and anonymous requests are refused (an identity file turns anonymous access off)."""
    state_dir = Path(state_dir).expanduser().resolve()
    data_dir = state_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secret_access_key or secrets.token_urlsafe(24)
    identities = state_dir / "s3-identities.json"
    _write_identities(identities, access_key_id, secret)
    ports = {flag: free_port(HOST) for flag in PORT_FLAGS}
    log_file = state_dir / "weed.log"
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            _mini_command(weed_binary(cache_dir), data_dir, identities, ports),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the caller only, which stops it in order
            cwd=state_dir,
        )
    store = ObjectStore(
        endpoint=f"http://{HOST}:{ports['s3.port']}",
        access_key_id=access_key_id,
        secret_access_key=secret,
        data_dir=data_dir,
        log_file=log_file,
        pid=process.pid,
        ports=tuple(ports.values()),
        process=process,
    )
    try:
        _wait_ready(store, timeout_s)
    except BaseException:
        store.stop()
        raise
    return store


def _write_identities(path: Path, access_key_id: str, secret: str) -> None:
    """The S3 identity file (SeaweedFS's `-s3.config`): one identity with every action, readable by us only."""
    identity = {
        "name": "kaudit",
        "credentials": [{"accessKey": access_key_id, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps({"identities": [identity]}))


def _mini_command(weed: Path, data_dir: Path, identities: Path, ports: dict[str, int]) -> list[str]:
    """`weed mini` on loopback with the given ports, without the parts the tests do not use (web UIs, WebDAV,
    telemetry to seaweedfs.com). The volume server stops without waiting out a pre-stop pause."""
    return [
        str(weed),
        "-logtostderr",
        "mini",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        f"-dir={data_dir}",
        f"-s3.config={identities}",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        *(f"-{flag}=0" for flag in DISABLED_PORT_FLAGS),
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        "-volume.preStopSeconds=0",
    ]


def _wait_ready(store: ObjectStore, timeout_s: float) -> None:
    """Poll with a signed ListBuckets until it answers: the S3 port open is not enough, the gateway answers 503
    until its filer is up. Raise with the log's tail when the process exits or the time is up."""
    client = store.client()
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if not pid_alive(store.pid):
            raise HarnessError(f"SeaweedFS exited while starting\n{log_tail(store.log_file)}")
        try:
            client.list_buckets()
            return
        except Exception as exc:  # not up yet: connection refused, 503 while the filer starts
            last_error = str(exc)
        time.sleep(0.2)
    raise HarnessError(
        f"SeaweedFS not ready after {timeout_s:.0f} s at {store.endpoint} ({last_error})\n{log_tail(store.log_file)}"
    )


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log, headed by its path, for error messages."""
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"--- {path}: {exc}"
    return f"--- {path} (last {len(tail)} lines)\n" + "\n".join(tail)
