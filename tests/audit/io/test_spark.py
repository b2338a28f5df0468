"""The session helpers of audit/io/spark.py: the driver a session starts, and the helpers that shape query plans."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

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


@pytest.mark.parametrize(("limit", "broadcast"), [(3, True), (2, False)])
def test_a_caller_s_own_limit_decides_over_the_row_limit(spark, limit, broadcast):
    small = spark.createDataFrame([(1,), (2,), (3,)], "k INT").localCheckpoint()
    plan = (
        spark.range(100)
        .withColumnRenamed("id", "k")
        .join(spark_io.broadcast_when_small(small, 3, limit=limit), "k", "left_semi")
        ._jdf.queryExecution()
        .executedPlan()
        .toString()
    )
    assert ("BroadcastHashJoin" in plan) == broadcast, plan


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


ZONE_PROBE = """
from audit.contract.tables import TIER_COUNTS
from audit.io import delta_io
from audit.io.spark import spark_session
from tests.audit.io.test_delta_io import START, _count_row
from tests.conftest import cache_dir

session = spark_session(app_name="zone-probe", cache_dir=cache_dir())
jvm = session._jvm
delta_snapshot = getattr(jvm.org.apache.spark.sql.delta, "Snapshot$").__getattr__("MODULE$")
print(jvm.java.util.TimeZone.getDefault().getID(), delta_snapshot.allFilesInCrcVerificationForceEnabled(session._jsparkSession))

# A window goes from Spark to Python (windows_of) and back as a SQL literal (window_predicate, which names the
# windows `replace_windows` overwrites), as in every run.
frame = session.createDataFrame([_count_row("orders", START, "dc1", 1, START)], delta_io.spark_schema(TIER_COUNTS))
named = frame.where(delta_io.window_predicate(delta_io.windows_of(frame))).count()
shown = session.sql(f"SELECT TIMESTAMP'{START}' AS t").first().t
print(shown == START, named == 1)
session.stop()
"""


@pytest.mark.spark
def test_on_a_host_in_another_zone_the_driver_runs_in_utc_so_windows_keep_their_time_and_delta_its_speed():
    """On a host in Europe/Paris:
    - a window read from Spark and named again in SQL is the same window (else Python's naive datetimes are local
      time, SQL's literals UTC, and an increment's overwrite fails);
    - Delta does not rebuild a table's state after every commit, which it does when the JVM's zone is not UTC
      (15 small appends: 14.7-18.1 s in Europe/Paris against 8.4-10.6 s in UTC)."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", ZONE_PROBE],
        env={**os.environ, "TZ": "Europe/Paris", "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-4:] == ["UTC", "False", "True", "True"], done.stdout
