"""The lake's writer lease (audit/io/lease.py), on a local folder and on a real S3 store: one holder at a time.
How it fences commits, tells pid namespaces apart and keeps time: tests/audit/io/test_lease_fence.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from audit.contract.errors import LakeError
from audit.io.lake import Lake, StoreAccess
from audit.io.lease import LakeLease
from audit.io.process_identity import ProcessIdentity
from audit.settings.clusters import Secret

TTL_S = 2.0  # real-time tests: short, yet room for a late renewal (every ttl/3) beside a busy suite
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def warm_bucket(object_store, lake_bucket) -> str:
    """The lakes' bucket after one write: SeaweedFS grows a bucket's first volumes on its first write, seconds
    that must not land inside a real-time test's ttl."""
    object_store.client().put_object(Bucket=lake_bucket, Key="warm-up", Body=b"")
    return lake_bucket


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.object_store)])
def lake(request, tmp_path) -> Lake:
    """A fresh lake: a local folder, or a prefix of its own on the session's object store."""
    if request.param == "folder":
        return Lake.of(tmp_path / "lake")
    store, _ = request.getfixturevalue("object_store"), request.getfixturevalue("warm_bucket")
    secret = Secret(store.secret_access_key)
    access = StoreAccess(
        endpoint=store.endpoint, path_style=True, access_key_id=store.access_key_id, secret_access_key=secret
    )
    return Lake(root=request.getfixturevalue("s3_lake")(), access=access)


class FakeClock:
    """Time that moves only when told (or when a lease sleeps on it)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def lease(lake: Lake, purpose: str = "reconcile --continuous", **options) -> LakeLease:
    return LakeLease(lake, purpose=purpose, ttl_s=options.pop("ttl_s", TTL_S), **options)


def race(contenders: list[LakeLease]) -> list[LakeLease]:
    """Every contender calls acquire() at once (released by one barrier); the ones that got the lease. A winner
    renews it until all are done, so a slow loser cannot find it stale and take it over in turn."""
    barrier, won, errors = threading.Barrier(len(contenders)), [], []

    def attempt(contender: LakeLease) -> None:
        barrier.wait()
        try:
            won.append(contender.acquire())
            contender.start_renewing()
        except LakeError as error:
            errors.append(error)

    threads = [threading.Thread(target=attempt, args=(contender,)) for contender in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for winner in won:
        winner.stop_renewing()
    assert len(won) + len(errors) == len(contenders), "every contender either won or was refused"
    return won


def wait_until_stale(lake: Lake, ttl_s: float = TTL_S) -> None:
    """Until the lease's body says it was not renewed for longer than its ttl (its holder is dead or paused)."""
    observer = lease(lake, "observer")
    deadline = time.time() + 30
    while time.time() - observer.holder()["renewed_at"] <= ttl_s:
        assert time.time() < deadline, "the holder kept renewing"
        time.sleep(0.1)


def test_a_second_writer_is_refused_at_once_naming_the_holder(lake):
    """The holder runs in this pid namespace and renewed within its ttl: a same-host contender refuses at once."""
    clock = FakeClock()
    first = lease(lake, ttl_s=60, clock=clock).acquire()
    clock.advance(12)
    assert first.renew()
    clock.advance(5)
    with pytest.raises(LakeError) as refused:
        lease(lake, "backfill", ttl_s=60, clock=clock).acquire()
    message = str(refused.value)
    assert "'reconcile --continuous'" in message and f"pid {os.getpid()}" in message
    assert socket.gethostname() in message and lake.root in message
    assert f"pid namespace {os.stat('/proc/self/ns/pid').st_ino}" in message and "renewed 1 times" in message
    assert "its process runs in this pid namespace" in message and "unrenewed for 60 s is taken over" in message
    assert first.valid() and first.holder()["token"] == first.token


def test_a_released_lease_lets_the_next_writer_in_at_once(lake):
    with lease(lake) as first:
        first.check()
        assert first.holder()["purpose"] == "reconcile --continuous"
    assert not first.valid() and first.holder() is None
    with pytest.raises(LakeError, match="not held"):
        first.check()
    second = lease(lake, "backfill").acquire()
    assert second.holder()["token"] == second.token and second.valid()


def test_a_holder_not_renewed_within_ttl_minus_margin_stops_until_it_renews(lake):
    clock = FakeClock()
    holder = lease(lake, ttl_s=60, margin_s=15, clock=clock).acquire()
    clock.advance(44.9)
    assert holder.valid()
    clock.advance(0.2)
    assert not holder.valid(), "no commit once ttl - margin passed without a renewal"
    with pytest.raises(LakeError, match="not renewed in time"):
        holder.check()
    assert holder.renew() and holder.valid(), "nobody took it over: a renewal makes it valid again"


def test_a_stale_lease_is_taken_over_and_its_old_holder_finds_it_lost(lake, caplog):
    caplog.set_level(logging.INFO, logger="audit.io.lease")
    clock = FakeClock()
    old = lease(lake, ttl_s=30, clock=clock, sleep=clock.advance).acquire()
    clock.advance(31)
    started = clock()
    new = lease(lake, "backfill", ttl_s=5, clock=clock, sleep=clock.advance).acquire()
    assert clock() - started >= 30, "a taker watches a stale lease for its holder's ttl_s before taking it over"
    assert new.holder()["token"] == new.token and new.valid()

    assert not old.renew(), "its renewal finds the lease changed"
    assert not old.valid()
    with pytest.raises(LakeError, match="taken over"):
        old.check()
    clock.advance(1)
    assert not old.renew() and not old.valid(), "lost for good: it does not take the lease back"
    old.release()
    assert new.holder()["token"] == new.token, "the old holder's release leaves the new lease alone"

    by_message = {record.getMessage(): record for record in caplog.records}
    takeover = by_message["lease: took over"]
    assert takeover.holder_purpose == "reconcile --continuous" and takeover.watched_s >= 30
    assert by_message["lease: lost"].holder_purpose == "backfill"
    secret = lake.access.secret_access_key.reveal() if lake.access else "no secret"
    assert all(secret not in str(record.__dict__) for record in caplog.records)


def test_eight_threads_racing_for_a_free_lease_one_wins(lake):
    contenders = [lease(lake, f"writer {n}") for n in range(8)]
    won = race(contenders)
    assert len(won) == 1
    assert won[0].holder()["token"] == won[0].token
    assert [c.valid() for c in contenders].count(True) == 1


def test_two_takers_racing_for_one_stale_lease_one_wins(lake):
    lease(lake, "crashed").acquire()  # never renewed: stale after TTL_S
    wait_until_stale(lake)
    takers = [lease(lake, "taker a"), lease(lake, "taker b")]
    won = race(takers)
    assert len(won) == 1
    assert won[0].holder()["token"] == won[0].token
    assert [t.valid() for t in takers].count(True) == 1


def test_the_renewal_thread_keeps_a_lease_alive_past_several_ttls(lake):
    with lease(lake) as holder:
        deadline = time.time() + 3 * TTL_S
        while time.time() < deadline:
            assert holder.valid()
            time.sleep(TTL_S / 5)
        with pytest.raises(LakeError, match="another writer holds"):
            lease(lake, "backfill").acquire()
        assert time.time() - holder.holder()["renewed_at"] < TTL_S
    assert holder.holder() is None


CHILD = """
import json, sys
from audit.contract.errors import LakeError
from audit.io.lake import Lake, StoreAccess
from audit.io.lease import LakeLease
from audit.settings.clusters import Secret

spec = json.loads(sys.stdin.readline())
access = spec["access"] and StoreAccess(**spec["access"] | {"secret_access_key": Secret(spec["access"]["secret_access_key"])})
lease = LakeLease(Lake(root=spec["root"], access=access), purpose=spec["purpose"], ttl_s=spec["ttl_s"])
print("ready", flush=True)
sys.stdin.readline()
try:
    lease.acquire()
except LakeError:
    print("refused", flush=True)
    sys.exit(0)
lease.start_renewing()
print("won", flush=True)
sys.stdin.readline()  # hold the lease until told (or killed)
"""


UNSHARED = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"]
# In its own pid namespace, the child takes a pid past every pid of this one (ns_last_pid), so it names no
# process here; it is forked, not exec'ed, so that the shell stays the namespace's init.
FAR_PID = 'echo 4100000 > /proc/sys/kernel/ns_last_pid 2>/dev/null; "$0" -c "$1"; exit $?'


def namespaces_available() -> bool:
    return shutil.which("unshare") is not None and subprocess.run([*UNSHARED, "true"]).returncode == 0


def child(lake: Lake, purpose: str, *, own_pid_namespace: bool = False) -> subprocess.Popen:
    """A separate process that acquires the lease when sent a line, says whether it won, then holds it; with
    `own_pid_namespace`, in a pid namespace of its own under this hostname (a container on host networking)."""
    access = None
    if lake.access:
        access = {"endpoint": lake.access.endpoint, "path_style": True, "access_key_id": lake.access.access_key_id}
        access["secret_access_key"] = lake.access.secret_access_key.reveal()
    spec = {"root": lake.root, "access": access, "purpose": purpose, "ttl_s": TTL_S}
    command = [*UNSHARED, "sh", "-c", FAR_PID, sys.executable, CHILD] if own_pid_namespace else []
    process = subprocess.Popen(
        command or [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    process.stdin.write(json.dumps(spec) + "\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "ready"
    return process


def go(process: subprocess.Popen) -> None:
    process.stdin.write("go\n")
    process.stdin.flush()


def test_four_processes_racing_for_a_free_lease_one_wins(lake):
    processes = [child(lake, f"process {n}") for n in range(4)]
    try:
        for process in processes:
            go(process)
        answers = [process.stdout.readline().strip() for process in processes]
        assert sorted(answers) == ["refused"] * 3 + ["won"]
        winner = processes[answers.index("won")]
        assert lease(lake, "observer").holder()["pid"] == winner.pid
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_holder_killed_with_sigkill_on_this_host_is_taken_over_at_once(lake):
    holder = child(lake, "reconcile --continuous")
    try:
        go(holder)
        assert holder.stdout.readline().strip() == "won"
        time.sleep(TTL_S)  # it renews meanwhile
        with pytest.raises(LakeError, match=f"pid {holder.pid}"):
            lease(lake, "backfill").acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    killed_at = time.time()
    taker = lease(lake, "backfill").acquire()
    assert time.time() - killed_at < TTL_S / 2, "its pid is gone from this host: nobody will renew it"
    assert taker.holder()["token"] == taker.token and taker.valid()


ELSEWHERE = ProcessIdentity("another-host", 1, "another-boot", 4026531836, 12345)


def test_a_holder_on_another_host_is_refused_once_seen_renewing_and_taken_over_only_after_its_ttl(lake):
    clock = FakeClock()
    holder = LakeLease(lake, purpose="elsewhere", ttl_s=60, clock=clock, identity=ELSEWHERE).acquire()

    def renewing_meanwhile(seconds: float) -> None:
        clock.advance(seconds)
        holder.renew()

    with pytest.raises(LakeError, match="another-host.*renewed while this process watched it"):
        LakeLease(lake, purpose="here", ttl_s=60, clock=clock, sleep=renewing_meanwhile).acquire()
    assert holder.valid()

    started = clock()  # the holder stops renewing (dead, or cut off from the store): it is watched, then taken
    taker = LakeLease(lake, purpose="here", ttl_s=60, clock=clock, sleep=clock.advance).acquire()
    assert clock() - started >= 60, "a lease of another host is watched unchanged for its ttl before the takeover"
    assert taker.holder()["token"] == taker.token and not holder.valid()


@pytest.mark.skipif(not namespaces_available(), reason="no unprivileged user and pid namespaces here")
def test_a_holder_in_another_pid_namespace_under_this_hostname_is_never_taken_at_once(lake):
    """Its pid names no process here, which is no proof it is gone: it is watched, refused while it renews, and
    taken over only after its ttl once it is killed."""
    holder = child(lake, "reconcile (container)", own_pid_namespace=True)
    try:
        go(holder)
        assert holder.stdout.readline().strip() == "won"
        body = lease(lake, "observer").holder()
        assert body["host"] == socket.gethostname() and body.get("pid_ns") != os.stat("/proc/self/ns/pid").st_ino
        assert not Path(f"/proc/{body['pid']}").exists(), "its pid names no process of this namespace"
        with pytest.raises(LakeError, match="renewed while this process watched it"):
            lease(lake, "backfill").acquire()
        assert lease(lake, "observer").holder()["token"] == body["token"]
    finally:
        holder.kill()
        holder.wait()
    killed_at = time.monotonic()
    taker = lease(lake, "backfill").acquire()
    assert time.monotonic() - killed_at >= TTL_S, "not provably dead from here: watched unchanged for its ttl"
    assert taker.holder()["token"] == taker.token
