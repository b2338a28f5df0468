"""Delta helpers on a real local Spark session: tables survive the ways their writers die."""

from __future__ import annotations

import pytest

from audit.contract.tables import BRONZE
from audit.io import delta_io

pytestmark = pytest.mark.spark


def test_a_table_creation_killed_before_its_first_commit_is_created_again(spark, tmp_path):
    """The soak found it: the lake job killed while creating bronze left `_delta_log/_staged_commits`
    and no commit, and every restart failed with DELTA_TABLE_NOT_FOUND."""
    lake = tmp_path / "lake"
    (lake / BRONZE.name / "_delta_log" / "_staged_commits").mkdir(parents=True)

    path = delta_io.ensure_table(spark, str(lake), BRONZE)

    assert spark.read.format("delta").load(path).columns == list(BRONZE.column_names)
    assert (lake / BRONZE.name / "_delta_log" / "00000000000000000000.json").exists()


def test_a_table_with_commits_is_never_removed(spark, tmp_path):
    lake = str(tmp_path / "lake")
    path = delta_io.ensure_table(spark, lake, BRONZE)
    delta_io._ENSURED.discard(path)  # as a new process would see it

    assert delta_io.ensure_table(spark, lake, BRONZE) == path
    assert not delta_io._remove_interrupted_creation(spark, path)
    assert spark.read.format("delta").load(path).count() == 0
