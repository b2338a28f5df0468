"""`kaudit reconcile` sent with `spark-submit` (the arguments `kaudit spark-submit-args` prints) to a real Spark
standalone cluster, a master and one worker started with pyspark's own scripts, its lake on the object store
(s3a://, SigV4): the same books as a local[2] reconciliation of the same audit records into a local lake."""

from __future__ import annotations

import contextlib
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from audit.books.run import reconcile
from audit.contract.tables import AUDIT_RECORDS, COMPLETENESS, TIER_COUNTS
from audit.io.clients import ensure_topics
from audit.io.lake import Lake
from audit.io.lake_read import read_frame
from audit.local.spark_standalone import SparkStandalone
from audit.settings.storage import StorageSettings
from tests.audit.local.test_pipeline_e2e import PARTITIONS, count_cluster, mirror, produce
from tests.conftest import write_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.object_store, pytest.mark.slow]

PER_TOPIC = 150  # messages per topic, over three windows
COMPARED = (TIER_COUNTS.name, COMPLETENESS.name, AUDIT_RECORDS.name)
MOMENTS = ["updated_at", "ingested_at"]  # when a run wrote a row: differs between any two runs


def rows(lake: Lake, name: str) -> pd.DataFrame:
    """Table `name` without the moments it was written at, as text, in one order: comparable across lakes."""
    frame = read_frame(lake, name).drop(columns=MOMENTS, errors="ignore").astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def start_cluster(work_dir) -> SparkStandalone:
    cluster = SparkStandalone(work_dir, workers=1, cores=1, memory="1g")
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def test_reconcile_submitted_to_a_standalone_cluster_onto_the_object_store_equals_a_local_run(
    spark, settings_factory, topic_factory, object_store, s3_lake, tmp_path
):
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(start_cluster, tmp_path / "spark")  # its JVMs start while the traffic flows
        try:
            local = settings_factory()
            topics = [topic_factory("dc1", partitions=PARTITIONS) for _ in range(2)]
            ensure_topics({"bootstrap.servers": local.cluster("dc1").bootstrap_servers}, {local.audit_topic: 1})
            produce(local, topics, PER_TOPIC)
            count_cluster(local, "dc1", topics)
            mirror(local, topics, group=f"mirror-{local.audit_topic}")
            count_cluster(local, "aggregate", [f"dc1.{topic}" for topic in topics])
        except BaseException:
            with contextlib.suppress(Exception):
                starting.result().stop()
            raise
        cluster = starting.result()
    try:
        # The submitted job's lake: the object store, reached by endpoint and key id from its config file and the
        # secret from its environment only. Neither is on the spark-submit command line (job_command leaves the
        # $AWS_SECRET_ACCESS_KEY reference out): the session the driver starts must set them itself.
        on_store = local.replace(
            lake_path=s3_lake(),
            state_dir=tmp_path / "submitted",
            storage=StorageSettings(endpoint=object_store.endpoint, access_key_id=object_store.access_key_id),
        )
        config = write_config(on_store, tmp_path / "submitted.toml")
        with config.open("a") as file:
            file.write(f'[storage]\nendpoint = "{on_store.storage.endpoint}"\n')
            file.write(f'access_key_id = "{on_store.storage.access_key_id}"\n')
        command = cluster.job_command(on_store, config_file=config)
        assert not any(object_store.secret_access_key in arg for arg in command)
        assert f"spark.hadoop.fs.s3a.endpoint={object_store.endpoint}" in command
        store_env = {"AWS_SECRET_ACCESS_KEY": object_store.secret_access_key}
        submitted = subprocess.run(
            command, env={**cluster.env(), **store_env}, capture_output=True, text=True, timeout=300
        )
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-5000:]
        master = cluster.state()
        executor_logs = sorted((tmp_path / "spark" / "worker-0").glob("app-*/*/stderr"))
    finally:
        cluster.stop()

    apps = [app for app in master["completedapps"] if app["name"] == "kaudit-reconcile"]
    assert [app["state"] for app in apps] == ["FINISHED"], master["completedapps"]
    assert executor_logs, "the worker ran no executor for the job"
    assert "kaudit-reconcile" not in str(master["activeapps"])

    reconcile(spark, local)

    lake = Lake.from_settings(on_store, env=store_env)
    assert lake.root.startswith("s3a://") and lake.on_object_store
    for name in COMPARED:
        submitted_rows, local_rows = rows(lake, name), rows(Lake.from_settings(local), name)
        assert len(submitted_rows) > 0, name
        pd.testing.assert_frame_equal(submitted_rows, local_rows, obj=name)
    counts = read_frame(lake, TIER_COUNTS.name).groupby("tier")["count"].sum().to_dict()
    assert counts == {"producer": 2 * PER_TOPIC, "dc1": 2 * PER_TOPIC, "aggregate": 2 * PER_TOPIC}, counts
