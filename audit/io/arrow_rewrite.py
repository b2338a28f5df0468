"""The rewrite of a table's windows computed in the driver, in Arrow: the rows a run wrote in place of the
stored rows with the same key, the stored rows of other keys kept as they are, and nothing when no row
changed. `delta_io.replace_windows_from_driver` writes it with `deltalake`; `delta_io.replace_windows`
computes the same rewrite in Spark."""

from __future__ import annotations

from audit.contract.arrow import arrow_table
from audit.contract.tables import Column, Table


def updatable_columns(table: Table, ignore: tuple[str, ...]) -> list[Column]:
    """The columns an update compares: those neither in the key nor in `ignore`."""
    return [c for c in table.columns if c.name not in table.key and c.name not in ignore]


def rewritten(table: Table, rows, stored, *, ignore: tuple[str, ...] = ("updated_at",)):
    """`replace_windows`' rewrite in the driver (pyarrow Tables): `rows` in place of the `stored` rows with the
    same key, a row that changed no column but `ignore` keeping its stored `ignore` columns, and the stored rows
    of other keys as they are. None when no row changed. Compared column by column, as `<=>` compares them (maps
    as sets of entries). In Arrow, with the stored rows of other keys never converted: a window's rewrite holds
    every topic's rows, too many to convert to pandas in every run."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    key, names = list(table.key), list(table.column_names)
    new, old = arrow_table(table, rows.select(names)), arrow_table(table, stored.select(names))
    numbered = new.select(key).append_column("_new", pa.array(np.arange(new.num_rows)))
    pairs = numbered.join(
        old.select(key).append_column("_old", pa.array(np.arange(old.num_rows))), keys=key, join_type="left outer"
    ).sort_by("_new")
    at_old = pairs["_old"].combine_chunks()
    same = at_old.is_valid().to_numpy(zero_copy_only=False)
    for column in updatable_columns(table, ignore):
        same &= _same_values(new[column.name], old[column.name].take(at_old))
    if same.all():
        return None
    same_mask = pa.array(same)
    for name in ignore:
        index = new.schema.get_field_index(name)
        new = new.set_column(index, name, pc.if_else(same_mask, old[name].take(at_old), new[name]))
    replaced = pc.is_in(pa.array(np.arange(old.num_rows)), value_set=at_old.drop_null())
    return pa.concat_tables([new, old.filter(pc.invert(replaced))])


def _same_values(a, b):
    """Element-wise: `a` and `b` (Arrow arrays of one type) hold the same value, nulls equal to nulls."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_map(a.type) or pa.types.is_list(a.type) or pa.types.is_struct(a.type):
        as_set = (lambda v: v if v is None else dict(v)) if pa.types.is_map(a.type) else (lambda v: v)
        return np.array([as_set(x) == as_set(y) for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)], bool)
    equal = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    return equal.to_numpy(zero_copy_only=False)
