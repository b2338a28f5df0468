"""The valid records a run read, as the steps after their dedup take them: a pyarrow Table the driver holds
when the run is small (up to `DRIVER_MESSAGES` audit messages), else a Spark DataFrame. The type is the sign:
each step does a small run's work in the driver (pyarrow, pandas and `deltalake`), as a dozen Spark queries on a
few thousand rows cost more in planning than in data."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Audit messages read up to which a run stays in the driver from its checked rows on: it deduplicates and appends
# its records (store/records.py, `new_in_driver`) and re-sums `tier_counts` (count/tier_counts.py). A larger run
# (a first run over a million records) does both in Spark.
DRIVER_MESSAGES = 50_000


def held_by_driver(records) -> bool:
    """True for a small run's records (a pyarrow Table), False for a Spark DataFrame."""
    return isinstance(records, pa.Table)


def of_kind(records, kind: str):
    """The records of `kind` ("count" or "status"), in the form they came in."""
    if held_by_driver(records):
        return records.filter(pc.equal(records["kind"], kind))
    from pyspark.sql import functions as F

    return records.where(F.col("kind") == kind)
