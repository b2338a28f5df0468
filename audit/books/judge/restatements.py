"""The `restatements` table: every change to a window's verdict after it was final, appended by the run
that made it (the rule is audit/contract/restatements.py's).

Found before the run's completeness MERGE, from the verdicts it is about to replace, and stored before
that MERGE too: a run killed in between finds the same restatements again and, by their ids, stores
them once. They are found with Spark columns (`restated_rows`), so a run starts no Python worker (their
start costs about 2 s in each new session, and again after a minute idle). The table is only appended to
and Spark does not read it during a run, so the driver writes it with `deltalake`
(delta_io.insert_new_from_driver). Each one carries the ids of the count records the
run read for its window at its tier and at the reference tier: the late counts, the replayed copies or
the recount that changed it.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import TYPE_CHECKING

from audit.books.count.tier_counts import WINDOW_KEY
from audit.contract.restatements import RESTATEMENT_COLUMNS, VERDICT
from audit.contract.tables import RESTATEMENTS
from audit.io import delta_io

if TYPE_CHECKING:
    from audit.io.lake import Lake

KEY = (*WINDOW_KEY, "tier")


def store_restatements(lake: Lake, current, judged, records=None) -> int:
    """Append the restatements of `judged` (new verdicts) against `current` (the completeness rows of their
    windows before they are merged); `records`: the valid audit records the run read. Returns how many
    were found."""
    from pyspark.sql import functions as F

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
    found = restated_rows(after.join(before, list(KEY)))
    rows = (
        _with_record_ids(found, records)
        .withColumn("restated_at", F.current_timestamp())
        .withColumn("date", F.to_date("window_start"))
        .select(*RESTATEMENTS.column_names)
        .toArrow()  # in the driver (one row per restated window and tier), as delta_io writes it
    )
    delta_io.insert_new_from_driver(lake, RESTATEMENTS, rows)
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


def restated_rows(pairs):
    """`restatements` (audit/contract/restatements.py, the rule's reference) as Spark columns: the rows of
    `pairs` (a window's verdict before as `before_*`, after as `after_*`) that restate a final window, with
    the same `restatement_id`, in `RESTATEMENT_COLUMNS`. tests/audit/books/judge/test_restatements_spark.py holds
    the two to the same answers."""
    from pyspark.sql import functions as F

    changed = [~F.col(f"before_{name}").eqNullSafe(F.col(f"after_{name}")) for name in VERDICT]
    restated = F.coalesce(F.col("before_final"), F.lit(False)) & reduce(operator.or_, changed)
    verdicts = [
        F.coalesce(F.col(f"{side}_{name}").cast("string"), F.lit("None"))
        for side in ("before", "after")
        for name in VERDICT
    ]
    text = F.concat_ws(
        "|", "origin_cluster", "topic", _utc_text("window_start"), "tier", _utc_text("before_updated_at"), *verdicts
    )
    return (
        pairs.where(restated)
        .withColumn("restatement_id", F.substring(F.sha2(text, 256), 1, 32))
        .select(*RESTATEMENT_COLUMNS)
    )


def _utc_text(column: str):
    """A timestamp as the contract's id writes it (pandas' `isoformat` in UTC): `2026-11-23T10:20:00+00:00`,
    with `.ffffff` before the offset when it has microseconds."""
    from pyspark.sql import functions as F

    utc = F.to_utc_timestamp(F.col(column), F.current_timezone())  # the wall clock in UTC, whatever the session's
    micros = F.unix_micros(F.col(column)) % 1_000_000
    fraction = F.when(micros != 0, F.concat(F.lit("."), F.lpad(micros.cast("string"), 6, "0"))).otherwise(F.lit(""))
    return F.concat(F.date_format(utc, "yyyy-MM-dd'T'HH:mm:ss"), fraction, F.lit("+00:00"))
