"""pyarrow schemas of the declared tables (audit/contract/tables.py), for readers and writers without a
JVM: deltalake, the UI, the alerts and test fixtures."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.contract.tables import Table

_ARROW_SCALARS = {
    "STRING": "string",
    "BIGINT": "int64",
    "INT": "int32",
    "DOUBLE": "float64",
    "BOOLEAN": "bool_",
    "DATE": "date32",
    "BINARY": "binary",
}


def arrow_type(spark_type: str):
    """The pyarrow type of a Spark SQL type name as written in this module (TIMESTAMP: UTC, microseconds)."""
    import pyarrow as pa

    text = spark_type.strip()
    upper = text.upper()
    if upper in _ARROW_SCALARS:
        return getattr(pa, _ARROW_SCALARS[upper])()
    if upper == "TIMESTAMP":
        return pa.timestamp("us", tz="UTC")
    inner = _inside(text)
    if upper.startswith("ARRAY<"):
        return pa.list_(arrow_type(inner))
    if upper.startswith("MAP<"):
        key, value = _split_top(inner)
        return pa.map_(arrow_type(key), arrow_type(value))
    if upper.startswith("STRUCT<"):
        members = []
        for part in _split_top(inner):
            name, _, member_type = part.partition(":")
            if not member_type:
                raise ValueError(f"struct member {part!r} of {spark_type!r} has no ': TYPE'")
            members.append(pa.field(name.strip().strip("`"), arrow_type(member_type)))
        return pa.struct(members)
    raise ValueError(f"unknown Spark type {spark_type!r}")


def _inside(text: str) -> str:
    start, end = text.find("<"), text.rfind(">")
    if start < 0 or end < start:
        raise ValueError(f"unknown Spark type {text!r}")
    return text[start + 1 : end]


def _split_top(text: str) -> list[str]:
    """`a, b<c, d>, e` split at the commas outside angle brackets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char == "<") - (char == ">")
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return parts


def ddl_schema(ddl: str):
    """The pyarrow schema of a Spark DDL string (`name TYPE, name TYPE, ...`)."""
    import pyarrow as pa

    fields = []
    for part in _split_top(ddl):
        name, _, kind = part.strip().partition(" ")
        if not kind.strip():
            raise ValueError(f"column {part!r} of {ddl!r} has no type")
        fields.append(pa.field(name.strip("`"), arrow_type(kind)))
    return pa.schema(fields)


def arrow_schema(table: Table):
    """The pyarrow schema of `table`, columns in declaration order, every column nullable as in Spark."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=True) for c in table.columns])


def arrow_table(table: Table, rows):
    """`rows` (a pandas DataFrame, a list of dicts or a pyarrow Table, as Spark's `toArrow` gives) as a pyarrow
    Table of `table`'s exact schema.

    Absent columns are null; a column the table does not have is a KeyError naming it.
    """
    import pandas as pd
    import pyarrow as pa

    schema = arrow_schema(table)
    given = rows if isinstance(rows, pa.Table | pd.DataFrame) else pd.DataFrame(list(rows))
    names = given.column_names if isinstance(given, pa.Table) else given.columns
    unknown = set(names) - set(schema.names)
    if unknown:
        raise KeyError(f"{table.name} has no column(s) {', '.join(sorted(unknown))}")
    arrays = []
    for column in schema:
        if column.name not in names or not len(given):
            arrays.append(pa.nulls(len(given), type=column.type))
        elif isinstance(given, pa.Table):  # Spark's `toArrow()`: pyarrow casts, and refuses a lossy cast
            arrays.append(given[column.name].cast(column.type))
        else:
            arrays.append(_from_pandas(given[column.name], column.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _from_pandas(values, kind):
    import pandas as pd
    import pyarrow as pa

    if pa.types.is_timestamp(kind):
        values = pd.to_datetime(values, utc=True)
    elif pa.types.is_integer(kind) and values.dtype == object:
        values = values.astype("Int64")
    return pa.array(values, type=kind, from_pandas=True)
