"""The session helpers of audit/io/spark.py that shape query plans."""

from __future__ import annotations

import threading
import time

import pytest

from audit.io import spark as spark_io


@pytest.mark.parametrize(("max_rows", "broadcast"), [(3, True), (2, False)])
def test_a_checkpointed_frame_is_broadcast_up_to_the_row_limit(spark, monkeypatch, max_rows, broadcast):
    monkeypatch.setattr(spark_io, "BROADCAST_MAX_ROWS", max_rows)
    small = spark.createDataFrame([(1,), (2,), (3,)], "k INT").localCheckpoint()
    big = spark.range(100).withColumnRenamed("id", "k")
    joined = big.join(spark_io.broadcast_when_small(small), "k", "left_semi")
    plan = joined._jdf.queryExecution().executedPlan().toString()
    assert ("BroadcastHashJoin" in plan) == broadcast, plan
    assert sorted(row.k for row in joined.collect()) == [1, 2, 3]


def test_steps_side_by_side_run_at_the_same_time_and_give_their_results_in_order():
    both_running = threading.Barrier(2, timeout=10)  # broken (an error) unless the two steps overlap

    def step(name: str) -> str:
        both_running.wait()
        return name

    assert spark_io.side_by_side(lambda: step("tier_counts"), lambda: step("tier_status")) == [
        "tier_counts",
        "tier_status",
    ]


def test_a_failing_step_raises_its_error_once_the_other_steps_have_ended():
    ended = []

    def fails() -> None:
        raise ValueError("MERGE failed")

    def slower() -> None:
        time.sleep(0.2)
        ended.append("slower")

    with pytest.raises(ValueError, match="MERGE failed"):
        spark_io.side_by_side(fails, slower)
    assert ended == ["slower"]
