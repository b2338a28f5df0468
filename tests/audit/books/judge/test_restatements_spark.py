"""The Spark form of the restatement rule (`restated_rows`) against its reference (`restatements`): the same
rows in, the same restatements out, ids included, for the contract's table of cases and for random rows with
nulls and microseconds."""

from __future__ import annotations

import datetime as dt

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.books.judge.restatements import restated_rows
from audit.contract.restatements import RESTATEMENT_COLUMNS, restatements
from tests.audit.contract.test_restatements import WRITTEN, pair

PAIR_DDL = (
    "origin_cluster STRING, topic STRING, logical_topic STRING, window_start TIMESTAMP, window_minutes INT, "
    "tier STRING, reference_tier STRING, before_final BOOLEAN, before_updated_at TIMESTAMP, after_final BOOLEAN, "
    "before_expected BIGINT, before_observed BIGINT, before_status STRING, "
    "after_expected BIGINT, after_observed BIGINT, after_status STRING"
)
COLUMNS = [field.split()[0] for field in PAIR_DDL.split(", ")]

CASES = [
    pair((100, 100, "complete"), (100, 100, "complete")),  # a rerun: nothing changed
    pair((100, 97, "incomplete"), (100, 100, "complete")),  # late counts fill a loss
    pair((100, 100, "complete"), (103, 100, "incomplete"), tier="aggregate"),  # the producer's recount
    pair((100, 90, "lagging"), (100, 100, "complete"), final=False),  # never final: not restated
    pair((100, None, "complete"), (100, None, "complete"), topic="t2"),  # nulls compare equal
    pair((None, 5, "complete"), (7, 5, "incomplete"), topic="t3"),  # a count that appears
    pair((4, 4, None), (4, 4, "complete"), topic="t4", before_final=None),  # final unknown: not restated
    pair((4, 4, "over"), (4, 4, "complete"), topic="t5", written=WRITTEN + pd.Timedelta(microseconds=1234)),
]


def both_ways(spark, rows: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """(Spark's restatements, the reference's), each as sorted tuples of `RESTATEMENT_COLUMNS`."""
    frame = spark.createDataFrame([tuple(_spark_value(row[c]) for c in COLUMNS) for row in rows], PAIR_DDL)
    theirs = [
        tuple(_comparable(getattr(row, c)) for c in RESTATEMENT_COLUMNS) for row in restated_rows(frame).collect()
    ]
    reference = restatements(pd.DataFrame(rows))
    ours = [tuple(_comparable(v) for v in row) for row in reference.itertuples(index=False)]
    return sorted(theirs, key=str), sorted(ours, key=str)


def _spark_value(value):
    return value.to_pydatetime() if isinstance(value, pd.Timestamp) else value


def _comparable(value):
    """Spark's naive UTC datetimes and pandas' aware timestamps, pandas' floats of a count column with a null
    and Spark's ints, missing values of either kind: one form."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, dt.datetime):
        stamp = pd.Timestamp(value)
        return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def test_the_spark_form_finds_the_same_restatements_with_the_same_ids_on_every_case(spark):
    theirs, ours = both_ways(spark, CASES)
    assert theirs == ours
    assert len(ours) == 4, "the cases restate 4 windows: late counts, a recount, a new count, a status change"


counts = st.one_of(st.none(), st.integers(0, 3))
statuses = st.one_of(st.none(), st.sampled_from(["complete", "incomplete", "over", "lagging"]))
rows = st.builds(
    lambda before, after, final, micros, topic: pair(
        before, after, written=WRITTEN + pd.Timedelta(microseconds=micros), topic=topic, before_final=final
    ),
    st.tuples(counts, counts, statuses),
    st.tuples(counts, counts, statuses),
    st.one_of(st.none(), st.booleans()),
    st.sampled_from([0, 1, 999_999, 500_000]),
    st.sampled_from(["orders", "clicks", "ünïcode|topic"]),
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(rows, min_size=1, max_size=30))
def test_the_spark_form_agrees_with_the_rule_on_random_rows(spark, random_rows):
    theirs, ours = both_ways(spark, random_rows)
    assert theirs == ours
