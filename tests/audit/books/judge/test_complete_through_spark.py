"""The Spark form of the complete-through rule (`watermarks`) against its reference (`watermark_of`):
the same windows in, the same watermark out, for a table of cases and for random verdict sequences."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.books.judge.complete_through import watermarks
from audit.contract.complete_through import KEY_COLUMNS, WINDOW_COLUMNS, Watermark, watermark_of
from tests.audit.contract.test_complete_through import STATUSES, windows

CASES = {
    "all closed": [(0, "complete", True), (1, "complete", True)],
    "a loss stops it": [(0, "complete", True), (1, "incomplete", True), (2, "complete", True)],
    "complete but not final": [(0, "complete", True), (1, "complete", False)],
    "duplicates are not complete": [(0, "over", True), (1, "complete", True)],
    "gap then lag": [(0, "complete", True), (3, "lagging", False)],
    "any order, quiet windows skipped": [(5, "pending", False), (2, "complete", True), (0, "complete", True)],
    "final unknown is not closed": [(0, "complete", True), (1, "complete", None)],
    "only one open window": [(0, "pending", False)],
}


def spark_marks(spark, verdicts_by_topic: dict[str, list]) -> dict[str, Watermark]:
    """`watermarks` over every topic's windows at once (one Spark job), by topic."""
    frames = [
        windows(*verdicts).assign(origin_cluster="dc1", topic=topic, logical_topic=f"dc1.{topic}", tier="lake")
        for topic, verdicts in verdicts_by_topic.items()
    ]
    frame = pd.concat(frames, ignore_index=True)[[*KEY_COLUMNS, *WINDOW_COLUMNS]].astype({"final": "object"})
    schema = "origin_cluster STRING, topic STRING, logical_topic STRING, tier STRING, window_start TIMESTAMP, "
    schema += "window_end TIMESTAMP, status STRING, final BOOLEAN"
    rows = watermarks(spark.createDataFrame(frame, schema)).collect()
    assert all(row.logical_topic == f"dc1.{row.topic}" and row.tier == "lake" for row in rows)
    return {
        row.topic: Watermark(_utc(row.complete_through), _utc(row.first_open_window), row.first_open_status)
        for row in rows
    }


def _utc(moment) -> pd.Timestamp | None:
    return None if moment is None else pd.Timestamp(moment).tz_localize("UTC")


def test_the_spark_form_agrees_with_the_rule_on_every_case(spark):
    marks = spark_marks(spark, CASES)
    for name, verdicts in CASES.items():
        assert marks[name] == watermark_of(windows(*verdicts)), name


verdict_lists = st.lists(
    st.tuples(st.sampled_from(STATUSES), st.sampled_from([True, False, None]), st.booleans()), min_size=1, max_size=12
).map(lambda rows: [(i, status, final) for i, (status, final, keep) in enumerate(rows) if keep or i == 0])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(verdict_lists, min_size=1, max_size=40))
def test_the_spark_form_agrees_with_the_rule_on_random_verdicts(spark, topics):
    by_topic = {f"t{index}": verdicts for index, verdicts in enumerate(topics)}
    marks = spark_marks(spark, by_topic)
    for topic, verdicts in by_topic.items():
        assert marks[topic] == watermark_of(windows(*verdicts)), verdicts
