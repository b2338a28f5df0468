"""The books stop before their next commit once their lease is taken, mid-session, on real Kafka, Spark and Delta:
a run that starts after another writer took over the lake commits nothing, and the CLI's loop ends with the error."""

from __future__ import annotations

import argparse

import pytest

from audit.books.run import RunMemory, reconcile
from audit.cli import spark_jobs
from audit.contract.errors import LakeError
from audit.io.lake import lake_of
from audit.io.lease import BOOKS, LakeLease, fenced_tables
from tests.audit.books.test_reconcile import NOW, W1, AuditWriter, seed_books
from tests.audit.io.test_lease import ELSEWHERE, FakeClock

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_a_books_writer_whose_lease_was_taken_commits_nothing_more(spark, settings_factory, monkeypatch):
    settings = settings_factory()
    lake, writer = lake_of(settings), AuditWriter(settings)
    seed_books(writer)
    # Its clock stands still: by time alone it would stay valid; what stops it is the lease as the store holds it.
    holder = LakeLease(lake, purpose="reconcile --continuous", ttl_s=60, clock=FakeClock()).acquire()
    memory = RunMemory()
    assert reconcile(spark, settings, now_ms=NOW, memory=memory).records > 0

    taker_clock = FakeClock()  # it stops renewing (paused, cut off): a writer on another host takes over the books
    elsewhere = {"ttl_s": 60, "clock": taker_clock, "sleep": taker_clock.advance, "identity": ELSEWHERE}
    taker = LakeLease(lake, purpose="reconcile (elsewhere)", **elsewhere).acquire()
    versions = {name: lake.version(name) for name in fenced_tables(BOOKS)}
    writer.count("dc1", "dc1", "orders", W1, 7)
    writer.flush()

    with pytest.raises(LakeError, match=r"was taken over; held now by 'reconcile \(elsewhere\)' on host another-host"):
        reconcile(spark, settings, now_ms=NOW, memory=memory)
    assert {name: lake.version(name) for name in versions} == versions, "no table gained a version"

    monkeypatch.setattr(spark_jobs, "stop_on_signals", lambda stop: None)  # pytest keeps its own handlers
    args = argparse.Namespace(continuous=True, no_alerts=True, max_runs=3, interval_s=0.0)
    with pytest.raises(LakeError, match="stopping before the next commit"):  # `kaudit reconcile` exits 2 with it
        spark_jobs._reconcile_runs(args, settings, spark, holder)
    assert {name: lake.version(name) for name in versions} == versions
    holder.release()
    assert taker.holder()["token"] == taker.token
