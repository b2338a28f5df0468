"""`summed_maps`, the Spark sum of a window's partition counts (one map per record), against a sum in Python."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from audit.books.tier_tables import summed_maps

PARTITION_COUNTS = st.dictionaries(st.integers(0, 5), st.integers(0, 10**12), max_size=4)


def python_sum(maps: list[dict]) -> dict:
    total: dict = {}
    for counts in maps:
        for partition, n in counts.items():
            total[partition] = total.get(partition, 0) + n
    return total


def spark_sums(spark, windows: list[list[dict]]) -> list[dict]:
    frame = spark.createDataFrame(list(enumerate(windows)), "window INT, maps ARRAY<MAP<INT, BIGINT>>")
    rows = frame.select("window", summed_maps(F.col("maps")).alias("total")).orderBy("window").collect()
    return [row.total for row in rows]


def test_one_map_is_kept_and_maps_of_different_partitions_are_summed_key_by_key(spark):
    windows = [[{0: 5, 1: 7}], [{0: 30, 1: 30}, {0: 20, 1: 20}], [{0: 1}, {2: 4}, {0: 2, 2: 0}]]
    assert spark_sums(spark, windows) == [{0: 5, 1: 7}, {0: 50, 1: 50}, {0: 3, 2: 4}]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(PARTITION_COUNTS, min_size=1, max_size=4), min_size=1, max_size=5))
def test_the_sum_of_any_maps_is_the_sum_per_partition(spark, windows):
    assert spark_sums(spark, windows) == [python_sum(maps) for maps in windows]
