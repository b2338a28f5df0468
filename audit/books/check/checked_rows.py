"""The checked rows of a run's messages, typed as the tables want them (times as TIMESTAMP, nested fields
parsed), each numbered in `ROW`: from Spark (`check_messages`: the native check of audit/books/check/spark_columns.py,
the Python checker for the rest) or, for a small run, from the Python checker in the driver (`check_in_driver`).
tests/audit/books/check/test_record_columns.py holds the two to the same rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from audit.books.check.python_checker import (
    CHECKED_COLUMNS,
    CHECKED_DDL,
    SOURCE_COLUMNS,
    TYPED_CHECKED,
    TYPED_NESTED,
    RecordChecker,
)
from audit.books.check.spark_columns import FAST, checked_natively
from audit.contract.arrow import ddl_schema
from audit.contract.windows import EPOCH

if TYPE_CHECKING:
    import pandas as pd

PARTITION_MAPS = ("by_partition_json", "digest_by_partition_json")  # TYPED_NESTED's maps keyed by partition

# Numbers every message a run checked, in the checkpoint that holds it (so the same row has the same number in
# every query): the copies of one record_id are told apart by this one BIGINT (once_per_record_id).
ROW = "_row"


def check_messages(messages, checker: RecordChecker, *, native: bool = True):
    """The checker's rows, typed as the tables want them (times as TIMESTAMP, nested fields parsed), each with
    its number in `ROW`.

    `native`: records written the canonical way are checked by Spark's own JSON reader and column
    expressions (audit/books/check/spark_columns.py), the rest in Python; False checks all in Python.
    Each part is computed once (checkpointed): the messages are read from Kafka once and the Python
    check runs once, however many steps use the rows."""
    from pyspark.sql import functions as F

    number = F.monotonically_increasing_id()
    if native:
        natively = checked_natively(messages, checker).withColumn(ROW, number).localCheckpoint()
        checked = natively.where(F.col(FAST)).select(*(name for name, _ in TYPED_CHECKED), ROW)
        rest = natively.where(~F.col(FAST)).select(*SOURCE_COLUMNS)
        if not rest.isEmpty():  # else no Python worker is started (seconds in a new session)
            by_python = _typed_nested(rest.mapInPandas(checker.check_batches, CHECKED_DDL))
            checked = checked.unionByName(by_python.withColumn(ROW, -1 - number).localCheckpoint())  # apart
    else:
        checked = _typed_nested(messages.mapInPandas(checker.check_batches, CHECKED_DDL))
        checked = checked.withColumn(ROW, number).localCheckpoint()
    at = F.timestamp_millis
    return (
        checked.withColumn("window_start", at("window_start_ms"))
        .withColumn("emitted_at", at("emitted_at_ms"))
        .withColumn("watermark", at("watermark_ms"))
        .withColumn("ingested_at", F.lit(datetime.now(UTC)))  # one moment for every query that reads the rows
        .withColumn("date", F.to_date(F.coalesce("window_start", "emitted_at", "ingested_at")))
    )


# The rows `check_messages` yields, and `check_in_driver` as a pyarrow Table of this schema.
CHECKED_ROWS_DDL = ", ".join(
    [
        *(f"{name} {kind}" for name, kind in TYPED_CHECKED),
        f"{ROW} BIGINT",
        *(f"{name} TIMESTAMP" for name in ("window_start", "emitted_at", "watermark", "ingested_at")),
        "date DATE",
    ]
)


def check_in_driver(messages: pd.DataFrame, checker: RecordChecker) -> pa.Table:
    """`check_messages` of a small run's messages (SOURCE_COLUMNS, as `read_new_messages_in_driver` gives them),
    all checked by the Python checker in this process: the same rows, as a pyarrow Table (`CHECKED_ROWS_DDL`)."""
    schema = ddl_schema(CHECKED_ROWS_DDL)
    checked = checker.check(messages, nested_as_text=False)
    nested = {name: checked.pop(name) for name in TYPED_NESTED}
    flat = pa.schema([field for field in ddl_schema(CHECKED_DDL) if field.name not in TYPED_NESTED])
    text = pa.Table.from_pandas(checked, schema=flat, preserve_index=False)
    columns = {name: text[name] for name in text.column_names}
    for name, (typed, _) in TYPED_NESTED.items():
        values = [None if value is None else _nested(name, value) for value in nested[name]]
        columns[typed] = pa.array(values, schema.field(typed).type)
    columns[ROW] = pa.array(range(text.num_rows), pa.int64())
    for name in ("window_start", "emitted_at", "watermark"):
        columns[name] = pc.cast(text[f"{name}_ms"], pa.timestamp("ms", tz="UTC"))
    columns["ingested_at"] = pa.repeat(pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC")), text.num_rows)
    dated = pc.coalesce(columns["window_start"], columns["emitted_at"], columns["ingested_at"])
    columns["date"] = pc.cast(pc.cast(dated, pa.timestamp("us", tz="UTC")), pa.date32())
    return pa.table({name: columns[name] for name in schema.names}).cast(schema)


def _nested(name: str, parsed):
    """A nested field as the Python checker holds it before writing its JSON text, in `TYPED_NESTED`'s type (as
    `_typed_nested` gives it in Spark): partition maps as pairs, partition times as moments."""
    if name in PARTITION_MAPS:
        return list(parsed.items())
    return [
        {
            **{key: status[key] for key in ("partition", "position", "end_offset", "lag")},
            "last_audit_time": None
            if status["last_audit_time_ms"] is None
            else EPOCH + timedelta(milliseconds=status["last_audit_time_ms"]),
        }
        for status in parsed
    ]


def _typed_nested(checked):
    """The Python checker's rows (CHECKED_DDL) with their nested fields' JSON text parsed, as TYPED_CHECKED."""
    from pyspark.sql import functions as F

    partitions_type = (
        "ARRAY<STRUCT<partition: INT, position: BIGINT, end_offset: BIGINT, lag: BIGINT, last_audit_time_ms: BIGINT>>"
    )
    partitions = F.transform(
        F.from_json("partitions_json", partitions_type),
        lambda p: F.struct(
            *(p[name].alias(name) for name in ("partition", "position", "end_offset", "lag")),
            F.timestamp_millis(p["last_audit_time_ms"]).alias("last_audit_time"),
        ),
    )
    parsed = {
        "partitions_json": partitions,
        **{
            text: F.transform_keys(F.from_json(text, "MAP<STRING,BIGINT>"), lambda k, _v: k.cast("int"))
            for text in PARTITION_MAPS
        },
    }
    return checked.select(
        *(
            parsed[text].alias(TYPED_NESTED[text][0]) if text in TYPED_NESTED else F.col(text)
            for text in CHECKED_COLUMNS
        )
    )
