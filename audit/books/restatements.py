"""The `restatements` table: every change to a window's verdict after it was final, appended by the run
that made it (the rule is audit/contract/restatements.py's).

Found before the run's completeness MERGE, from the verdicts it is about to replace, and stored before
that MERGE too: a run killed in between finds the same restatements again and, by their ids, stores
them once. The table is only appended to and Spark does not read it during a run, so the driver writes
it with `deltalake` (delta_io.insert_new_from_driver). Each one carries the ids of the count records the
run read for its window at its tier and at the reference tier: the late counts, the replayed copies or
the recount that changed it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.contract.restatements import RESTATEMENT_DDL, restatements_of_batches
from audit.contract.tables import RESTATEMENTS
from audit.io import delta_io

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.settings import Settings

from audit.books.tier_tables import WINDOW_KEY

KEY = (*WINDOW_KEY, "tier")


def store_restatements(spark: SparkSession, settings: Settings, current, judged, records=None, windows=None) -> int:
    """Append the restatements of `judged` (new verdicts) against `current` (the completeness table before
    they are merged); `records`: the valid audit records the run read; `windows`: the (date, window_start)
    pairs of `judged`, when known (only they are read of `current`). Returns how many were found."""
    from pyspark.sql import functions as F

    current = delta_io.in_windows(current, windows or ())
    before = current.where(F.col("final")).select(
        *KEY,
        F.lit(True).alias("before_final"),
        *(F.col(name).alias(f"before_{name}") for name in ("expected", "observed", "status", "updated_at")),
    )
    after = judged.select(
        *KEY,
        "logical_topic",
        "window_minutes",
        "reference_tier",
        *(F.col(name).alias(f"after_{name}") for name in ("expected", "observed", "status", "final")),
    )
    found = after.join(before, list(KEY)).mapInPandas(restatements_of_batches, RESTATEMENT_DDL)
    rows = (
        _with_record_ids(found, records)
        .withColumn("restated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
        .select(*RESTATEMENTS.column_names)
        .toArrow()  # in the driver (one row per restated window and tier), as delta_io writes it
    )
    delta_io.insert_new_from_driver(settings.lake_root, RESTATEMENTS, rows)
    return rows.num_rows


def _with_record_ids(found, records):
    """`found` with `record_ids`: the count records read for its window at its tier or its reference tier."""
    from pyspark.sql import functions as F

    if records is None:
        return found.withColumn("record_ids", F.array().cast("ARRAY<STRING>"))
    ids = (
        records.where(F.col("kind") == "count").groupBy(*KEY).agg(F.array_sort(F.collect_set("record_id")).alias("ids"))
    )
    own = ids.withColumnRenamed("ids", "own_ids")
    reference = ids.withColumnRenamed("tier", "reference_tier").withColumnRenamed("ids", "reference_ids")
    empty = F.array().cast("ARRAY<STRING>")
    return (
        found.join(own, list(KEY), "left")
        .join(reference, [*WINDOW_KEY, "reference_tier"], "left")
        .withColumn(
            "record_ids",
            F.array_sort(F.array_union(F.coalesce("own_ids", empty), F.coalesce("reference_ids", empty))),
        )
    )
