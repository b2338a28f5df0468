"""Delta helpers on a real local Spark session: tables survive the ways their writers die."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.arrow import arrow_schema
from audit.contract.tables import BRONZE, TIER_COUNTS
from audit.io import delta_io
from audit.io.delta_checksum import write_first_checksum
from audit.io.lake import Lake

pytestmark = pytest.mark.spark


def test_a_table_creation_killed_before_its_first_commit_is_created_again(spark, tmp_path):
    """The lake job killed while creating bronze leaves `_delta_log/_staged_commits` and no commit: a
    restart creates the table again instead of failing with DELTA_TABLE_NOT_FOUND."""
    lake = tmp_path / "lake"
    (lake / BRONZE.name / "_delta_log" / "_staged_commits").mkdir(parents=True)

    path = delta_io.ensure_table(str(lake), BRONZE)

    assert spark.read.format("delta").load(path).columns == list(BRONZE.column_names)
    assert (lake / BRONZE.name / "_delta_log" / "00000000000000000000.json").exists()


def test_a_table_with_commits_is_never_replaced(spark, tmp_path):
    lake = str(tmp_path / "lake")
    path = delta_io.ensure_table(lake, TIER_COUNTS)
    row = _count_row("orders", START, "dc1", 5, START)
    spark.createDataFrame([row], delta_io.spark_schema(TIER_COUNTS)).write.format("delta").mode("append").save(path)
    delta_io._ENSURED.discard(path)  # as a new process would see it

    assert delta_io.ensure_table(lake, TIER_COUNTS) == path
    assert deltalake.DeltaTable(path).version() == 1  # the creation and the append, nothing created again
    assert spark.read.format("delta").load(path).count() == 1


def test_tables_created_by_deltalake_are_what_spark_would_create(spark, tmp_path):
    """Spark reads the declared columns, partitions and properties, and writes to them."""
    lake = str(tmp_path / "lake")
    path = delta_io.ensure_table(lake, TIER_COUNTS)

    detail = DeltaTable.forPath(spark, path).detail().first()
    assert spark.read.format("delta").load(path).schema == delta_io.spark_schema(TIER_COUNTS)
    assert detail.partitionColumns == list(TIER_COUNTS.partition_by)
    assert detail.properties == delta_io.table_properties(TIER_COUNTS)
    row = _count_row("orders", START, "dc1", 5, START)
    spark.createDataFrame([row], delta_io.spark_schema(TIER_COUNTS)).write.format("delta").mode("append").save(path)
    assert delta_io.read_table(spark, lake, TIER_COUNTS.name).first()["count"] == 5


def _log_entry(path: str, name: str) -> dict:
    """A `_delta_log` file as {action: content} (a commit) or as its JSON object (a checksum)."""
    text = (Path(path) / "_delta_log" / name).read_text()
    if name.endswith(".crc"):
        return json.loads(text)
    return {kind: action for line in text.splitlines() if line.strip() for kind, action in json.loads(line).items()}


def test_a_new_table_has_the_checksum_of_its_version_0_and_spark_counts_on_from_it(spark, tmp_path):
    """deltalake writes no checksum, so `ensure_table` writes version 0's (else Spark replays the log for it).
    Spark computes the checksums of later versions from it: a wrong count in it would be wrong in all of them."""
    lake = str(tmp_path / "lake")
    path = delta_io.ensure_table(lake, TIER_COUNTS)

    first, creation = _log_entry(path, "00000000000000000000.crc"), _log_entry(path, "00000000000000000000.json")
    assert (first["numFiles"], first["tableSizeBytes"], first["allFiles"]) == (0, 0, [])
    assert (first["metadata"], first["protocol"]) == (creation["metaData"], creation["protocol"])
    assert delta_io.read_table(spark, lake, TIER_COUNTS.name).count() == 0
    rows = [_count_row("orders", START, "dc1", 5, START), _count_row("orders", EARLIER, "dc1", 3, START)]
    spark.createDataFrame(rows, delta_io.spark_schema(TIER_COUNTS)).repartition(2).write.format("delta").mode(
        "append"
    ).save(path)

    files = [Path(uri.removeprefix("file://")) for uri in deltalake.DeltaTable(path).file_uris()]
    second = _log_entry(path, "00000000000000000001.crc")
    assert (second["numFiles"], second["tableSizeBytes"]) == (len(files), sum(f.stat().st_size for f in files))
    assert len(second["allFiles"]) == len(files)
    assert delta_io.read_table(spark, lake, TIER_COUNTS.name).count() == 2


def test_no_checksum_is_written_for_a_version_0_with_files_or_a_table_not_on_this_machine(tmp_path):
    path = str(tmp_path / "written")
    deltalake.write_deltalake(path, pa.table({"n": [1, 2]}))  # version 0 adds a file

    assert not write_first_checksum(path)
    assert not (Path(path) / "_delta_log" / "00000000000000000000.crc").exists()
    assert not write_first_checksum("s3a://bucket/lake/tier_counts")


def test_a_table_whose_first_commit_was_cleaned_up_is_ensured_without_a_checksum(tmp_path):
    """An old lake: Delta deletes commits older than its log retention once a checkpoint covers them."""
    lake = str(tmp_path / "lake")
    path = delta_io.ensure_table(lake, TIER_COUNTS)
    delta_io.insert_new_from_driver(lake, TIER_COUNTS, [_count_row("orders", START, "dc1", 5, START)])
    deltalake.DeltaTable(path).create_checkpoint()
    log = Path(path) / "_delta_log"
    for name in ("00000000000000000000.json", "00000000000000000000.crc"):
        (log / name).unlink()
    delta_io._ENSURED.discard(path)  # as a new process would see it

    assert delta_io.ensure_table(lake, TIER_COUNTS) == path
    assert not (log / "00000000000000000000.crc").exists()
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 1


# -- replace_windows -----------------------------------------------------------------------------

DAY = dt.date(2026, 11, 25)
START = dt.datetime(2026, 11, 25, 10, 0)
EARLIER = dt.datetime(2026, 11, 25, 9, 0)


def _count_row(topic: str, window: dt.datetime, tier: str, count: int, updated: dt.datetime) -> dict:
    return {
        "origin_cluster": "dc1",
        "topic": topic,
        "logical_topic": f"dc1.{topic}",
        "window_start": window,
        "window_minutes": 10,
        "tier": tier,
        "count": count,
        "bytes": count * 100,
        "send_failed": 0,
        "no_timestamp": 0,
        "by_partition": {0: count},
        "records": 1,
        "latency_p99_ms": 1.0,
        "latency_max_ms": 2.0,
        "updated_at": updated,
        "date": window.date(),
    }


def _write(spark, lake: str, rows: list[dict]) -> None:
    frame = spark.createDataFrame(rows, delta_io.spark_schema(TIER_COUNTS))
    delta_io.replace_windows(
        spark, lake, TIER_COUNTS, frame, windows={(row["date"], row["window_start"]) for row in rows}
    )


def _table(spark, lake: str) -> dict:
    frame = delta_io.read_table(spark, lake, TIER_COUNTS.name)
    return {(r.topic, r.window_start, r.tier): (r["count"], r.updated_at) for r in frame.collect()}


@pytest.mark.parametrize("named_at_most", [delta_io.MAX_NAMED_WINDOWS, 0], ids=["replaced", "too-many-merged"])
def test_replacing_a_window_keeps_its_rows_not_written_and_the_updated_at_of_those_unchanged(
    spark, tmp_path, monkeypatch, named_at_most
):
    """Past MAX_NAMED_WINDOWS windows the rows are MERGEd instead, to the same table."""
    monkeypatch.setattr(delta_io, "MAX_NAMED_WINDOWS", named_at_most)
    lake = str(tmp_path / "lake")
    delta_io.ensure_table(lake, TIER_COUNTS)
    first = dt.datetime(2026, 11, 25, 10, 5)
    _write(
        spark,
        lake,
        [_count_row(t, w, "dc1", 10, first) for t in ("a", "b") for w in (EARLIER, START)]
        + [_count_row("d", START, "lake", 7, first)],
    )

    later = dt.datetime(2026, 11, 25, 10, 15)
    _write(
        spark,
        lake,
        [
            _count_row("a", START, "dc1", 12, later),
            _count_row("b", START, "dc1", 10, later),
            _count_row("c", START, "lake", 3, later),
        ],
    )

    assert _table(spark, lake) == {
        ("a", EARLIER, "dc1"): (10, first),
        ("b", EARLIER, "dc1"): (10, first),
        ("a", START, "dc1"): (12, later),  # changed
        ("b", START, "dc1"): (10, first),  # the same: keeps its updated_at
        ("c", START, "lake"): (3, later),  # new
        ("d", START, "lake"): (7, first),  # not written: kept as it was
    }
    version = DeltaTable.forPath(spark, Lake.of(lake).path(TIER_COUNTS.name)).history(1).first()
    if named_at_most == 0:
        assert version.operation == "MERGE"
        return
    assert version.operation == "WRITE" and "window_start" in version.operationParameters["predicate"]

    # A rewrite that changes nothing writes nothing: no new version.
    _write(spark, lake, [_count_row("a", START, "dc1", 12, dt.datetime(2026, 11, 25, 11, 0))])
    again = DeltaTable.forPath(spark, Lake.of(lake).path(TIER_COUNTS.name)).history(1).first()
    assert again.version == version.version
    assert _table(spark, lake)[("a", START, "dc1")] == (12, later)


def test_windows_written_in_order_are_read_back_from_their_own_files_only(spark, tmp_path):
    """Each file covers a short run of windows, so naming a window reads few of them."""
    lake = str(tmp_path / "lake")
    delta_io.ensure_table(lake, TIER_COUNTS)
    windows = [START + dt.timedelta(minutes=10 * k) for k in range(10)]
    rows = [_count_row(f"t{t:05d}", w, "dc1", 1, START) for w in windows for t in range(12_000)]
    _write(spark, lake, rows)
    table = delta_io.read_table(spark, lake, TIER_COUNTS.name)
    every_file = len(table.inputFiles())
    assert every_file >= 120_000 // delta_io.WINDOW_FILE_ROWS

    one_window = table.where(delta_io.window_predicate([(DAY, windows[-1])]))
    assert len(one_window.inputFiles()) < every_file
    assert one_window.count() == 12_000
    files = deltalake.DeltaTable(Lake.of(lake).path(TIER_COUNTS.name)).get_add_actions(flatten=True)
    kept = {name.removeprefix("min.") for name in files.schema.names if name.startswith("min.")}
    assert kept == set(TIER_COUNTS.stats_columns), "min and max are kept only for the columns reads filter on"


def test_a_table_is_empty_until_any_writer_adds_a_file_and_again_once_all_are_removed(spark, tmp_path):
    """`is_empty` decides between a plain append and a MERGE, so it must see the latest version, whoever wrote it."""
    lake = str(tmp_path / "lake")
    assert delta_io.is_empty(lake, TIER_COUNTS), "a table not created yet holds no file"
    path = delta_io.ensure_table(lake, TIER_COUNTS)
    assert delta_io.is_empty(lake, TIER_COUNTS)

    row = _count_row("orders", START, "dc1", 5, EARLIER)
    rows = pa.Table.from_pylist([row], schema=arrow_schema(TIER_COUNTS))
    deltalake.write_deltalake(path, rows, mode="append")  # another process's writer, outside this JVM
    assert not delta_io.is_empty(lake, TIER_COUNTS), "another writer's append is seen"

    DeltaTable.forPath(spark, path).delete()
    delta_io._NON_EMPTY.discard(path)  # as a new process would see it
    assert delta_io.is_empty(lake, TIER_COUNTS)


def test_an_upsert_from_the_driver_writes_what_spark_reads_and_rewrites_only_changed_rows(spark, tmp_path):
    """The small tables the driver writes with `deltalake` (the offsets: a key column named `partition`) hold
    what Spark's MERGE would: new keys inserted, changed rows updated, unchanged rows and their updated_at kept."""
    from audit.contract.tables import SOURCE_OFFSETS
    from audit.io.lake_read import table_version

    lake = str(tmp_path / "lake")
    delta_io.ensure_table(lake, SOURCE_OFFSETS)
    first, later = (dt.datetime(2026, 11, 25, h, tzinfo=dt.UTC) for h in (10, 11))

    def offset(partition: int, next_offset: int, at: dt.datetime) -> dict:
        return {
            "cluster": "dc1",
            "topic": "_audit",
            "partition": partition,
            "next_offset": next_offset,
            "updated_at": at,
        }

    delta_io.upsert_from_driver(lake, SOURCE_OFFSETS, [offset(0, 10, first), offset(1, 20, first)])
    delta_io.upsert_from_driver(lake, SOURCE_OFFSETS, [offset(0, 10, later), offset(1, 25, later), offset(2, 5, later)])
    version = table_version(lake, SOURCE_OFFSETS.name)
    delta_io.upsert_from_driver(lake, SOURCE_OFFSETS, [])
    assert table_version(lake, SOURCE_OFFSETS.name) == version, "nothing to write: no commit"
    delta_io.upsert_from_driver(lake, SOURCE_OFFSETS, [offset(1, 25, dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC))])
    assert table_version(lake, SOURCE_OFFSETS.name) == version, "only updated_at differs: no commit"

    stored = delta_io.read_table(spark, lake, SOURCE_OFFSETS.name).collect()
    as_read = {(r.partition, r.next_offset, r.updated_at.replace(tzinfo=dt.UTC)) for r in stored}
    assert as_read == {(0, 10, first), (1, 25, later), (2, 5, later)}, "partition 0 unchanged: its updated_at kept"


def test_an_upsert_from_the_driver_updates_only_where_its_condition_holds(tmp_path):
    """`_partition_status` keeps each reporter's newest status: an older one read late changes nothing."""
    from audit.contract.tables import PARTITION_STATUS
    from audit.io.lake_read import read_arrow

    lake = str(tmp_path / "lake")
    no_rows = pa.Table.from_pylist([], schema=arrow_schema(PARTITION_STATUS))
    deltalake.write_deltalake(Lake.of(lake).path(PARTITION_STATUS.name), no_rows)
    key = {"tier": "dc1", "cluster": "dc1", "seen_topic": "orders", "service": "kaudit-counter", "partition": 0}

    def status(lag: int, at_hour: int) -> dict:
        return {**key, "lag": lag, "emitted_at": dt.datetime(2026, 11, 25, at_hour, tzinfo=dt.UTC)}

    newer = 's."emitted_at" > t."emitted_at"'
    delta_io.upsert_from_driver(lake, PARTITION_STATUS, [status(5, 10)], ignore=(), update_when=newer)
    delta_io.upsert_from_driver(lake, PARTITION_STATUS, [status(0, 11)], ignore=(), update_when=newer)
    delta_io.upsert_from_driver(lake, PARTITION_STATUS, [status(9, 9)], ignore=(), update_when=newer)
    assert [r["lag"] for r in read_arrow(lake, PARTITION_STATUS.name).to_pylist()] == [0]


def test_an_insert_from_the_driver_stores_each_key_once(tmp_path):
    """A run killed after storing its restatements finds them again: the rerun must not store them twice."""
    from audit.contract.tables import RESTATEMENTS
    from audit.io.lake_read import read_arrow

    lake = str(tmp_path / "lake")
    path = Lake.of(lake).path(RESTATEMENTS.name)
    deltalake.write_deltalake(path, pa.Table.from_pylist([], schema=arrow_schema(RESTATEMENTS)), partition_by=["date"])

    def restatement(key: str, day: int) -> dict:
        return {"restatement_id": key, "after_status": "complete", "date": dt.date(2026, 11, day)}

    delta_io.insert_new_from_driver(lake, RESTATEMENTS, [restatement("a", 24), restatement("b", 25)])
    delta_io.insert_new_from_driver(lake, RESTATEMENTS, [restatement("b", 25), restatement("c", 25)])
    stored = read_arrow(lake, RESTATEMENTS.name, columns=["restatement_id"]).column(0).to_pylist()
    assert sorted(stored) == ["a", "b", "c"]


WINDOW_STARTS = st.lists(
    st.one_of(
        st.none(), st.integers(0, 6 * 24 * 3).map(lambda w: dt.datetime(2026, 11, 24) + w * dt.timedelta(minutes=10))
    ),
    max_size=30,
)


@given(stored=WINDOW_STARTS, asked=WINDOW_STARTS)
def test_the_filter_of_a_column_of_window_starts_selects_the_rows_the_filter_of_their_pairs_does(stored, asked):
    """Windows on both sides of midnight and status rows (no window): `window_filter_of` dates each start in UTC
    as the tables do and ignores nulls, as `window_filter` does given (date, start) pairs."""
    import pyarrow.dataset as ds

    utc = pa.timestamp("us", tz="UTC")
    dates = [None if w is None else w.date() for w in stored]
    rows = ds.dataset(pa.table({"date": pa.array(dates, pa.date32()), "window_start": pa.array(stored, utc)}))
    pairs = delta_io.window_filter((None if w is None else w.date(), w) for w in asked)
    of_column = delta_io.window_filter_of(pa.chunked_array([pa.array(asked, pa.timestamp("us"))], pa.timestamp("us")))

    assert rows.to_table(filter=of_column).to_pylist() == rows.to_table(filter=pairs).to_pylist()
    assert rows.to_table(filter=of_column).num_rows == sum(1 for w in stored if w is not None and w in set(asked))
