"""Content digests through the books on real Kafka, Spark and Delta: count records carrying
`digest_by_partition` are checked, stored, summed per tier and judged, in the driver and in Spark; and a lake
whose tables were created before the digest columns gains them on the new books' first write."""

from __future__ import annotations

from dataclasses import replace

import pytest

from audit.books import run as run_module
from audit.books.judge import completeness as completeness_module
from audit.books.run import reconcile
from audit.contract.digest import digest_of, merge
from audit.contract.record import count_record, encode
from audit.contract.tables import AUDIT_RECORDS, COMPLETENESS, TIER_COUNTS, Table
from audit.contract.windows import MS_PER_MINUTE, window_end
from audit.io import delta_io
from audit.io.lake import lake_of
from tests.audit.books.test_reconcile import FRESH, W1, W2, AuditWriter, rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

W3 = window_end(W2)
NEW_COLUMNS = ("digest_by_partition", "mismatched_partitions")


def messages(partition: int, numbers) -> list[tuple[bytes, bytes]]:
    return [(f"k{partition}-{n}".encode(), f"order {n} of partition {partition}".encode()) for n in numbers]


def send_count(writer: AuditWriter, tier: str, window: int, sent: dict[int, list], *, digests: bool = True) -> None:
    """A count record of `sent` (partition -> its (key, value) messages), with their digests or without."""
    writer.sequence += 1
    cluster, topic = ("dc1", "orders") if tier in ("producer", "dc1") else ("aggregate", "dc1.orders")
    record = count_record(
        record_id=f"{tier}-d:{writer.sequence}",
        tier=tier,
        cluster=cluster,
        topic=topic,
        window_start_ms=window,
        count=sum(len(m) for m in sent.values()),
        by_partition={p: len(m) for p, m in sent.items()},
        digest_by_partition={p: digest_of(m) for p, m in sent.items()} if digests else None,
        emitted_at_ms=FRESH,
    )
    writer.send(cluster, encode(record))


def seed_digests(writer: AuditWriter) -> dict[int, list]:
    """W1: the aggregate holds one changed message in partition 1 (counts equal), in two records; W2: the same
    messages everywhere; W3: the aggregate lost 5 messages of partition 0 and holds 5 others twice. The lake
    counts W1 without digests. Returns W1's messages as produced."""
    produced = {w: {0: messages(0, range(w % 7, w % 7 + 20)), 1: messages(1, range(30))} for w in (W1, W2, W3)}
    for window, sent in produced.items():
        send_count(writer, "producer", window, sent)
        send_count(writer, "dc1", window, sent)
    changed = produced[W1][1][:-1] + [(b"k1-29", b"order 29, edited on the way")]
    send_count(writer, "aggregate", W1, {0: produced[W1][0][:8], 1: changed[:10]})
    send_count(writer, "aggregate", W1, {0: produced[W1][0][8:], 1: changed[10:]})
    send_count(writer, "lake", W1, produced[W1], digests=False)
    send_count(writer, "aggregate", W2, produced[W2])
    lost_and_doubled = produced[W3][0][5:] + produced[W3][0][5:10]
    send_count(writer, "aggregate", W3, {0: lost_and_doubled, 1: produced[W3][1]})
    for tier, cluster, topic in (("dc1", "dc1", "orders"), ("aggregate", "aggregate", "dc1.orders")):
        writer.status(tier, cluster, topic)
    writer.status("lake", "aggregate", "dc1.orders", service="kaudit-lake")
    writer.status("aggregate", "dc1", "orders", service="kaudit-mirror")
    writer.flush()
    return produced[W1]


def verdicts(spark, settings) -> dict[tuple[int, str], tuple]:
    return {
        (int(r["window_start"].timestamp() * 1000), r["tier"]): (
            r["status"],
            r["missing"],
            r["duplicated"],
            r["mismatched_partitions"],
        )
        for r in rows(spark, settings, COMPLETENESS)
        if r["topic"] == "orders"
    }


def judge_by(form: str, monkeypatch) -> None:
    """A small run's books in the driver, or every step in Spark (as a run of many messages and windows)."""
    if form == "spark":
        monkeypatch.setattr(run_module, "DRIVER_MESSAGES", 0)
        monkeypatch.setattr(completeness_module, "DRIVER_WINDOWS", 0)


@pytest.mark.parametrize("form", ["driver", "spark"])
def test_equal_counts_with_other_content_are_a_mismatch_naming_the_partition(
    spark, settings_factory, monkeypatch, form
):
    judge_by(form, monkeypatch)
    settings = settings_factory()
    produced_w1 = seed_digests(AuditWriter(settings))

    report = reconcile(spark, settings, now_ms=W3 + 120 * MS_PER_MINUTE)

    assert report.rejects == 0
    books = verdicts(spark, settings)
    assert books[(W1, "dc1")] == ("complete", 0, 0, None)
    assert books[(W1, "aggregate")] == ("mismatch", 0, 0, [1]), "one changed message in partition 1"
    assert books[(W1, "lake")] == ("complete", 0, 0, None), "no digest at the lake: judged by its counts"
    assert books[(W2, "aggregate")] == ("complete", 0, 0, None), "the same messages"
    assert books[(W3, "aggregate")] == ("mismatch", 0, 0, [0]), "5 lost and 5 doubled in partition 0"
    counts = {
        (int(r["window_start"].timestamp() * 1000), r["tier"]): r
        for r in rows(spark, settings, TIER_COUNTS)
        if r["topic"] == "orders"
    }
    assert counts[(W1, "producer")]["digest_by_partition"] == {p: digest_of(m) for p, m in produced_w1.items()}
    summed = counts[(W1, "aggregate")]
    assert summed["records"] == 2 and summed["by_partition"] == {0: 20, 1: 30}
    assert summed["digest_by_partition"][0] == merge(digest_of(produced_w1[0][:8]), digest_of(produced_w1[0][8:]))
    assert summed["digest_by_partition"][0] == digest_of(produced_w1[0]), "the parts add up to the whole"
    assert counts[(W1, "lake")]["digest_by_partition"] is None
    stored = [r for r in rows(spark, settings, AUDIT_RECORDS) if r["tier"] == "producer" and r["kind"] == "count"]
    assert all(r["digest_by_partition"] is not None for r in stored) and len(stored) == 3


def old_table(table: Table) -> Table:
    """`table` as a kafka-audit before content digests declared it."""
    return replace(table, columns=tuple(c for c in table.columns if c.name not in NEW_COLUMNS))


def create_old_lake(settings) -> None:
    """audit_records, tier_counts and completeness as an older kafka-audit created them, each with a row of a
    window the new books do not touch."""
    from datetime import UTC, datetime, timedelta

    from deltalake import DeltaTable

    from audit.contract.arrow import arrow_schema, arrow_table

    lake = lake_of(settings)
    start = datetime.fromtimestamp(W1 / 1000, UTC) - timedelta(days=1)
    old_row = {"origin_cluster": "dc1", "topic": "old", "logical_topic": "dc1.old", "window_start": start}
    old_row |= {"window_minutes": 10, "tier": "dc1", "count": 1, "date": start.date(), "record_id": "old:1"}
    old_row |= {"kind": "count", "status": "complete", "expected": 1, "observed": 1, "final": True}
    for table in (AUDIT_RECORDS, TIER_COUNTS, COMPLETENESS):
        old = old_table(table)
        DeltaTable.create(
            lake.uri(table.name),
            schema=arrow_schema(old),
            partition_by=list(old.partition_by),
            configuration=delta_io.table_properties(old),
        )
        names = set(old.column_names)
        lake.write(table.name, arrow_table(old, [{k: v for k, v in old_row.items() if k in names}]), mode="append")


@pytest.mark.parametrize("form", ["driver", "spark"])
def test_tables_created_before_the_digest_columns_gain_them_on_the_first_write(
    spark, settings_factory, monkeypatch, form
):
    judge_by(form, monkeypatch)
    settings = settings_factory()
    create_old_lake(settings)
    lake = lake_of(settings)
    assert "digest_by_partition" not in lake.delta_table(TIER_COUNTS.name).schema().to_arrow().names
    seed_digests(AuditWriter(settings))

    reconcile(spark, settings, now_ms=W3 + 120 * MS_PER_MINUTE)

    for table in (AUDIT_RECORDS, TIER_COUNTS, COMPLETENESS):
        read = delta_io.read_table(spark, lake, table.name)
        assert set(table.column_names) == set(read.columns), table.name
        assert lake.delta_table(table.name).to_pyarrow_table().num_rows == read.count() > 1
    books = verdicts(spark, settings)
    assert books[(W1, "aggregate")] == ("mismatch", 0, 0, [1])
    old = [r for r in rows(spark, settings, COMPLETENESS) if r["topic"] == "old"]
    assert [(r["status"], r["mismatched_partitions"]) for r in old] == [("complete", None)], "old rows kept, null"
    summed = [r for r in rows(spark, settings, TIER_COUNTS) if r["topic"] == "orders" and r["tier"] == "producer"]
    assert all(r["digest_by_partition"] is not None for r in summed) and len(summed) == 3
