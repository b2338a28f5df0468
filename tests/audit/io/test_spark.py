"""The session helpers of audit/io/spark.py that shape query plans."""

from __future__ import annotations

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
