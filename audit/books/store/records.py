"""Storing a run's checked rows: each valid record once per record_id into `audit_records`, each reject once
per audit-topic offset into `audit_rejects`, and the retention gaps the status records carry (retention_gaps.py).
A small run's rows (a pyarrow Table, audit/books/read/run_records.py) are deduplicated and appended in the driver."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from audit.books.check.checked_rows import CHECKED_ROWS_DDL, ROW
from audit.books.read.run_records import held_by_driver
from audit.books.store.retention_gaps import carried_gaps, store_retention_gaps
from audit.contract.arrow import arrow_table
from audit.contract.tables import AUDIT_RECORDS, AUDIT_REJECTS
from audit.io import delta_io
from audit.io.lake_read import read_arrow
from audit.io.spark import BROADCAST_MAX_NUMBERS, broadcast_when_small, local_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.io.lake import Lake

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredRecords:
    """What `store_records_and_rejects` stored: every valid record read (`records`, see there), how many of them
    were new, how many rows were rejects, and whether `audit_records` held none before (`every_record`: the
    records read are all the table holds)."""

    records: Any  # a pyarrow Table for a small run, else a Spark DataFrame
    new: int
    rejects: int
    every_record: bool


def store_records_and_rejects(
    spark: SparkSession, lake: Lake, checked, *, done: Callable[..., None] = lambda step, **fields: None
) -> StoredRecords:
    """Insert new records (once per record_id) and rejects (once per audit-topic offset); `done(step)` is told
    as each step is done.

    Keeps every valid record read, not only the new ones: the updates after this step must see the
    records of a run that was killed after inserting them (its offsets were not stored, so this run
    read them again), else their windows would never be re-summed. Re-summing a window is idempotent.
    `checked`: the rows of `check_messages`, or of `check_in_driver` for a small run, whose records are
    deduplicated and appended in the driver (`new_in_driver`) and kept as a pyarrow Table, which the
    steps after this one take as the sign of a small run and handle in the driver too.
    """
    from pyspark.sql import functions as F

    done("records read and checked")
    rows = checked if held_by_driver(checked) else None
    if rows is None:  # one job counts both, for the rest of the run
        rejects, gaps = checked.agg(F.count("reason"), F.count(carried_gaps())).first()
    else:
        rejects = rows.num_rows - rows["reason"].null_count
        gaps = rows.num_rows - rows["retention_gaps_json"].null_count
    if rows is not None and (gaps or rejects):
        checked = local_frame(spark, rows, CHECKED_ROWS_DDL)  # retention gaps or rejects, rare: stored by Spark
    if gaps:
        store_retention_gaps(spark, lake, checked)
    done("retention gaps")
    every_record = delta_io.is_empty(lake, AUDIT_RECORDS)
    if rows is not None:
        records, new_records = new_in_driver(lake, rows, every_record=every_record)
        new = new_records.num_rows
        done("records deduplicated", records=new, rejects=rejects)
        if new:
            delta_io.append_from_driver(lake, AUDIT_RECORDS, new_records)
    else:
        records, distinct = once_per_record_id(checked.where(F.col("reason").isNull()))
        new_records = records if every_record else _not_stored(spark, lake, records)
        new = distinct if every_record else new_records.count()
        done("records deduplicated", records=new, rejects=rejects)
        if new:  # new by the join above: appended, not merged (a second look at the same keys)
            delta_io.append(lake, AUDIT_RECORDS, new_records)
    if rejects:  # a small run's `checked` was handed to Spark above
        _store_rejects(spark, lake, checked)
    return StoredRecords(records, new, rejects, every_record)


def _store_rejects(spark: SparkSession, lake: Lake, checked) -> None:
    """Insert the rejects of `checked` (a frame) and log the first few."""
    rejects = _rejects(checked)
    delta_io.insert_new(spark, lake, AUDIT_REJECTS, rejects, prune=False)
    for row in rejects.select("read_from_cluster", "read_from_offset", "reason").limit(5).collect():
        log.warning(
            "audit record rejected",
            extra={"cluster": row.read_from_cluster, "offset": row.read_from_offset, "reason": row.reason},
        )


def _rejects(checked):
    """The rows of `checked` (a frame) that are not valid records, as `audit_rejects` dates them."""
    from pyspark.sql import functions as F

    return checked.where(F.col("reason").isNotNull()).drop(ROW).withColumn("date", F.to_date("ingested_at"))


def once_per_record_id(valid):
    """`valid` records (AUDIT_RECORDS columns, ROW and more) with one row per record_id, as AUDIT_RECORDS columns,
    and how many rows that is.

    Not `dropDuplicates`: its `first` of every column keeps string buffers, which Spark aggregates by sorting
    all the rows (a million records: 11-15 s). Here only each record_id and its rows' numbers are aggregated,
    by hashing, and counted in the same job; only when a record_id came twice (a copy was read) are the rows
    kept picked by their number, in a join. A million records without copies: one job, no join.
    Without copies the result is a projection of `valid`, computed again by each query that reads it."""
    from pyspark.sql import functions as F

    per_id = valid.groupBy("record_id").agg(F.min(ROW).alias(ROW), F.count("*").alias("copies"))
    rows, ids = per_id.agg(F.sum("copies"), F.count("*")).first()
    if ids < (rows or 0):
        kept = per_id.select(ROW).localCheckpoint()
        valid = valid.join(broadcast_when_small(kept, ids, limit=BROADCAST_MAX_NUMBERS), ROW, "left_semi")
        return valid.select(*AUDIT_RECORDS.column_names).localCheckpoint(), ids
    return valid.select(*AUDIT_RECORDS.column_names), ids


def new_in_driver(lake: Lake, checked: pa.Table, *, every_record: bool) -> tuple[pa.Table, pa.Table]:
    """`once_per_record_id` and `_not_stored` of a small run's checked rows, in the driver: (every valid record
    read, those `audit_records` does not hold yet), as AUDIT_RECORDS columns. The record_ids stored before are
    read by `deltalake` from the files that can hold the windows read (and for status records, the dates)."""
    valid = checked.filter(pc.is_null(checked["reason"]))
    first_rows = valid.group_by("record_id").aggregate([(ROW, "min")]).column(f"{ROW}_min")
    records = arrow_table(
        AUDIT_RECORDS, valid.filter(pc.is_in(valid[ROW], value_set=first_rows)).select(list(AUDIT_RECORDS.column_names))
    )
    if every_record or not records.num_rows:
        return records, records
    stored = pc.is_in(_id_and_date(records), value_set=_stored_record_ids(lake, records))
    return records, records.filter(pc.invert(pc.fill_null(stored, False)))


def _id_and_date(rows: pa.Table) -> pa.ChunkedArray:
    """Each row's record_id and date as one string: the key `_not_stored` joins on."""
    return pc.binary_join_element_wise(pc.cast(rows["record_id"], pa.string()), pc.cast(rows["date"], pa.string()), "|")


def _stored_record_ids(lake: Lake, records: pa.Table) -> pa.Array:
    """The record_ids and dates (`_id_and_date`) `audit_records` holds in the windows of `records`, and for their
    status records (no window) on their dates."""
    windowed = records.filter(pc.is_valid(records["window_start"]))
    windowless = records.filter(pc.is_null(records["window_start"]))
    filters = []
    if windowed.num_rows:
        filters.append(delta_io.window_filter_of(windowed["window_start"]))
    if windowless.num_rows:
        dates = pa.array(sorted(set(windowless["date"].to_pylist())), pa.date32())
        filters.append(pc.field("date").isin(dates) & pc.field("window_start").is_null())
    found = [
        _id_and_date(read_arrow(lake, AUDIT_RECORDS.name, columns=("record_id", "date"), filters=where))
        for where in filters
    ]
    return pa.chunked_array([chunk for keys in found for chunk in keys.chunks], pa.string()).combine_chunks()


def _not_stored(spark: SparkSession, lake: Lake, records):
    """The records whose record_id `audit_records` does not hold yet.

    A record stored before has the same window (none for a status record) and date as its copy read now,
    so only the files that can hold the windows read, or no window, are read of `audit_records`."""
    windows = delta_io.windows_of(records)
    with_window = delta_io.window_predicate(windows)
    windowless = delta_io.date_predicate(d for d, w in windows if w is None)
    if windowless is not None:
        windowless += " AND `window_start` IS NULL"
    where = " OR ".join(f"({named})" for named in (with_window, windowless) if named is not None) or "false"
    existing = delta_io.read_table(spark, lake, AUDIT_RECORDS.name).where(where)
    return records.join(existing.select("record_id", "date"), ["record_id", "date"], "left_anti").localCheckpoint()
