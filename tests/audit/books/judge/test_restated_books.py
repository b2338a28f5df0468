"""Complete-through watermarks and restatements written by the reconciliation on real Kafka, Spark and Delta."""

from __future__ import annotations

import pandas as pd
import pytest

from audit.books import run as run_module
from audit.books.judge import completeness as completeness_module
from audit.books.judge.complete_through import complete_through
from audit.books.run import reconcile
from audit.contract.tables import COMPLETENESS_WATERMARKS, RESTATEMENTS
from audit.contract.windows import window_end
from audit.io.lake import lake_of
from tests.audit.books.test_reconcile import NOW, W1, W2, AuditWriter, rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

W3 = window_end(W2)


def at(ms: int) -> pd.Timestamp:
    return pd.Timestamp(ms, unit="ms", tz="UTC")


def watermarks(spark, settings) -> dict[str, tuple]:
    """tier -> (complete_through, first_open_window, first_open_status) of dc1.orders, times as epoch ms."""

    def ms(value):
        return None if value is None else int(at_utc(value).value // 1_000_000)

    return {
        r["tier"]: (ms(r["complete_through"]), ms(r["first_open_window"]), r["first_open_status"])
        for r in rows(spark, settings, COMPLETENESS_WATERMARKS, drop=())
        if r["logical_topic"] == "dc1.orders"
    }


def summed_over_the_table(spark, settings) -> dict[str, tuple]:
    """`watermarks` as a run that reads every window of `completeness` sums them up, in the form above."""
    from audit.books.judge.complete_through import watermarks as summed
    from audit.contract.complete_through import KEY_COLUMNS, WINDOW_COLUMNS
    from audit.contract.tables import COMPLETENESS
    from audit.io.delta_io import read_table

    windows = read_table(spark, lake_of(settings), COMPLETENESS.name).select(*KEY_COLUMNS, *WINDOW_COLUMNS)
    return {
        r.tier: tuple(None if v is None else int(at_utc(v).value // 1_000_000) for v in r[4:6]) + (r[6],)
        for r in summed(windows).collect()
        if r.logical_topic == "dc1.orders"
    }


def at_utc(value) -> pd.Timestamp:
    return pd.Timestamp(value, tz="UTC")


def restatements(spark, settings) -> list[tuple]:
    return sorted(
        (
            int(r["window_start"].timestamp() * 1000),
            r["tier"],
            (r["before_expected"], r["before_observed"], r["before_status"]),
            (r["after_expected"], r["after_observed"], r["after_status"]),
            tuple(r["record_ids"]),
        )
        for r in rows(spark, settings, RESTATEMENTS)
    )


@pytest.mark.parametrize("judged_by", ["driver", "spark"])
def test_watermarks_follow_the_verdicts_and_changed_final_windows_are_restated(
    spark, settings_factory, monkeypatch, judged_by
):
    """Judged in the driver as a small run is, and by Spark as a run of more than `DRIVER_WINDOWS` windows and
    `DRIVER_MESSAGES` audit messages (whose records are deduplicated and summed by Spark too)."""
    if judged_by == "spark":
        monkeypatch.setattr(completeness_module, "DRIVER_WINDOWS", 0)
        monkeypatch.setattr(run_module, "DRIVER_MESSAGES", 0)
    settings = settings_factory()
    writer = AuditWriter(settings)
    for window, produced, arrived in ((W1, 100, 100), (W2, 80, 77), (W3, 50, 50)):
        writer.count("producer", "dc1", "orders", window, produced)
        writer.count("dc1", "dc1", "orders", window, produced)
        writer.count("aggregate", "aggregate", "dc1.orders", window, arrived)
    writer.status("dc1", "dc1", "orders")
    writer.status("aggregate", "aggregate", "dc1.orders")
    writer.status("aggregate", "dc1", "orders", service="kaudit-mirror")
    writer.flush()

    reconcile(spark, settings, now_ms=NOW)

    assert watermarks(spark, settings) == {"dc1": (window_end(W3), None, None), "aggregate": (W2, W2, "incomplete")}
    assert complete_through(spark, "dc1.orders", "aggregate", lake=lake_of(settings)) == at(W2)
    assert complete_through(spark, "dc1.orders", "lake", lake=lake_of(settings)) is None
    assert restatements(spark, settings) == [], "first verdicts restate nothing"

    # The 3 missing messages of W2 are counted late: a final window changes, the watermark moves on.
    writer.count("aggregate", "aggregate", "dc1.orders", W2, 3)
    late = f"aggregate-i:{writer.sequence}"
    writer.flush()
    reconcile(spark, settings, now_ms=NOW)
    # dc1's watermark moved in the driver (W2 judged again, still closed), the aggregate's summed up (W2 closed)
    assert watermarks(spark, settings) == summed_over_the_table(spark, settings)
    assert restatements(spark, settings) == [(W2, "aggregate", (80, 77, "incomplete"), (80, 80, "complete"), (late,))]
    assert watermarks(spark, settings)["aggregate"] == (window_end(W3), None, None)

    # The producer recounts W1 (2 more): W1 turns incomplete at both tiers, both watermarks go back.
    writer.count("producer", "dc1", "orders", W1, 2)
    recount = f"producer-i:{writer.sequence}"
    writer.flush()
    reconcile(spark, settings, now_ms=NOW)
    assert restatements(spark, settings)[:2] == [
        (W1, "aggregate", (100, 100, "complete"), (102, 100, "incomplete"), (recount,)),
        (W1, "dc1", (100, 100, "complete"), (102, 100, "incomplete"), (recount,)),
    ]
    assert watermarks(spark, settings) == {"dc1": (None, W1, "incomplete"), "aggregate": (None, W1, "incomplete")}
    assert watermarks(spark, settings) == summed_over_the_table(spark, settings)

    # A rerun over nothing new changes neither table.
    before = rows(spark, settings, COMPLETENESS_WATERMARKS, drop=()), rows(spark, settings, RESTATEMENTS, drop=())
    reconcile(spark, settings, now_ms=NOW)
    assert (
        rows(spark, settings, COMPLETENESS_WATERMARKS, drop=()),
        rows(spark, settings, RESTATEMENTS, drop=()),
    ) == before
