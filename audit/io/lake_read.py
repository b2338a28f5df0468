"""Read the audit Delta tables without a JVM (the `deltalake` package): for the alerts, the UI, and the
books' small tables that only the driver reads (offsets, cluster states, partition and tier status,
complete-through watermarks).

A table that does not exist yet reads as empty with its declared columns, so a fresh install shows
"no data" rather than a traceback. Partitioned tables are pruned by their `date` partition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date

import pandas as pd

from audit.contract.arrow import arrow_schema
from audit.contract.tables import EVERY_TABLE
from audit.io.lake import Lake

log = logging.getLogger(__name__)


def table_version(lake: Lake | str, name: str) -> int | None:
    """The table's current Delta version, or None when it does not exist (cheap: reads the log only)."""
    return Lake.of(lake).version(name)


def read_arrow(
    lake: Lake | str, name: str, *, columns: Sequence[str] | None = None, since: date | None = None, filters=None
):
    """Table `name` as a pyarrow Table; `since` keeps partitions with date >= since (partitioned tables)."""
    from deltalake.exceptions import TableNotFoundError

    table = EVERY_TABLE[name]
    try:
        delta = Lake.of(lake).delta_table(name)
    except TableNotFoundError:
        schema = arrow_schema(table)
        if columns:
            schema = __import__("pyarrow").schema([schema.field(c) for c in columns])
        return schema.empty_table()
    if since is not None and "date" in table.partition_by:
        pruned = [("date", ">=", since)]
        filters = pruned if filters is None else [*pruned, *filters]
    return delta.to_pyarrow_table(columns=list(columns) if columns else None, filters=filters)


def read_frame(lake: Lake | str, name: str, **kwargs) -> pd.DataFrame:
    """Table `name` as a pandas DataFrame (timestamps tz-aware UTC); see `read_arrow`."""
    return read_arrow(lake, name, **kwargs).to_pandas()
