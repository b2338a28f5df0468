"""The lake: where the Delta tables live and how each engine reaches them, bound once from the settings.

`Lake.from_settings` resolves `lake_path` and `[storage]` (with the AWS conventions for what they leave
empty) into one object. Spark gets it as `spark.hadoop.fs.s3a.*` settings and `s3a://` paths; `deltalake`
as storage options and `s3://` URIs. Nothing else reads `lake_path`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from audit.contract.errors import LakeError
from audit.contract.tables import TABLES, table_path
from audit.settings.clusters import Secret

if TYPE_CHECKING:
    from audit.settings import Settings

OBJECT_STORE_SCHEMES = ("s3://", "s3a://")

DEFAULT_REGION = "us-east-1"
S3A = "spark.hadoop.fs.s3a."


class CommitFence(Protocol):
    """What a writer's lease does before each commit: raise a LakeError once the lease is no longer its own."""

    def check(self) -> None: ...


# Table path -> the leases this process writes it under (audit/io/lease.py): one, but for a lease taken over
# within one process. Process-wide, not per thread: the books commit from worker threads and the lake job from
# Spark's foreachBatch callback thread.
_FENCES: dict[str, list[CommitFence]] = {}


def fence_commits(paths: Iterable[str], fence: CommitFence) -> None:
    """Until `unfence_commits`, every commit of this process to a table at one of `paths` runs `fence.check()`."""
    for path in paths:
        held = _FENCES.setdefault(path, [])
        if all(other is not fence for other in held):
            held.append(fence)


def unfence_commits(paths: Iterable[str], fence: CommitFence) -> None:
    for path in paths:
        _FENCES[path] = [held for held in _FENCES.get(path, []) if held is not fence]


def before_commit(path: str) -> None:
    """Call right before a commit to the table at `path`: a LakeError when a lease it is written under was lost.
    A table no lease of this process covers (a test, a tool) is not fenced."""
    for fence in list(_FENCES.get(path, ())):
        fence.check()


@dataclass(frozen=True)
class StoreAccess:
    """How an S3-compatible store is reached, every value resolved (settings first, then AWS_* variables)."""

    endpoint: str = ""
    region: str = DEFAULT_REGION
    path_style: bool = False
    access_key_id: str = ""
    secret_access_key: Secret = field(default_factory=lambda: Secret(""))
    session_token: Secret = field(default_factory=lambda: Secret(""))
    verify_tls: bool = True

    @classmethod
    def resolve(cls, storage: Any, env: Mapping[str, str]) -> StoreAccess:
        """[storage] with its empty keys filled from the AWS conventions; a custom endpoint implies path style."""
        endpoint = storage.endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL", "")
        key_id = storage.access_key_id or env.get("AWS_ACCESS_KEY_ID", "")
        secret = storage.secret_access_key.reveal() or env.get("AWS_SECRET_ACCESS_KEY", "")
        token = storage.session_token.reveal() or env.get("AWS_SESSION_TOKEN", "")
        return cls(
            endpoint=endpoint.rstrip("/"),
            region=storage.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            path_style=storage.path_style or bool(endpoint),
            access_key_id=key_id,
            secret_access_key=Secret(secret),
            session_token=Secret(token),
            verify_tls=storage.verify_tls,
        )

    def storage_options(self) -> dict[str, str]:
        """`deltalake`'s storage options. Commits are conditional puts (If-None-Match), so two writers can
        never both write one version of a table (docs/architecture.md, "Writers that cannot collide")."""
        options = {"AWS_REGION": self.region, "AWS_CONDITIONAL_PUT": "etag"}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            options["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http://")).lower()
        if self.path_style:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if not self.verify_tls:
            options["AWS_ALLOW_INVALID_CERTIFICATES"] = "true"
        if self.access_key_id:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key.reveal()
        if self.session_token.reveal():
            options["AWS_SESSION_TOKEN"] = self.session_token.reveal()
        return options

    def spark_conf(self) -> dict[str, str]:
        """Spark's S3A settings; `s3://` paths go through S3A too. Without keys, S3A's default credential chain."""
        conf = {
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            f"{S3A}endpoint.region": self.region,
            f"{S3A}path.style.access": str(self.path_style).lower(),
        }
        if self.endpoint:
            conf[f"{S3A}endpoint"] = self.endpoint
            conf[f"{S3A}connection.ssl.enabled"] = str(self.endpoint.startswith("https://")).lower()
        if self.access_key_id:
            temporary = bool(self.session_token.reveal())
            conf[f"{S3A}aws.credentials.provider"] = "org.apache.hadoop.fs.s3a." + (
                "TemporaryAWSCredentialsProvider" if temporary else "SimpleAWSCredentialsProvider"
            )
            conf[f"{S3A}access.key"] = self.access_key_id
            conf[f"{S3A}secret.key"] = self.secret_access_key.reveal()
            if temporary:
                conf[f"{S3A}session.token"] = self.session_token.reveal()
        return conf


@dataclass(frozen=True)
class Lake:
    """The Delta tables' root and how to reach it. `root` is a local absolute path or `s3a://bucket/prefix`."""

    root: str
    access: StoreAccess | None = None
    lease_ttl_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str] | None = None) -> Lake:
        """The lake `settings` configure: `lake_path`, else `<state_dir>/lake`, reached as `[storage]` says."""
        env = os.environ if env is None else env
        configured = settings.lake_path or str(Path(settings.state_dir) / "lake")
        access = StoreAccess.resolve(settings.storage, env) if is_object_store(configured) else None
        return cls(root=normalized_root(configured), access=access, lease_ttl_s=settings.storage.lease_ttl_s)

    @classmethod
    def of(cls, lake: Lake | str | Path) -> Lake:
        """`lake` itself, or a local folder's lake (tests and tools that hold a path)."""
        if isinstance(lake, Lake):
            return lake
        if is_object_store(str(lake)):
            raise LakeError(f"{lake}: an object store lake needs its [storage] settings: use Lake.from_settings")
        return cls(root=normalized_root(str(lake)))

    @property
    def on_object_store(self) -> bool:
        return self.access is not None

    def path(self, name: str) -> str:
        """Table `name`'s location as Spark reads it (`s3a://...` on an object store)."""
        return table_path(self.root, name)

    def uri(self, name: str) -> str:
        """Table `name`'s location as `deltalake` reads it (`s3://...` on an object store)."""
        path = self.path(name)
        return "s3://" + path.removeprefix("s3a://") if self.on_object_store else path

    def storage_options(self) -> dict[str, str] | None:
        return self.access.storage_options() if self.access else None

    def spark_conf(self) -> dict[str, str]:
        return self.access.spark_conf() if self.access else {}

    def delta_table(self, name: str):
        """Table `name` as a `deltalake.DeltaTable`; TableNotFoundError when it does not exist."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri(name), storage_options=self.storage_options())

    def write(self, name: str, data, **options) -> None:
        """`deltalake.write_deltalake` into table `name` (mode, predicate, partition_by as it takes them)."""
        from deltalake import write_deltalake

        before_commit(self.path(name))
        write_deltalake(self.uri(name), data, storage_options=self.storage_options(), **options)

    def version(self, name: str) -> int | None:
        """Table `name`'s current Delta version, or None when it does not exist (reads the log only)."""
        from deltalake.exceptions import TableNotFoundError

        try:
            return self.delta_table(name).version()
        except TableNotFoundError:
            return None

    def has_books(self) -> bool:
        """Whether any table the books write exists here: a lake kafka-audit has written to."""
        return any(self.version(name) is not None for name in TABLES if name != "bronze")

    def require_books(self) -> Lake:
        """This lake, or a LakeError when the books never wrote here: a mistyped path must not read as empty."""
        if not self.has_books():
            raise LakeError(
                f"no kafka-audit tables at {self}: is lake_path right? (`kaudit reconcile` creates them; "
                f"kaudit config show prints the lake in force)"
            )
        return self

    def __str__(self) -> str:
        return self.root


def is_object_store(root: str) -> bool:
    return root.startswith(OBJECT_STORE_SCHEMES)


def normalized_root(root: str) -> str:
    """`s3a://bucket/prefix` for either object store scheme; a local folder as an absolute path."""
    if is_object_store(root):
        bucket_and_prefix = root.split("://", 1)[1].strip("/")
        if not bucket_and_prefix:
            raise LakeError(f"{root!r} names no bucket (s3a://bucket/prefix)")
        return f"s3a://{bucket_and_prefix}"
    if "://" in root and not root.startswith("file://"):
        raise LakeError(f"{root!r}: only local folders and s3:// or s3a:// URIs are supported as lake_path")
    return str(Path(root.removeprefix("file://")).expanduser().absolute())


@cache
def lake_of(settings: Settings) -> Lake:
    """The one Lake of `settings` in this process (settings are frozen; the environment is read once)."""
    return Lake.from_settings(settings)
