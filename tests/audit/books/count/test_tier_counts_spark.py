"""`summed_maps`, the Spark sum of a window's partition counts (one map per record), against a sum in Python."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from audit.books.count.tier_counts import summed_digests, summed_maps
from audit.contract.digest import merge
from audit.contract.windows import window_end
from audit.io.lake import lake_of

PARTITION_COUNTS = st.dictionaries(st.integers(0, 5), st.integers(0, 10**12), max_size=4)


def python_sum(maps: list[dict]) -> dict:
    total: dict = {}
    for counts in maps:
        for partition, n in counts.items():
            total[partition] = total.get(partition, 0) + n
    return total


def spark_sums(spark, windows: list[list[dict]]) -> list[dict]:
    frame = spark.createDataFrame(list(enumerate(windows)), "window INT, maps ARRAY<MAP<INT, BIGINT>>")
    rows = frame.select("window", summed_maps(F.col("maps")).alias("total")).orderBy("window").collect()
    return [row.total for row in rows]


def test_one_map_is_kept_and_maps_of_different_partitions_are_summed_key_by_key(spark):
    windows = [[{0: 5, 1: 7}], [{0: 30, 1: 30}, {0: 20, 1: 20}], [{0: 1}, {2: 4}, {0: 2, 2: 0}]]
    assert spark_sums(spark, windows) == [{0: 5, 1: 7}, {0: 50, 1: 50}, {0: 3, 2: 4}]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(PARTITION_COUNTS, min_size=1, max_size=4), min_size=1, max_size=5))
def test_the_sum_of_any_maps_is_the_sum_per_partition(spark, windows):
    assert spark_sums(spark, windows) == [python_sum(maps) for maps in windows]


DIGESTS = st.dictionaries(
    st.integers(0, 3),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1, -1, 0])),
    max_size=4,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(DIGESTS, min_size=1, max_size=4), min_size=1, max_size=5))
def test_digests_add_up_per_partition_with_wraparound_as_the_contract_merges_them(spark, windows):
    frame = spark.createDataFrame(list(enumerate(windows)), "window INT, maps ARRAY<MAP<INT, BIGINT>>")
    summed = frame.select("window", summed_digests(F.col("maps")).alias("total")).orderBy("window").collect()
    expected = [
        {p: merge(*(d[p] for d in maps if p in d)) for p in sorted({p for d in maps for p in d})} for maps in windows
    ]
    assert [row.total for row in summed] == expected


# -- a first run sums its records as they are ------------------------------------------------------

WINDOW_MS = 1_795_824_000_000  # 2026-11-28T00:00:00Z


def _records(spark, settings):
    """Audit records as a run stores them: two windows, a tier with two records in one, and a status record."""
    import pandas as pd

    from audit.books.check.checked_rows import check_messages
    from audit.books.check.python_checker import SOURCE_COLUMNS, RecordChecker
    from audit.books.store.records import once_per_record_id
    from audit.contract.record import PartitionStatus, count_record, encode, status_record

    def counted(record_id, tier, cluster, start, count, partitions):
        topic = "orders" if cluster == "dc1" else "dc1.orders"
        return count_record(
            record_id=record_id, tier=tier, cluster=cluster, topic=topic, window_start_ms=start, count=count,
            by_partition=partitions, emitted_at_ms=WINDOW_MS,
        )  # fmt: skip

    later = window_end(WINDOW_MS)
    records = [
        counted("p-1", "producer", "dc1", WINDOW_MS, 10, {0: 6, 1: 4}),
        counted("p-2", "producer", "dc1", WINDOW_MS, 5, {1: 5}),
        counted("a-1", "aggregate", "aggregate", WINDOW_MS, 14, {0: 6, 1: 8}),
        counted("p-3", "producer", "dc1", later, 3, None),
        status_record(
            record_id="s-1",
            tier="aggregate",
            cluster="aggregate",
            topic="dc1.orders",
            partitions=[PartitionStatus(0, 5, 5, 0, WINDOW_MS)],
            emitted_at_ms=WINDOW_MS,
        ),  # fmt: skip
    ]
    rows = [("dc1", "_audit", 0, offset, encode(r)) for offset, r in enumerate(records)]
    messages = spark.createDataFrame(pd.DataFrame(rows, columns=list(SOURCE_COLUMNS)))
    checked = check_messages(messages, RecordChecker.from_settings(settings, WINDOW_MS + 3_600_000))
    records, _ = once_per_record_id(checked.where("reason IS NULL"))
    return records.localCheckpoint()


def test_a_first_run_sums_its_records_as_the_table_would_give_them(spark, tmp_path):
    """`every_record`: the records are all audit_records holds, so they are summed without reading the table
    back; the rows written and the windows named are those of the path that reads it."""
    from audit.books.count.tier_counts import update_tier_counts
    from audit.contract.tables import AUDIT_RECORDS, TIER_COUNTS
    from audit.io import delta_io
    from audit.settings import Settings

    tables, windows = {}, {}
    for every_record in (True, False):
        settings = Settings(lake_path=str(tmp_path / f"lake-{every_record}"))
        delta_io.ensure_tables(lake_of(settings), (AUDIT_RECORDS.name, TIER_COUNTS.name))
        records = _records(spark, settings)
        delta_io.append(lake_of(settings), AUDIT_RECORDS, records)
        resummed = update_tier_counts(spark, lake_of(settings), records, every_record=every_record)
        stored = delta_io.read_table(spark, lake_of(settings), TIER_COUNTS.name).drop("updated_at")
        tables[every_record] = sorted(
            (row.asDict() for row in stored.collect()), key=lambda row: (row["window_start"], row["tier"])
        )
        windows[every_record] = sorted(map(tuple, resummed.windows.select("topic", "window_start", "date").collect()))

    assert tables[True] == tables[False]
    assert len(tables[True]) == 3  # producer and aggregate in the first window, producer in the second
    producer_rows = [row for row in tables[True] if row["tier"] == "producer"]
    assert {row["window_start"].minute: row["by_partition"] for row in producer_rows} == {0: {0: 6, 1: 9}, 10: None}
    assert windows[True] == windows[False] and len(windows[True]) == 2
