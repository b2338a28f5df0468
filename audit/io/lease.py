"""One writer of the books per lake: a lease object `_kaudit/leases/<name>.json` under the lake root.

On S3, Spark's Delta log store is safe within one driver only: two drivers can both write version N and one commit
is silently lost. So a writer of the books first takes the lease: created only if absent (`If-None-Match: *`),
renewed every ttl/3 and released only if unchanged since our last write (`If-Match`). A lease not renewed for `ttl_s`
is taken over by the same compare-and-swap on its stale version: of two takers, exactly one wins. A local lake keeps
the lease in a folder, swapped under an `fcntl` lock. Fencing is by time (see `LakeLease.valid`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from audit.contract.errors import LakeError
from audit.io.lake import Lake, StoreAccess

log = logging.getLogger(__name__)

LEASES = "_kaudit/leases"
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


def _gone_from_this_host(body: dict) -> bool:
    """Whether the holder ran on this host and its process has ended (kill -9, a crash): nobody renews it, so it is
    taken over at once instead of after its ttl. A pid reused since only delays that to the ttl."""
    if body.get("host") != socket.gethostname() or body.get("pid") in (None, os.getpid()):
        return False
    try:
        os.kill(int(body["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


class LakeLease:
    """The lease `name` of `lake` for one writer. As a context manager: acquire and renew in the background,
    then stop and release. Skewed clocks between hosts only move when a lease looks stale by its renewed_at; the
    takeover is safe as long as they run at the same rate, since the taker's own ttl_s of watching decides."""

    def __init__(
        self,
        lake: Lake,
        name: str = "books",
        *,
        purpose: str,
        ttl_s: float | None = None,
        margin_s: float | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.lake, self.name, self.purpose = lake, name, purpose
        self.ttl_s = float(ttl_s if ttl_s is not None else lake.lease_ttl_s)
        self.margin_s = self.ttl_s / 4 if margin_s is None else margin_s
        self.clock, self.sleep = clock, sleep
        key = f"{LEASES}/{name}.json"
        self.store: LeaseStore = ObjectStore(lake, key) if lake.on_object_store else FolderStore(Path(lake.root) / key)
        self.token = uuid.uuid4().hex
        self._etag: str | None = None  # the version we last wrote; None while not held
        self._acquired_at, self._renewed_at, self._lost = 0.0, 0.0, False
        self._seen: tuple[str, float] | None = None  # another's stale version, and when we first saw it
        self._stop, self._thread = threading.Event(), None

    def _body(self, **changes) -> dict:
        mine = {"purpose": self.purpose, "host": socket.gethostname(), "pid": os.getpid(), "token": self.token}
        times = {"acquired_at": self._acquired_at, "renewed_at": self.clock(), "ttl_s": self.ttl_s}
        return mine | times | {"released": False} | changes

    def _fields(self, body: dict | None = None, **more) -> dict:
        """Log fields: the lease, and the holder it is about (never the store's keys)."""
        body = body or self._body()
        holder = {f"holder_{k}": body.get(k) for k in ("purpose", "host", "pid")}
        return {"lease": self.name, "lake": self.lake.root, **holder, "token": body.get("token", "")[:8], **more}

    def acquire(self) -> LakeLease:
        """Take the lease if free, released or stale; else a LakeError naming the holder. A lease that looks stale
        by its renewed_at is watched for its holder's `ttl_s` first (it must not change), then taken over."""
        while True:
            now, current = self.clock(), self.store.read()
            body, etag = current or ({}, None)
            if not body or body.get("released") or body.get("token") == self.token:
                if self._take(etag, None):
                    return self
                continue
            if _gone_from_this_host(body):
                if self._take(etag, body):
                    return self
                continue
            ttl = float(body.get("ttl_s", self.ttl_s))  # the holder's: it fences itself by it
            if now - body["renewed_at"] <= ttl:
                raise LakeError(self._refusal(body, now, ttl))
            if self._seen is None or self._seen[0] != etag:
                self._seen = (etag, now)
            waited = now - self._seen[1]
            if waited < ttl:
                self.sleep(min(ttl - waited, max(ttl / 3, 0.05)))
                continue
            if self._take(etag, body):
                return self

    def _take(self, etag: str | None, stale: dict | None) -> bool:
        """Create (etag None) or swap in our lease; False when another writer changed it first."""
        self._acquired_at = self._renewed_at = self.clock()
        body = self._body()
        new = self.store.create(body) if etag is None else self.store.swap(etag, body)
        if new is None:
            return False
        self._etag, self._lost, self._seen = new, False, None
        if stale is not None:
            age = round(self._acquired_at - stale["renewed_at"], 1)
            log.warning("lease: took over a stale lease", extra=self._fields(stale, stale_for_s=age))
        log.info("lease: acquired", extra=self._fields(body, ttl_s=self.ttl_s, where=self.store.where))
        return True

    def _refusal(self, body: dict, now: float, ttl: float) -> str:
        renewed = now - body["renewed_at"]
        return (
            f"another writer holds the lake {self.lake.root} (lease {self.store.where}): "
            f"{body.get('purpose')!r} on host {body.get('host')}, pid {body.get('pid')}, "
            f"acquired {now - body['acquired_at']:.1f} s ago, last renewed {renewed:.1f} s ago; it becomes stale "
            f"if not renewed for {ttl:.0f} s (in {max(ttl - renewed, 0):.1f} s at the earliest). Stop it, or wait"
        )

    def renew(self) -> bool:
        """Write a fresh renewed_at if the lease is still ours. False on failure; when another writer changed
        the lease, it was taken over: the lease is lost for good."""
        if self._etag is None or self._lost:
            return False
        started = self.clock()  # the store may apply the write at any moment of the request: count from its start
        try:
            new = self.store.swap(self._etag, self._body(renewed_at=started))
        except Exception as error:  # the store unreachable: try again at the next tick, valid() counts the time
            log.warning("lease: renewal failed", extra=self._fields(error=type(error).__name__))
            return False
        if new is None:
            return self._changed_under_us()
        self._etag, self._renewed_at = new, started
        return True

    def _changed_under_us(self) -> bool:
        """A failed swap: our own earlier write that landed after a timeout (same token), or a takeover."""
        current = self.store.read()
        if current and current[0].get("token") == self.token and not current[0].get("released"):
            self._etag = current[1]  # ours: adopt its version, the renewal time stays the last confirmed one
            return False
        self._lost = True
        log.error("lease: lost", extra=self._fields(current[0] if current else None, taken_by=bool(current)))
        return False

    def valid(self) -> bool:
        """Whether we may still commit: held, not seen taken over, and renewed within `ttl_s - margin_s` (counted
        from the start of the renewal's request), while a taker waits `ttl_s` of its own watching of an unchanged
        lease: we stop before anyone can take over. A writer paused for longer than the margin between `check()`
        and its commit can still commit after a takeover: that is the residual risk of fencing by time."""
        held = self._etag is not None and not self._lost
        return held and self.clock() - self._renewed_at < self.ttl_s - self.margin_s

    def check(self) -> None:
        """Call before each commit step: a LakeError when the lease is no longer ours to write under."""
        if not self.valid():
            why = "was taken over" if self._lost else "is not held or was not renewed in time"
            raise LakeError(f"the lease {self.store.where} ({self.purpose!r}) {why}: stopping before the next commit")

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
        """Mark the lease released if it is still ours (compare-and-swap), so the next writer need not wait."""
        self.stop_renewing()
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
