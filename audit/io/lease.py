"""One writer per table: a lease object `_kaudit/leases/<name>.json` under the lake root, `books` for the books'
tables, `bronze` for the lake job's.

On S3, Spark's Delta log store is safe within one driver only: two drivers can both write version N and one commit
is silently lost. So a writer first takes the lease: created only if absent (`If-None-Match: *`), renewed every
ttl/3 and released only if unchanged since our last write (`If-Match`). A lease that stays unchanged for its `ttl_s`
while a contender watches it is taken over by the same compare-and-swap on that version: of two takers, exactly one
wins. A local lake keeps the lease in a folder, swapped under an `fcntl` lock. Every commit to a leased table first
checks the lease (`before_commit` in audit/io/lake.py), which is valid by time on the holder's monotonic clock
(`LakeLease.valid`) and read from the store (`LakeLease.check`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from audit.contract.errors import LakeError
from audit.contract.tables import BRONZE, EVERY_TABLE
from audit.io.lake import Lake, StoreAccess, fence_commits, unfence_commits
from audit.io.process_identity import Liveness, ProcessIdentity

log = logging.getLogger(__name__)

LEASES = "_kaudit/leases"
BOOKS = "books"  # the lease of every table the books write
LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404"}


class LeaseStore(Protocol):
    """Where one lease object lives: read it with its version (etag), create it if absent, swap it if unchanged."""

    where: str

    def read(self) -> tuple[dict, str] | None: ...
    def create(self, body: dict) -> str | None: ...
    def swap(self, etag: str, body: dict) -> str | None: ...


class FolderStore:
    """The lease as a file; every change under an exclusive `flock` on a side file, which serializes the threads
    and processes of this host (each opens the lock file itself). The version is the content's hash."""

    def __init__(self, path: Path) -> None:
        self.path, self.where, self.lock = path, str(path), path.with_name(path.name + ".lock")

    def read(self) -> tuple[dict, str] | None:
        return self._current()  # no lock: a lease file is replaced whole

    def create(self, body: dict) -> str | None:
        with self._locked():
            return None if self._current() else self._write(body)

    def swap(self, etag: str, body: dict) -> str | None:
        with self._locked():
            current = self._current()
            return self._write(body) if current and current[1] == etag else None

    def _current(self) -> tuple[dict, str] | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return json.loads(data), hashlib.sha256(data).hexdigest()

    def _write(self, body: dict) -> str:
        data = json.dumps(body, sort_keys=True).encode()
        partial = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}")
        partial.write_bytes(data)
        os.replace(partial, self.path)
        return hashlib.sha256(data).hexdigest()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a") as lock:  # closing it releases the lock
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def s3_client(access: StoreAccess):
    """A boto3 client for `access`; without keys, boto3's default chain (instance role, profile, ...). A renewal
    must fail fast rather than outlive the lease it renews, hence the short timeouts."""
    import boto3
    from botocore.config import Config

    style = "path" if access.path_style else "auto"
    config = Config(s3={"addressing_style": style}, connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})
    secret, token = access.secret_access_key.reveal(), access.session_token.reveal() or None
    keys = {"aws_access_key_id": access.access_key_id, "aws_secret_access_key": secret, "aws_session_token": token}
    where = {"endpoint_url": access.endpoint or None, "region_name": access.region, "verify": access.verify_tls}
    return boto3.client("s3", config=config, **where, **(keys if access.access_key_id else {}))


class ObjectStore:
    """The lease as an S3 object; conditional puts make create and swap atomic on the store itself."""

    def __init__(self, lake: Lake, key_name: str) -> None:
        assert lake.access is not None
        self.client = s3_client(lake.access)
        self.bucket, _, prefix = lake.root.removeprefix("s3a://").partition("/")
        self.key = f"{prefix}/{key_name}" if prefix else key_name
        self.where = f"s3a://{self.bucket}/{self.key}"

    def read(self) -> tuple[dict, str] | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None
        return json.loads(answer["Body"].read()), answer["ETag"]

    def create(self, body: dict) -> str | None:
        return self._put(body, IfNoneMatch="*")

    def swap(self, etag: str, body: dict) -> str | None:
        return self._put(body, IfMatch=etag)

    def _put(self, body: dict, **condition: str) -> str | None:
        from botocore.exceptions import ClientError

        data = json.dumps(body, sort_keys=True).encode()
        try:
            answer = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, **condition)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in LOST_RACE:
                return None  # another writer changed (or created) it first
            raise
        return answer["ETag"]


def fenced_tables(name: str) -> tuple[str, ...]:
    """The tables the holder of lease `name` commits to: the books' lease covers every table but `bronze`, any
    other lease is named after the one table it covers (none when `name` is no table)."""
    if name == BOOKS:
        return tuple(table for table in EVERY_TABLE if table != BRONZE.name)
    return (name,) if name in EVERY_TABLE else ()


class LakeLease:
    """The lease `name` of `lake` for one writer: `books` for the books' tables, or one table's own (`bronze`).
    As a context manager: acquire, renew in the background and fence every commit of this process to its tables
    (`before_commit` in audit/io/lake.py), then stop and release.

    Time is each process's own monotonic `clock`: the holder decides its validity by it, and a contender decides
    that a lease expired by watching it unchanged for its ttl on its own. The wall-clock times a lease records
    (`wall_clock`) are for people to read; no decision compares them. `identity`: this process as the lease
    records it (a test gives two writers one hostname and two pid namespaces)."""

    def __init__(
        self,
        lake: Lake,
        name: str = BOOKS,
        *,
        purpose: str,
        ttl_s: float | None = None,
        margin_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        identity: ProcessIdentity | None = None,
    ) -> None:
        self.lake, self.name, self.purpose, self.tables = lake, name, purpose, fenced_tables(name)
        self.ttl_s = float(ttl_s if ttl_s is not None else lake.lease_ttl_s)
        self.margin_s = self.ttl_s / 4 if margin_s is None else margin_s
        self.clock, self.wall_clock, self.sleep = clock, wall_clock, sleep
        self.identity = identity or ProcessIdentity.here()
        key = f"{LEASES}/{name}.json"
        self.store: LeaseStore = ObjectStore(lake, key) if lake.on_object_store else FolderStore(Path(lake.root) / key)
        self.token = uuid.uuid4().hex
        self._etag: str | None = None  # the version we last wrote; None while not held
        self._renewals, self._acquired_wall = 0, 0.0
        self._renewed_at, self._lost = 0.0, False  # on `clock`: when our last confirmed write started
        self._seen: tuple[str | None, float] | None = None  # another's version, and when we first saw it (`clock`)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self, **changes) -> dict:
        mine = {"purpose": self.purpose, **self.identity.fields(), "token": self.token, "renewals": self._renewals}
        times = {"acquired_at": self._acquired_wall, "renewed_at": self.wall_clock(), "renewed_mono": self.clock()}
        times["ttl_s"] = self.ttl_s
        return mine | times | {"released": False} | changes

    def _fields(self, body: dict | None = None, **more) -> dict:
        """Log fields: the lease, and the holder it is about (never the store's keys)."""
        body = body or self._body()
        holder = {f"holder_{k}": body.get(k) for k in ("purpose", "host", "pid", "pid_ns")}
        return {"lease": self.name, "lake": self.lake.root, **holder, "token": body.get("token", "")[:8], **more}

    def acquire(self) -> LakeLease:
        """Take the lease if it is free or released, or its holder's process is provably gone; refuse with a
        LakeError naming the holder when it provably runs, or when it renews while this process watches it; take
        it over once it stayed unchanged for its holder's ttl_s of this process's watching."""
        self._seen = None
        while True:
            current = self.store.read()
            body, etag = current or ({}, None)
            if not body or body.get("released") or body.get("token") == self.token:
                taken = self._take(etag, None)
            else:
                liveness = self.identity.liveness_of(body)
                if liveness is Liveness.ALIVE and self._renewed_lately(body):
                    raise LakeError(self._refusal(body, "its process runs in this pid namespace"))
                if liveness is Liveness.DEAD:
                    taken = self._take(etag, body, "its process is gone from this pid namespace")
                else:
                    taken = self._unchanged_for_its_ttl(body, etag) and self._take(etag, body, "not renewed")
            if taken:
                return self

    def _renewed_lately(self, body: dict) -> bool:
        """Whether a holder known to run on this boot renewed within its ttl, by the monotonic clock this boot's
        processes share; one that stopped renewing is watched like any other, then taken over."""
        renewed = body.get("renewed_mono")
        return isinstance(renewed, float) and self.clock() - renewed < float(body.get("ttl_s", self.ttl_s))

    def _unchanged_for_its_ttl(self, body: dict, etag: str | None) -> bool:
        """Watch a lease whose holder this process cannot look up (another host, another pid namespace): True once
        it stayed at version `etag` for the holder's ttl_s on our clock, a LakeError once it changed."""
        now, ttl = self.clock(), float(body.get("ttl_s", self.ttl_s))  # the holder's: it fences itself by it
        if self._seen is None:
            self._seen = (etag, now)
            log.info("lease: held elsewhere; watching it for a renewal", extra=self._fields(body, ttl_s=ttl))
        elif self._seen[0] != etag:
            raise LakeError(self._refusal(body, "it was renewed while this process watched it"))
        waited = now - self._seen[1]
        if waited >= ttl:
            return True
        self.sleep(min(ttl - waited, max(ttl / 12, 0.05)))
        return False

    def _take(self, etag: str | None, stale: dict | None, why: str = "") -> bool:
        """Create (etag None) or swap in our lease; False when another writer changed it first."""
        self._renewed_at, self._acquired_wall, self._renewals = self.clock(), self.wall_clock(), 0
        body = self._body()
        new = self.store.create(body) if etag is None else self.store.swap(etag, body)
        if new is None:
            return False
        self._etag, self._lost = new, False
        if stale is not None:
            watched = round(self._renewed_at - self._seen[1], 1) if self._seen else 0.0
            log.warning("lease: took over", extra=self._fields(stale, why=why, watched_s=watched))
        self._seen = None
        fence_commits(self._paths(), self)
        log.info("lease: acquired", extra=self._fields(body, ttl_s=self.ttl_s, where=self.store.where))
        return True

    def _paths(self) -> list[str]:
        return [self.lake.path(table) for table in self.tables]

    def _refusal(self, body: dict, why: str) -> str:
        ttl = float(body.get("ttl_s", self.ttl_s))
        renewed = body.get("renewed_at")
        at = datetime.fromtimestamp(renewed, UTC).strftime("%H:%M:%S UTC") if isinstance(renewed, int | float) else "?"
        return (
            f"another writer holds the lake {self.lake.root} (lease {self.store.where}): "
            f"{body.get('purpose')!r} on host {body.get('host')}, pid {body.get('pid')} "
            f"(pid namespace {body.get('pid_ns')}), renewed {body.get('renewals', 0)} times, last at {at} by its "
            f"clock; {why}. Stop it, or wait: a lease left unrenewed for {ttl:.0f} s is taken over"
        )

    def renew(self) -> bool:
        """Write the lease again, one renewal more, if it is still ours. False on failure; when another writer
        changed the lease, it was taken over: the lease is lost for good."""
        if self._etag is None or self._lost:
            return False
        started = self.clock()  # the store may apply the write at any moment of the request: count from its start
        try:
            new = self.store.swap(self._etag, self._body(renewals=self._renewals + 1))
        except Exception as error:  # the store unreachable: try again at the next tick, valid() counts the time
            log.warning("lease: renewal failed", extra=self._fields(error=type(error).__name__))
            return False
        if new is None:
            return self._changed_under_us()
        self._etag, self._renewed_at, self._renewals = new, started, self._renewals + 1
        return True

    def _changed_under_us(self) -> bool:
        """A failed swap: our own earlier write that landed after a timeout (same token), or a takeover."""
        current = self.store.read()
        if current and current[0].get("token") == self.token and not current[0].get("released"):
            # ours: adopt its version and count, the renewal time stays the last confirmed one
            self._etag, self._renewals = current[1], int(current[0].get("renewals", self._renewals))
            return False
        self._lost = True
        log.error("lease: lost", extra=self._fields(current[0] if current else None, taken_by=bool(current)))
        return False

    def valid(self) -> bool:
        """Whether we may still commit: held, not seen taken over, and renewed within `ttl_s - margin_s` on our
        clock (counted from the start of the renewal's request), while a contender watches the lease unchanged
        for `ttl_s` on its own: we stop before anyone can take over. A writer paused for longer than the margin
        between `check()` and its commit can still commit after a takeover: the residual risk of fencing by time."""
        held = self._etag is not None and not self._lost
        return held and self.clock() - self._renewed_at < self.ttl_s - self.margin_s

    def check(self) -> None:
        """Call right before each commit (`before_commit` does, for the tables of this lease): a LakeError naming
        the holder once the lease is no longer ours to write under. It reads the lease too, so a takeover stops the
        next commit even before a renewal would have found it."""
        if not self.valid():
            why = "was taken over" if self._lost else "is not held, or was not renewed in time"
            raise LakeError(self._stopping(why, self._holder_or_none()))
        taker = self._taken_by()
        if taker is not None:
            raise LakeError(self._stopping("was taken over", taker))

    def _taken_by(self) -> dict | None:
        """The lease as it is now when it is no longer ours (lost for good then); None while it is ours, or when the
        store does not answer (valid() bounds how long a writer goes on without it)."""
        try:
            current = self.store.read()
        except Exception as error:
            log.warning("lease: not read before a commit", extra=self._fields(error=type(error).__name__))
            return None
        if current and current[0].get("token") == self.token and not current[0].get("released"):
            return None
        self._lost = True
        log.error("lease: lost", extra=self._fields(current[0] if current else None, taken_by=bool(current)))
        return current[0] if current else {}

    def _stopping(self, why: str, holder: dict | None) -> str:
        held_by = ""
        if holder and holder.get("token") != self.token:
            held_by = f"; held now by {holder.get('purpose')!r} on host {holder.get('host')}, pid {holder.get('pid')}"
        return (
            f"the lease {self.store.where} ({self.purpose!r}) {why}{held_by}: "
            f"stopping before the next commit, nothing more is written"
        )

    def _holder_or_none(self) -> dict | None:
        try:
            return self.holder()
        except Exception:  # the store unreachable: the refusal names no holder
            return None

    def holder(self) -> dict | None:
        """What the lease object says now; None when there is none or it was released."""
        current = self.store.read()
        return None if current is None or current[0].get("released") else current[0]

    def start_renewing(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3) and not self._lost:
            self.renew()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def release(self) -> None:
        """Mark the lease released if it is still ours (compare-and-swap), so the next writer need not wait; this
        process's commits to its tables are no longer fenced by it."""
        self.stop_renewing()
        unfence_commits(self._paths(), self)
        try:
            for _ in range(2):  # a first swap may fail only because our own earlier write landed late
                if self._etag is None or self._lost:
                    break
                if self.store.swap(self._etag, self._body(released=True)) is not None:
                    log.info("lease: released", extra=self._fields())
                    break
                self._changed_under_us()
        except Exception as error:  # the store unreachable: the lease goes stale after its ttl
            log.warning("lease: release failed", extra=self._fields(error=type(error).__name__))
        self._etag = None

    def __enter__(self) -> LakeLease:
        self.acquire().start_renewing()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
