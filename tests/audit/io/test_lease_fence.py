"""The lease fences for real (audit/io/lease.py): every commit to a leased table checks it first, a contender tells
a holder in another pid namespace from a dead one under the same hostname, and no wall clock moves validity.
Writers on two "hosts" are two leases with their own `ProcessIdentity` and their own clocks; the commits are real
Delta commits into a lake on the local disk."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from audit.contract.errors import LakeError
from audit.contract.tables import ALERTS, AUDIT_RECORDS, BRONZE, COMPLETENESS, SOURCE_OFFSETS
from audit.io import delta_io
from audit.io.lake import Lake, before_commit
from audit.io.lease import LakeLease
from audit.io.process_identity import Liveness, ProcessIdentity
from audit.settings import ClusterSettings, Settings
from tests.conftest import write_config

TTL_S = 60.0
HERE = ProcessIdentity.here()


class FakeClock:
    """A clock that moves only when told: a monotonic one, or a wall clock an NTP step makes jump."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def unseen_pid() -> int:
    """A pid no process of this namespace has: a holder's pid as seen from another namespace."""
    return next(pid for pid in range(4_000_000, 4_100_000) if not Path(f"/proc/{pid}").exists())


def in_container(pid_ns: int) -> ProcessIdentity:
    """A process of this host (same hostname, same kernel boot) in another pid namespace: host networking."""
    assert pid_ns != HERE.pid_ns
    return ProcessIdentity(HERE.host, unseen_pid(), HERE.boot_id, pid_ns, 4242)


def alert_row(n: int) -> dict:
    return {"alert_id": f"a{n}", "kind": "loss", "date": date.today(), "window_start": datetime.now(UTC)}


def commit(lake: Lake, n: int) -> None:
    """One Delta commit into `alerts` by deltalake, as the books make them."""
    delta_io.append_from_driver(lake, ALERTS, [alert_row(n)])


@pytest.fixture
def lake(tmp_path) -> Lake:
    lake = Lake.of(tmp_path / "lake")
    delta_io.ensure_table(lake, ALERTS)
    return lake


def test_a_holder_of_this_hostname_in_another_pid_namespace_is_watched_and_never_taken_at_once(lake):
    """Its pid is not visible here, which once meant "gone": the contender takes it only after watching it
    unchanged for its ttl, and refuses as soon as it sees it renewed."""
    clock = FakeClock()
    holder = LakeLease(lake, purpose="reconcile (container a)", ttl_s=TTL_S, clock=clock, identity=in_container(1))
    holder.acquire()
    assert HERE.liveness_of(holder.holder()) is Liveness.UNKNOWN

    def renewing_meanwhile(seconds: float) -> None:
        clock.advance(seconds)
        holder.renew()

    contender = LakeLease(lake, purpose="reconcile (container b)", ttl_s=TTL_S, clock=clock, sleep=renewing_meanwhile)
    with pytest.raises(
        LakeError, match=f"'reconcile \\(container a\\)' on host {HERE.host}, pid {holder.identity.pid}"
    ):
        contender.acquire()
    assert holder.valid() and holder.holder()["token"] == holder.token

    started = clock()  # now nobody renews it: taken over once watched unchanged for its ttl, not before
    LakeLease(lake, purpose="reconcile (container b)", ttl_s=TTL_S, clock=clock, sleep=clock.advance).acquire()
    assert clock() - started >= TTL_S


def test_two_writers_of_one_hostname_in_two_pid_namespaces_never_both_commit(lake):
    """Container a holds the books and commits; b contends; a pauses (no renewal) and b takes over after the ttl;
    a's next commit is refused, naming b, while b commits. Each commit is a real Delta version."""
    clock_a, clock_b = FakeClock(), FakeClock(5_000.0)  # two hosts' monotonic clocks share no origin
    a = LakeLease(lake, purpose="reconcile (a)", ttl_s=TTL_S, clock=clock_a, identity=in_container(1)).acquire()
    commit(lake, 1)
    clock_b.advance(1)
    b = LakeLease(
        lake, purpose="reconcile (b)", ttl_s=TTL_S, clock=clock_b, sleep=clock_b.advance, identity=in_container(2)
    )
    b.acquire()  # a is paused from here: no renewal, its clock stands still too
    assert clock_b() - 5_001.0 >= TTL_S, "taken over only after a whole ttl of watching"
    before = lake.version("alerts")

    with pytest.raises(LakeError, match=r"taken over; held now by 'reconcile \(b\)'") as refused:
        commit(lake, 2)  # a, resumed, still valid by its own clock: the store says otherwise
    assert "stopping before the next commit" in str(refused.value)
    assert lake.version("alerts") == before and not a.valid()
    a.release()  # the old holder's release changes nothing: b's lease stays
    commit(lake, 3)
    assert b.holder()["token"] == b.token and lake.version("alerts") == before + 1


def test_a_writer_whose_lease_was_taken_commits_nothing_more_through_any_commit_path(lake):
    """deltalake appends and MERGEs, table creation: every commit to a leased table passes the fence."""
    clock = FakeClock()
    holder = LakeLease(lake, purpose="reconcile --continuous", ttl_s=TTL_S, clock=clock).acquire()
    commit(lake, 1)
    delta_io.upsert_from_driver(lake, ALERTS, [alert_row(1) | {"kind": "drop"}])
    elsewhere, taker_clock = ProcessIdentity("other-host", 7, "other-boot", 1, 1), FakeClock()
    taker = LakeLease(lake, purpose="backfill", ttl_s=TTL_S, clock=taker_clock, identity=elsewhere)
    taker.sleep = taker_clock.advance
    taker.acquire()  # the holder paused meanwhile: not renewed, taken over after a ttl of watching
    version = lake.version("alerts")
    for write in (
        lambda: commit(lake, 2),
        lambda: delta_io.upsert_from_driver(lake, ALERTS, [alert_row(1)]),
        lambda: delta_io.delete_from_driver(lake, ALERTS, [{"alert_id": "a1"}]),
        lambda: delta_io.ensure_table(lake, COMPLETENESS),
    ):
        with pytest.raises(LakeError, match="'backfill' on host other-host"):
            write()
    assert lake.version("alerts") == version and lake.version("completeness") is None
    clock.advance(TTL_S)  # and by its own clock it has not renewed in time either
    with pytest.raises(LakeError, match="was taken over; held now by 'backfill'"):
        commit(lake, 3)
    holder.release()
    commit(lake, 4)  # no lease of this process covers the table any more: not fenced


HOST_A = ProcessIdentity("host-a", 11, "boot-a", 1, 1)


def test_a_wall_clock_step_moves_neither_the_holders_validity_nor_the_takeover(lake):
    """Validity and expiry are on monotonic clocks; an NTP step of an hour either way changes nothing."""
    mono, wall = FakeClock(), FakeClock(1_700_000_000.0)
    options = {"ttl_s": TTL_S, "margin_s": 15, "clock": mono, "wall_clock": wall, "identity": HOST_A}
    holder = LakeLease(lake, purpose="reconcile", **options).acquire()
    assert holder.renew()
    for step in (3600.0, -7200.0):
        wall.advance(step)
        assert holder.valid() and holder.renew(), "a wall-clock step does not end a renewed lease"
    mono.advance(TTL_S - 15 - 0.1)
    wall.advance(-86_400)  # the wall clock says a day passed backwards: still valid by the monotonic one
    assert holder.valid()
    mono.advance(0.2)
    wall.advance(86_400 * 2)
    assert not holder.valid(), "not renewed within ttl - margin on its own clock"

    contender_mono, contender_wall = FakeClock(), FakeClock(1_700_000_000.0)

    def stepping(seconds: float) -> None:  # its wall clock jumps an hour ahead while it watches
        contender_mono.advance(seconds)
        contender_wall.advance(3600 + seconds)

    contender = LakeLease(
        lake, purpose="backfill", ttl_s=TTL_S, clock=contender_mono, wall_clock=contender_wall, sleep=stepping
    )
    contender.acquire()
    assert contender_mono() - 1_000_000.0 >= TTL_S, "watched a whole ttl on its own clock, whatever the wall said"


def test_a_dead_holder_whose_wall_clock_ran_an_hour_ahead_is_taken_over_after_its_ttl(lake):
    """Its last renewal's time lies an hour in the future: that refuses nobody for an hour."""
    hour_ahead = lambda: datetime.now(UTC).timestamp() + 3600  # noqa: E731
    LakeLease(
        lake, purpose="reconcile", ttl_s=TTL_S, wall_clock=hour_ahead, identity=HOST_A
    ).acquire()  # then the host dies: no renewal, no release
    clock = FakeClock()
    taker = LakeLease(lake, purpose="reconcile", ttl_s=TTL_S, clock=clock, sleep=clock.advance).acquire()
    assert taker.holder()["token"] == taker.token and clock() - 1_000_000.0 >= TTL_S


def test_each_lease_fences_the_tables_it_is_named_for(lake):
    """The books' lease covers every table but bronze; the lake job's is bronze's own, whatever cluster it reads."""
    books = LakeLease(lake, purpose="reconcile")
    bronze = LakeLease(lake, BRONZE.name, purpose="lake --cluster dc1")
    assert BRONZE.name not in books.tables and {AUDIT_RECORDS.name, ALERTS.name, SOURCE_OFFSETS.name} <= set(
        books.tables
    )
    assert bronze.tables == (BRONZE.name,)
    with bronze:
        bronze._lost = True  # as a renewal that found it taken over would leave it
        with pytest.raises(LakeError, match="bronze.json"):
            before_commit(lake.path(BRONZE.name))
        before_commit(lake.path("alerts"))  # not this lease's table


def kaudit(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.cli", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_second_lake_job_into_bronze_is_refused_whatever_cluster_it_reads(tmp_path):
    """Both would commit to the one bronze table: the second exits 2 naming the first, before Spark or Kafka."""
    clusters = tuple(ClusterSettings(name=n, bootstrap_servers="127.0.0.1:9", local=False) for n in ("dc1", "aggr"))
    settings = Settings(clusters=clusters, lake_path=str(tmp_path / "lake"), state_dir=tmp_path / "state")
    config = write_config(settings, tmp_path / "kaudit.toml")
    with LakeLease(Lake.of(settings.lake_path), BRONZE.name, purpose="lake --cluster dc1"):
        refused = kaudit(config, "lake", "--cluster", "aggr", "--until-caught-up")
    assert refused.returncode == 2, refused.stderr
    assert "another writer holds the lake" in refused.stderr and "_kaudit/leases/bronze.json" in refused.stderr
    assert f"'lake --cluster dc1' on host {socket.gethostname()}, pid {os.getpid()}" in refused.stderr
