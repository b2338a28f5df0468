"""`once_per_record_id`: one row per record_id, the copy with the lowest row number, whether or not any came twice;
in Spark and, for a small run, in the driver (`new_in_driver`)."""

from __future__ import annotations

import pytest

from audit.books.check.checked_rows import ROW
from audit.books.store.records import new_in_driver, once_per_record_id
from audit.contract.tables import AUDIT_RECORDS


def _valid(spark, rows: list[tuple[str, int, str]]):
    """Records with only record_id, ROW and read_from_cluster set (the copies differ in where they were read)."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(rows, f"record_id STRING, {ROW} BIGINT, read_from_cluster STRING")
    others = [
        F.lit(None).cast(column.type).alias(column.name)
        for column in AUDIT_RECORDS.columns
        if column.name not in ("record_id", "read_from_cluster")
    ]
    return frame.select("*", *others)


def _kept(spark, rows, form: str) -> list[tuple[str, str]]:
    from pyspark.sql import functions as F

    valid = _valid(spark, rows)
    if form == "driver":
        checked = valid.withColumn("reason", F.lit(None).cast("STRING")).toArrow()
        kept, new = new_in_driver(None, checked, every_record=True)  # type: ignore[arg-type]
        assert kept.column_names == list(AUDIT_RECORDS.column_names) and new == kept
        return sorted(zip(kept["record_id"].to_pylist(), kept["read_from_cluster"].to_pylist(), strict=True))
    kept, count = once_per_record_id(valid)
    assert kept.columns == list(AUDIT_RECORDS.column_names)
    found = kept.collect()
    assert count == len(found)  # the count it gives is of the rows it keeps
    return sorted((row.record_id, row.read_from_cluster) for row in found)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param(
            [("a", 0, "dc1"), ("b", 1, "dc1"), ("c", -1, "dc1")],
            [("a", "dc1"), ("b", "dc1"), ("c", "dc1")],
            id="no record_id twice: every row kept",
        ),
        pytest.param(
            [("a", 5, "aggregate"), ("a", 2, "dc1"), ("b", 3, "dc1"), ("b", -4, "aggregate"), ("c", 7, "dc1")],
            [("a", "dc1"), ("b", "aggregate"), ("c", "dc1")],
            id="copies: the lowest row number kept, a Python-checked one included",
        ),
    ],
)
@pytest.mark.parametrize("form", ["spark", "driver"])
def test_one_row_per_record_id(spark, rows, expected, form):
    assert _kept(spark, rows, form) == expected
