"""The table catalogue's pyarrow schemas: every Spark type of audit/contract/tables.py maps, and round-trips Delta."""

from __future__ import annotations

import pyarrow as pa
import pytest

from audit.contract.arrow import arrow_schema, arrow_table, arrow_type
from audit.contract.tables import (
    ALERTS,
    COMPLETENESS,
    EVERY_TABLE,
    PARTITION_STATUS_TYPE,
    TABLES,
)

UTC_US = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize(
    "spark, arrow",
    [
        ("STRING", pa.string()),
        ("BIGINT", pa.int64()),
        ("INT", pa.int32()),
        ("DOUBLE", pa.float64()),
        ("BOOLEAN", pa.bool_()),
        ("TIMESTAMP", UTC_US),
        ("DATE", pa.date32()),
        ("BINARY", pa.binary()),
        ("MAP<INT,BIGINT>", pa.map_(pa.int32(), pa.int64())),
        (
            "ARRAY<STRUCT<key: STRING, value: BINARY>>",
            pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
        ),
        (
            PARTITION_STATUS_TYPE,
            pa.list_(
                pa.struct(
                    [
                        pa.field("partition", pa.int32()),
                        pa.field("position", pa.int64()),
                        pa.field("end_offset", pa.int64()),
                        pa.field("lag", pa.int64()),
                        pa.field("last_audit_time", UTC_US),
                    ]
                )
            ),
        ),
    ],
)
def test_spark_types_map_to_arrow(spark, arrow):
    assert arrow_type(spark) == arrow


@pytest.mark.parametrize("bad", ["VARCHAR", "ARRAY<", "STRUCT<a INT>", "MAP<INT>"])
def test_unknown_types_are_errors_naming_them(bad):
    with pytest.raises((ValueError, IndexError)):
        arrow_type(bad)


def test_a_ddl_string_gives_its_columns_in_order():
    import pyarrow as pa

    from audit.contract.arrow import ddl_schema

    schema = ddl_schema("topic STRING, `window_start` TIMESTAMP, by_partition MAP<INT, BIGINT>")
    assert schema == pa.schema(
        [
            ("topic", pa.string()),
            ("window_start", pa.timestamp("us", tz="UTC")),
            ("by_partition", pa.map_(pa.int32(), pa.int64())),
        ]
    )
    with pytest.raises(ValueError, match="'topic' of 'topic' has no type"):
        ddl_schema("topic")


def test_every_table_has_a_schema_in_declaration_order():
    for table in TABLES.values():
        schema = arrow_schema(table)
        assert schema.names == list(table.column_names)
        assert all(f.nullable for f in schema)
    assert "alerts" in TABLES and ALERTS.key == ("alert_id",)


def test_the_columns_delta_keeps_statistics_for_are_columns_of_their_table_and_not_its_partitions():
    for table in EVERY_TABLE.values():
        assert set(table.stats_columns) <= set(table.column_names) - set(table.partition_by), table.name
        types = {c.name: c.type for c in table.columns}
        skippable = ("STRING", "BIGINT", "INT", "DOUBLE", "TIMESTAMP", "DATE")  # Delta refuses BOOLEAN and nested
        assert all(types[name] in skippable for name in table.stats_columns), table.name
    assert "window_start" in COMPLETENESS.stats_columns, "every read of a few windows skips files by it"


def test_rows_become_that_schema_and_round_trip_through_delta(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    data = arrow_table(ALERTS, [{"alert_id": "a", "kind": "loss", "attempts": 2, "window_start": "2025-03-04T10:40Z"}])
    write_deltalake(str(tmp_path / "alerts"), data)
    back = DeltaTable(str(tmp_path / "alerts")).to_pyarrow_table()
    assert back.schema == arrow_schema(ALERTS)
    assert back.column("attempts").to_pylist() == [2] and back.column("state").to_pylist() == [None]
    with pytest.raises(KeyError, match="nope"):
        arrow_table(ALERTS, [{"nope": 1}])


def test_docs_tables_md_is_generated_from_the_catalogue():
    from pathlib import Path

    from audit.contract.tables_doc import markdown

    assert (Path(__file__).parents[3] / "docs" / "tables.md").read_text() == markdown(), (
        "docs/tables.md is stale: run `python -m audit.contract.tables_doc > docs/tables.md`"
    )
