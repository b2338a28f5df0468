"""Delta table plumbing for the Spark jobs: create the declared tables, merge into them safely.

Every write is keyed on the table's natural key (audit/contract/tables.py), so a rerun over the same input
updates nothing and a replayed batch duplicates nothing: a MERGE, or for the big tables keyed by window
(`tier_counts`, `completeness`) an overwrite of just the windows written (`replace_windows`). Rows are
updated only when a compared column really changed, which keeps `updated_at` (and the table's history)
quiet on reruns. Rows with windows are written in window order, so a read that names its windows
(`window_predicate`) skips the files of the others. Every commit first passes `before_commit`: while this process
holds a table's lease (audit/io/lease.py), it commits only while the lease is still its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from audit.contract.arrow import arrow_schema, arrow_table
from audit.contract.tables import EVERY_TABLE, Table
from audit.io.arrow_rewrite import rewritten, updatable_columns
from audit.io.delta_checksum import write_first_checksum
from audit.io.lake import Lake, before_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)

# Created without deletion vectors, so the `deltalake` reader of the UI and alerts reads them as-is.
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "false"}


def table_properties(table: Table) -> dict[str, str]:
    """The Delta properties `table` is created with: TABLE_PROPERTIES, and its `stats_columns` when it names
    them: min and max of every column, Delta's default, cost about a third of an append, and only the columns
    reads filter on can skip a file. A table created before keeps its own setting."""
    stats = {"delta.dataSkippingStatsColumns": ",".join(table.stats_columns)} if table.stats_columns else {}
    return {**TABLE_PROPERTIES, **stats}


def spark_schema(table: Table):
    from pyspark.sql.types import StructType

    return StructType.fromDDL(table.ddl())


_ENSURED: set[str] = set()  # paths this process has created or found, so later runs skip the check


def ensure_table(lake: Lake | str, table: Table) -> str:
    """Create `table` in `lake` when it does not exist; returns its path as Spark reads it.

    Created by `deltalake` in this process, which takes milliseconds where Spark's CREATE costs a new driver
    most of a second a table, with the checksum Spark reads (`write_first_checksum`). A creation killed before
    its commit leaves a `_delta_log` folder with no commit in it, which is no table: the next call creates it
    there. A table created before some of its declared columns gains them, null in its rows so far
    (`add_missing_columns`), so every engine's next write finds them."""
    from deltalake import DeltaTable

    lake = Lake.of(lake)
    path = lake.path(table.name)
    if path in _ENSURED:
        return path
    before_commit(path)  # a creation, or new columns, is a commit
    try:
        DeltaTable.create(
            lake.uri(table.name),
            schema=arrow_schema(table),
            partition_by=list(table.partition_by) or None,
            configuration=table_properties(table),
            mode="ignore",
            storage_options=lake.storage_options(),
        )
    except Exception:
        if lake.version(table.name) is None:  # else another process created it first
            raise
    add_missing_columns(lake, table)
    write_first_checksum(path)
    _ENSURED.add(path)
    return path


def add_missing_columns(lake: Lake | str, table: Table) -> list[str]:
    """Add to the stored `table` the declared columns it lacks (a table written by an older kafka-audit), as
    nullable columns at its end (writes match columns by name); returns their names, none when it has them all."""
    from deltalake.schema import Schema

    lake = Lake.of(lake)
    stored = lake.delta_table(table.name)
    present = {field.name for field in stored.schema().fields}
    missing = [field for field in arrow_schema(table) if field.name not in present]
    if missing:
        import pyarrow as pa

        stored.alter.add_columns(list(Schema.from_arrow(pa.schema(missing)).fields))
        log.info("table gained columns", extra={"table": table.name, "columns": [f.name for f in missing]})
    return [field.name for field in missing]


def ensure_tables(lake: Lake | str, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """Every declared table (or those named), created when missing: {name: path}."""
    names = names or tuple(EVERY_TABLE)
    return {name: ensure_table(lake, EVERY_TABLE[name]) for name in names}


def _key_condition(table: Table, rows, prune: bool = True, dates: Iterable | None = None) -> str:
    """The MERGE condition on `table`'s key; `dates`: the partition values of `rows` when the caller knows
    them, else they are collected from `rows`."""
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


# Table paths this process has seen holding files, so later writes skip the `detail()` call. Should one be
# emptied since (a DELETE), a MERGE into it inserts exactly what the append would have: only slower.
_NON_EMPTY: set[str] = set()


def _is_empty(lake: Lake, name: str) -> bool:
    path = lake.path(name)
    if path in _NON_EMPTY:
        return False
    if _file_count(lake, name) == 0:
        return True
    _NON_EMPTY.add(path)
    return False


def _file_count(lake: Lake, name: str) -> int:
    """The files of the table's latest version, as `deltalake` reads its log: Spark's DeltaLog would compute
    the table's state for it with jobs of its own when the version has no checksum file. A table not created
    yet holds none, as for Spark: the append creates it."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return len(lake.delta_table(name).file_uris())
    except TableNotFoundError:
        return 0


def is_empty(lake: Lake | str, table: Table) -> bool:
    """True while `table` holds no file (a new lake)."""
    return _is_empty(Lake.of(lake), table.name)


# Rows a file of a table with windows holds at most. Written in window order, each file then covers a
# short run of windows, and Delta (which keeps each file's min and max) skips the files a read or a
# rewrite of a few windows does not need; one file per task would hold a whole day's windows.
WINDOW_FILE_ROWS = 50_000


def _in_window_order(rows):
    """`rows` sorted by window within each write task, when they have windows. A table with windows is partitioned
    by their date, which comes first: the writer, which needs its rows grouped by partition, then finds them so
    and sorts them no second time."""
    if "window_start" not in rows.columns:
        return rows
    return rows.sortWithinPartitions(*(["date"] if "date" in rows.columns else []), "window_start")


def _append(rows, path: str) -> None:
    """Nothing to match against: a plain append writes the same rows as a MERGE would, much faster."""
    before_commit(path)
    _in_window_order(rows).write.format("delta").mode("append").option("maxRecordsPerFile", WINDOW_FILE_ROWS).save(path)
    _NON_EMPTY.add(path)


def append(lake: Lake | str, table: Table, rows) -> None:
    """Append `rows`, known to hold only keys the table does not have yet."""
    _append(rows.select(*table.column_names), Lake.of(lake).path(table.name))


def append_from_driver(lake: Lake | str, table: Table, rows) -> None:
    """`append` of rows the driver holds (a pyarrow Table), written by `deltalake` in window order."""
    lake = Lake.of(lake)
    rows = arrow_table(table, rows)
    lake.write(table.name, rows.sort_by("window_start") if "window_start" in rows.column_names else rows, mode="append")
    _NON_EMPTY.add(lake.path(table.name))


def insert_new(spark: SparkSession, lake: Lake | str, table: Table, rows, *, prune: bool = True) -> None:
    """Insert the rows whose key is not in the table yet; existing keys are left as they are.

    `prune=False` where the partition column does not follow from the key (a reject's ingest date).
    """
    from delta.tables import DeltaTable

    lake = Lake.of(lake)
    path = lake.path(table.name)
    rows = rows.select(*table.column_names)
    if _is_empty(lake, table.name):
        _append(rows, path)
        return
    target = DeltaTable.forPath(spark, path)
    condition = _key_condition(table, rows, prune)
    before_commit(path)
    target.alias("t").merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()


def upsert(
    spark: SparkSession,
    lake: Lake | str,
    table: Table,
    rows,
    *,
    ignore: tuple[str, ...] = ("updated_at",),
    dates: Iterable | None = None,
    update_when: str | None = None,
) -> None:
    """Insert new keys; update existing ones only where a column other than `ignore` changed.
    `dates`: the partition values of `rows` when known; `update_when`: a condition on `t` (the table) and `s`
    (the rows) that an update must meet as well."""
    from delta.tables import DeltaTable

    lake = Lake.of(lake)
    path = lake.path(table.name)
    rows = rows.select(*table.column_names)
    if _is_empty(lake, table.name):
        _append(rows, path)
        return
    target = DeltaTable.forPath(spark, path)
    changed = _changed(table, ignore)
    if update_when:
        changed = f"({update_when}) AND ({changed})"
    before_commit(path)
    (
        target.alias("t")
        .merge(rows.alias("s"), _key_condition(table, rows, dates=dates))
        .whenMatchedUpdateAll(condition=changed)
        .whenNotMatchedInsertAll()
        .execute()
    )


def _changed(table: Table, ignore: tuple[str, ...]) -> str:
    """A Spark SQL condition on `t` (the table) and `s` (the rows): true when an updatable column differs."""
    return " OR ".join(
        f"NOT ({_comparable('t', c)} <=> {_comparable('s', c)})" for c in updatable_columns(table, ignore)
    )


def upsert_from_driver(
    lake: Lake | str,
    table: Table,
    rows,
    *,
    ignore: tuple[str, ...] = ("updated_at",),
    update_when: str | None = None,
) -> None:
    """`upsert` of rows this process holds (dicts, a pandas or a pyarrow table), written by `deltalake` here
    instead of a Spark MERGE, which costs a second or more for a handful of rows. For the tables Spark does not
    read during a run (`lake_read.read_arrow` reads them): Spark's first look at a log another writer extended
    costs it a second or more. A write that changes no row makes no commit. `update_when`: as
    `upsert`'s, in deltalake's SQL (names in double quotes)."""
    if not len(rows):
        return
    changed = " OR ".join(f'(t."{c.name}" IS DISTINCT FROM s."{c.name}")' for c in updatable_columns(table, ignore))
    if update_when:
        changed = f"({update_when}) AND ({changed})" if changed else update_when
    merge = _merge_from_driver(lake, table, rows)
    before_commit(Lake.of(lake).path(table.name))
    merge.when_matched_update_all(predicate=changed or None).when_not_matched_insert_all().execute()


def insert_new_from_driver(lake: Lake | str, table: Table, rows) -> None:
    """`insert_new` of rows this process holds, written by `deltalake` (see `upsert_from_driver`)."""
    if len(rows):
        merge = _merge_from_driver(lake, table, rows)
        before_commit(Lake.of(lake).path(table.name))
        merge.when_not_matched_insert_all().execute()


def delete_from_driver(lake: Lake | str, table: Table, keys, *, when: str | None = None) -> None:
    """Delete the rows of `table` whose key is one of `keys` (dicts of the key columns) and, if given, that
    satisfy `when` (deltalake's SQL over the target `t`), by deltalake's MERGE; nothing to delete: no commit."""
    if len(keys):
        import pyarrow as pa

        columns = {name: [key[name] for key in keys] for name in table.key}
        rows = pa.table(columns, schema=pa.schema([arrow_schema(table).field(name) for name in table.key]))
        before_commit(Lake.of(lake).path(table.name))
        Lake.of(lake).delta_table(table.name).merge(
            rows,
            predicate=" AND ".join(f't."{name}" = s."{name}"' for name in table.key),
            source_alias="s",
            target_alias="t",
        ).when_matched_delete(predicate=when).execute()


def _merge_from_driver(lake: Lake | str, table: Table, rows):
    """deltalake's MERGE of `rows` on the table's key. Keys are matched with `=`, not `<=>`: the table's key
    columns must never be null. A partition column that follows from the key is matched too, which lets
    deltalake read only the partitions the rows fall in."""
    matched = [*table.key, *(p for p in table.partition_by if p not in table.key)]
    return (
        Lake.of(lake)
        .delta_table(table.name)
        .merge(
            arrow_table(table, rows),
            predicate=" AND ".join(f't."{name}" = s."{name}"' for name in matched),
            source_alias="s",
            target_alias="t",
        )
    )


# More windows than this in one write are not named one by one (see `window_predicate`).
MAX_NAMED_WINDOWS = 1_000


def windows_of(rows) -> set:
    """The (date, window_start) pairs of `rows`, in one Spark action: the windows a write or a read names."""
    return {(row[0], row[1]) for row in rows.select("date", "window_start").distinct().collect()}


def date_predicate(dates: Iterable) -> str | None:
    """A SQL predicate naming `dates` as literals, so Delta reads only their partitions; None: no date."""
    named = sorted({d for d in dates if d is not None})
    return f"`date` IN ({', '.join(f'DATE{str(d)!r}' for d in named)})" if named else None


def window_predicate(windows: Iterable) -> str | None:
    """A SQL predicate that holds for the rows of `windows` ((date, window_start) pairs) and names them as
    literals, so Delta reads only the partitions and files that can hold them: their dates, and their
    windows unless there are too many to name. None when there are none."""
    windows = {(d, w) for d, w in windows if d is not None and w is not None}
    if not windows:
        return None
    dates = date_predicate(d for d, _ in windows)
    if len(windows) > MAX_NAMED_WINDOWS:
        return dates
    return (
        f"{dates} AND `window_start` IN ({', '.join(f'TIMESTAMP{str(w)!r}' for w in sorted({w for _, w in windows}))})"
    )


def in_windows(frame, windows: Iterable):
    """`frame` (a table read) restricted to `windows` by `window_predicate`; as it is when none is named."""
    named = window_predicate(windows)
    return frame if named is None else frame.where(named)


def replace_windows(
    spark: SparkSession,
    lake: Lake | str,
    table: Table,
    rows,
    *,
    windows: Iterable,
    ignore: tuple[str, ...] = ("updated_at",),
    existing=None,
) -> None:
    """`upsert` for a table keyed by window: the rows of every window in `windows` ((date, window_start)
    pairs: those of `rows`) are written again, in window order, in place of the files that held them.
    `existing`: the table's rows in those windows, when the caller has read them already.

    One overwrite (`replaceWhere` on those windows) instead of a MERGE: a MERGE rewrites every file that
    holds a key it updates, and its output, one file per date, soon holds the whole day, so each run rewrote
    the day. Here a run rewrites only its windows' rows. As with `upsert`, a row keeps its `updated_at` when
    no other column changed, and nothing is written when no row changed."""
    from pyspark.sql import functions as F

    lake = Lake.of(lake)
    path = lake.path(table.name)
    rows = rows.select(*table.column_names)
    if _is_empty(lake, table.name):
        _append(rows, path)
        return
    windows = set(windows)
    if len(windows) > MAX_NAMED_WINDOWS:
        upsert(spark, lake, table, rows, ignore=ignore, dates={d for d, _ in windows})
        return
    predicate = window_predicate(windows)
    if predicate is None:
        raise ValueError(f"{table.name}: rows to write but no window named for them")
    if existing is None:
        existing = read_table(spark, lake, table.name).where(predicate)
    changed = _changed(table, ignore)
    written = F.col(f"s.`{table.key[0]}`").isNotNull()  # else a row of those windows kept as it is
    fresh = written & (F.col(f"t.`{table.key[0]}`").isNull() | F.expr(changed))
    both = rows.alias("s").join(
        existing.alias("t"), [F.col(f"s.`{k}`") == F.col(f"t.`{k}`") for k in table.key], "full"
    )
    replaced = both.select(
        *(
            F.when(fresh if c in ignore else written, F.col(f"s.`{c}`")).otherwise(F.col(f"t.`{c}`")).alias(c)
            for c in table.column_names
        ),
        fresh.alias("_fresh"),
    ).localCheckpoint()  # read before the table is overwritten
    if not replaced.where("_fresh").take(1):
        return  # nothing changed: the table and its history stay as they are
    before_commit(path)
    (
        _in_window_order(replaced.drop("_fresh").coalesce(1))
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .option("maxRecordsPerFile", WINDOW_FILE_ROWS)
        .save(path)
    )


def replace_windows_from_driver(
    spark: SparkSession,
    lake: Lake | str,
    table: Table,
    rows,
    *,
    windows: Iterable,
    stored,
    ignore: tuple[str, ...] = ("updated_at",),
) -> None:
    """`replace_windows` of rows the driver holds (a pyarrow Table of `table`'s columns), with the rewrite
    computed here from `stored` (the table's rows in `windows`, read by `deltalake` with `window_filter`) and
    written by `deltalake`: the same rows, the same skip when none changed, and one overwrite of the windows
    named, several times faster than Spark's rewrite of a run's windows. Spark's next read of the table pays for
    reading the versions it did not write, so this suits a table Spark reads only now and then. Over more
    windows than are named one by one, Spark merges, as `replace_windows` does."""
    lake = Lake.of(lake)
    windows = set(windows)
    if _is_empty(lake, table.name):
        lake.write(table.name, rows.sort_by("window_start"), mode="append")
        _NON_EMPTY.add(lake.path(table.name))
        return
    if len(windows) > MAX_NAMED_WINDOWS:  # not named one by one: a MERGE, as `replace_windows` does
        upsert(spark, lake, table, spark.createDataFrame(rows), ignore=ignore, dates={d for d, _ in windows})
        return
    replaced = rewritten(table, rows, stored, ignore=ignore)
    if replaced is not None:
        lake.write(table.name, replaced.sort_by("window_start"), mode="overwrite", predicate=_named_windows(windows))


def _named_windows(windows: Iterable) -> str:
    """`window_predicate` in deltalake's SQL, for `windows` ((date, window_start) pairs)."""
    named = sorted({(d, _as_utc(w)) for d, w in windows})
    dates = ", ".join(f"'{d.isoformat()}'" for d in sorted({d for d, _ in named}))
    starts = ", ".join(f"'{w.isoformat()}'" for w in sorted({w for _, w in named}))
    return f'"date" IN ({dates}) AND "window_start" IN ({starts})'


def window_filter(windows: Iterable):
    """A pyarrow filter for the rows of `windows` ((date, window_start) pairs): `deltalake` skips the files
    that cannot hold them by the date partition and window_start's statistics, as Delta does with
    `window_predicate`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    windows = {(d, w) for d, w in windows if d is not None and w is not None}
    dates = pa.array(sorted({d for d, _ in windows}), pa.date32())
    starts = pa.array(sorted({_as_utc(w) for _, w in windows}), pa.timestamp("us", tz="UTC"))
    return pc.field("date").isin(dates) & pc.field("window_start").isin(starts)


def window_filter_of(starts):
    """`window_filter` of the windows starting at `starts` (an Arrow array or column of TIMESTAMPs, nulls
    ignored), each on the date it starts on in UTC, as the tables date them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    starts = pc.unique(pc.drop_null(starts).cast(pa.timestamp("us", tz="UTC")))
    return pc.field("date").isin(pc.unique(starts.cast(pa.date32()))) & pc.field("window_start").isin(starts)


def _as_utc(moment):
    """A naive TIMESTAMP as `collect` gives it (the driver's zone: UTC) as an aware one; an aware one as is."""
    from datetime import UTC

    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _comparable(side: str, column) -> str:
    """An expression of `column` that `<=>` can compare: maps and arrays as canonical JSON."""
    name = f"{side}.`{column.name}`"
    if column.type.startswith("MAP"):
        return f"to_json(array_sort(map_entries({name})))"
    if column.type.startswith("ARRAY") or column.type.startswith("STRUCT"):
        return f"to_json({name})"
    return name


def read_table(spark: SparkSession, lake: Lake | str, name: str):
    return spark.read.format("delta").load(Lake.of(lake).path(name))
