"""Delta table plumbing for the Spark jobs: create the declared tables, merge into them safely.

Every write is a MERGE on the table's natural key (audit/contract/tables.py), so a rerun over the same input
updates nothing and a replayed batch duplicates nothing. Rows are updated only when a compared
column really changed, which keeps `updated_at` (and the table's history) quiet on reruns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import TYPE_CHECKING, Any

from audit.contract.tables import INTERNAL_TABLES, TABLES, Table, table_path  # noqa: F401 (table_path is re-used by the jobs)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)

# Created without deletion vectors, so the `deltalake` reader of the UI and alerts reads them as-is.
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}
CREATING_THREADS = 4


def spark_schema(table: Table):
    from pyspark.sql.types import StructType

    return StructType.fromDDL(table.ddl())


_ENSURED: set[str] = set()  # paths this process has created or found, so later runs skip the check


def ensure_table(spark: SparkSession, lake_root: str, table: Table) -> str:
    """Create `table` under `lake_root` when it does not exist; returns its path."""
    from delta.tables import DeltaTable

    path = table_path(lake_root, table.name)
    if path in _ENSURED:
        return path
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(spark_schema(table))
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    try:
        builder.execute()
    except Exception as exc:
        if "DELTA_TABLE_NOT_FOUND" not in str(exc) or not _remove_interrupted_creation(spark, path):
            raise
        builder.execute()
    _ENSURED.add(path)
    return path


def _remove_interrupted_creation(spark: SparkSession, path: str) -> bool:
    """A creation killed before its first commit leaves a `_delta_log` folder with no commit in it,
    and Delta then takes the folder for a table that does not exist, for ever. Such a folder holds
    no data: remove it (any Hadoop file system) so the creation can run again. True when removed."""
    jvm: Any = spark.sparkContext._jvm  # py4j's view of the driver JVM
    log_dir = jvm.org.apache.hadoop.fs.Path(path, "_delta_log")
    fs = log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(log_dir) or any(status.getPath().getName().endswith(".json") for status in fs.listStatus(log_dir)):
        return False
    log.warning("removing the log of a table creation that was interrupted", extra={"path": path})
    return bool(fs.delete(log_dir, True))


def ensure_tables(spark: SparkSession, lake_root: str, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """Every declared table (or those named), created when missing: {name: path}.

    Created side by side: each creation is a Delta commit that mostly waits on the file system and the
    driver, so a first run on a new lake does not pay for them one after the other."""
    known = {**TABLES, **INTERNAL_TABLES}
    names = names or tuple(known)
    with ThreadPoolExecutor(max_workers=CREATING_THREADS) as pool:
        paths = pool.map(lambda name: ensure_table(spark, lake_root, known[name]), names)
        return dict(zip(names, paths, strict=True))


def _key_condition(table: Table, rows, prune: bool = True, dates: Iterable | None = None) -> str:
    """The MERGE condition on `table`'s key; `dates`: the partition values of `rows` when the caller knows
    them (see `date_counts`), else they are collected from `rows`."""
    conditions = [f"t.`{name}` <=> s.`{name}`" for name in table.key]
    if prune:
        # Where the partition column follows from the key, naming its values as literals lets Delta
        # read only those partitions' files of the target: an increment touches a few dates, not all.
        for name in (p for p in table.partition_by if p not in table.key):
            known = dates if dates is not None else [row[0] for row in rows.select(name).distinct().collect()]
            values = sorted({str(value) for value in known if value is not None})
            conditions.append(f"t.`{name}` = s.`{name}`")
            if values:
                conditions.append(f"t.`{name}` IN ({', '.join(repr(v) for v in values)})")
    return " AND ".join(conditions)


def date_counts(rows, column: str = "date") -> dict:
    """Rows of `rows` per value of `column`, in one Spark action: what a write needs to know beforehand
    (whether there is anything to write, and which partitions it touches)."""
    return {row[0]: row[1] for row in rows.groupBy(column).count().collect()}


# Table paths this process has seen holding files, so later writes skip the `detail()` call. Should one be
# emptied since (a DELETE), a MERGE into it inserts exactly what the append would have: only slower.
_NON_EMPTY: set[str] = set()


def _is_empty(target, path: str) -> bool:
    if path in _NON_EMPTY:
        return False
    if target.detail().select("numFiles").first()[0] == 0:
        return True
    _NON_EMPTY.add(path)
    return False


def is_empty(spark: SparkSession, lake_root: str, table: Table) -> bool:
    """True while `table` holds no file (a new lake)."""
    from delta.tables import DeltaTable

    path = table_path(lake_root, table.name)
    return _is_empty(DeltaTable.forPath(spark, path), path)


def _append(rows, path: str) -> None:
    """Nothing to match against: a plain append writes the same rows as a MERGE would, much faster."""
    rows.write.format("delta").mode("append").save(path)
    _NON_EMPTY.add(path)


def append(lake_root: str, table: Table, rows) -> None:
    """Append `rows`, known to hold only keys the table does not have yet."""
    _append(rows.select(*table.column_names), table_path(lake_root, table.name))


def insert_new(
    spark: SparkSession, lake_root: str, table: Table, rows, *, prune: bool = True, dates: Iterable | None = None
) -> None:
    """Insert the rows whose key is not in the table yet; existing keys are left as they are.

    `prune=False` where the partition column does not follow from the key (a reject's ingest date);
    `dates`: the partition values of `rows` when known.
    """
    from delta.tables import DeltaTable

    path = table_path(lake_root, table.name)
    target = DeltaTable.forPath(spark, path)
    rows = rows.select(*table.column_names)
    if _is_empty(target, path):
        _append(rows, path)
        return
    condition = _key_condition(table, rows, prune, dates)
    target.alias("t").merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()


def upsert(
    spark: SparkSession,
    lake_root: str,
    table: Table,
    rows,
    *,
    ignore: tuple[str, ...] = ("updated_at",),
    dates: Iterable | None = None,
) -> None:
    """Insert new keys; update existing ones only where a column other than `ignore` changed.
    `dates`: the partition values of `rows` when known."""
    from delta.tables import DeltaTable

    path = table_path(lake_root, table.name)
    target = DeltaTable.forPath(spark, path)
    rows = rows.select(*table.column_names)
    if _is_empty(target, path):
        _append(rows, path)
        return
    compared = [c for c in table.columns if c.name not in table.key and c.name not in ignore]
    changed = reduce(
        lambda a, b: f"{a} OR {b}", [f"NOT ({_comparable('t', c)} <=> {_comparable('s', c)})" for c in compared]
    )
    (
        target.alias("t")
        .merge(rows.alias("s"), _key_condition(table, rows, dates=dates))
        .whenMatchedUpdateAll(condition=changed)
        .whenNotMatchedInsertAll()
        .execute()
    )


def _comparable(side: str, column) -> str:
    """An expression of `column` that `<=>` can compare: maps and arrays as canonical JSON."""
    name = f"{side}.`{column.name}`"
    if column.type.startswith("MAP"):
        return f"to_json(array_sort(map_entries({name})))"
    if column.type.startswith("ARRAY") or column.type.startswith("STRUCT"):
        return f"to_json({name})"
    return name


def read_table(spark: SparkSession, lake_root: str, name: str):
    return spark.read.format("delta").load(table_path(lake_root, name))
