"""The Spark session every job uses: local by default, a cluster master from config at scale.

The Delta and Kafka packages are the jars `make setup` cached, passed as `spark.jars`, so a
session starts offline; under `spark-submit` the caller's own `--packages` win.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from audit.io import jvm

if TYPE_CHECKING:
    from audit.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
HADOOP_PREFIX = "spark.hadoop."

BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Small local data: a handful of shuffle partitions beats the default 200 by far.
    "spark.sql.shuffle.partitions": "4",
    # A run is dozens of small queries, and the JVM spends much of it compiling their generated code (the JIT
    # threads can take 40 % of the driver's CPU). With the default 100 cached classes every run evicts and
    # compiles again what the last one compiled; 2,000 keeps a session's classes, warm, from run to run.
    "spark.sql.codegen.cache.maxEntries": "2000",
    # A collect_list (the partition maps of `tier_counts`) makes Spark's object hash aggregate, which past 128
    # groups sorts its rows anyway and builds a new buffer per group, each field's through a new copy of the
    # session's settings (Spark 4.2's TypeOps asks SQLConf.get): 45 % of the step. A sort aggregate reuses one
    # buffer: summing the million records' 200,000 windows takes 7.5-9.8 s that way and 3.9-5.5 s this one.
    "spark.sql.execution.useObjectHashAggregateExec": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
}


# For the JVM pyspark starts. A run is dozens of small queries, and by default the C2 compiler spends a third
# of the driver's CPU compiling code that runs a few thousand times and is gone with the query. C2 only for
# what runs ten times more often: a small run twice in a fresh lake (a test) takes 20 % less CPU, the
# bench's 10,800 increments 10 % less time.
DRIVER_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=400000"
)


def run_in_utc() -> None:
    """Make this process's zone UTC, and with it the zone of the driver JVM it starts (the JVM takes `TZ`). The
    session reads SQL in UTC (BASE_CONF), and both must agree with it:
    - PySpark gives a TIMESTAMP to Python as a naive datetime in the process's zone and reads one back the same
      way: on a host in Europe/Paris every window a run names in SQL would be an hour off, and its first
      increment would fail its overwrite (DELTA_REPLACE_WHERE_MISMATCH) after reading the wrong windows;
    - Delta rebuilds a table's whole state after every commit to check its checksum when the JVM's zone does not
      name UTC (`allFilesInCrc.verificationMode.forceOnNonUTC`): 15 small appends take 14.7-18.1 s with
      TZ=Europe/Paris, 8.4-10.6 s in UTC.
    Under spark-submit the JVM runs already, in the zone its caller gave it (docs/operations.md)."""
    if os.environ.get("TZ") == "UTC":
        return
    if time.timezone or time.daylight:
        log.info("the driver runs in UTC, as its Spark session", extra={"host_zone": time.tzname[0]})
    os.environ["TZ"] = "UTC"
    time.tzset()


# Replaces DRIVER_JIT_OPTIONS for every session started locally by a process that has it: the test suite sets
# it (tests/conftest.py), so the Spark jobs of the CLI processes the tests start compile as the tests' own.
DRIVER_JAVA_OPTIONS_ENV = "KAUDIT_DRIVER_JAVA_OPTIONS"


# The local driver's heap. With Spark's 1 GB, G1 marks the heap over and over: 5.3 CPU-s of a 10,800-record
# increment's 27 go to the collector, 1.6-2.4 CPU-s with 4 GB (the bench's increment: 15.4 s against 17.6). The
# heap grows to it only when needed; under spark-submit, `--driver-memory` decides.
DRIVER_MEMORY = "4g"


def under_spark_submit() -> bool:
    """True when spark-submit started this Python driver (its JVM is already running and configured)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    *,
    app_name: str,
    cache_dir: Path,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    class_data_options: list[str] | None = None,
):
    """Get or create the SparkSession with Delta and the Kafka source on its class path. A local driver maps
    the class-data archive `make setup` recorded, or takes `class_data_options` instead (the recorder's)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    run_in_utc()  # before the JVM starts
    builder = SparkSession.builder.appName(app_name)
    settings = dict(BASE_CONF)
    if not under_spark_submit():
        os.environ.update(jvm.java_home_env())  # pyspark starts the JVM the class archive was recorded with
        builder = builder.master(master or DEFAULT_MASTER)
        settings["spark.jars"] = ",".join(str(jar) for jar in jvm.jars(cache_dir, jvm.SPARK_JARS))
        settings["spark.driver.extraJavaOptions"] = " ".join(
            [
                os.environ.get(DRIVER_JAVA_OPTIONS_ENV, DRIVER_JIT_OPTIONS),
                *(
                    jvm.class_archive_options(cache_dir, jvm.SPARK_JARS)
                    if class_data_options is None
                    else class_data_options
                ),
            ]
        )
        settings["spark.driver.memory"] = DRIVER_MEMORY
    else:  # spark-submit chose the master and brought --packages; only the shuffle default is ours to drop
        settings.pop("spark.sql.shuffle.partitions")
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in (conf or {}).items():
        if key.startswith(HADOOP_PREFIX):
            # A session that existed before (getOrCreate) keeps its context's Hadoop settings; Spark copies a
            # session's own settings into the Hadoop configuration of each read and write, without the prefix.
            session.conf.set(key.removeprefix(HADOOP_PREFIX), value)
    return session


def session_for(settings: Settings, app_name: str):
    """The Spark session of a kafka-audit job: `[spark]`'s master and conf, the lake's storage settings."""
    from audit.io.lake import lake_of

    conf = {**lake_of(settings).spark_conf(), **settings.spark.conf}
    return spark_session(app_name=app_name, cache_dir=settings.cache_dir, master=settings.spark.master, conf=conf)


# A checkpointed frame has no size Spark can plan with, so a join shuffles both sides even when this one
# is a few windows. Up to this many rows (some tens of MB) it is broadcast instead.
BROADCAST_MAX_ROWS = 1_000_000
BROADCAST_MAX_NUMBERS = 10_000_000  # rows of a single BIGINT column: 8 bytes each


def broadcast_when_small(frame, rows: int | None = None, *, limit: int | None = None):
    """`frame` (computed once: checkpointed) marked for broadcast when it holds at most `limit` rows
    (BROADCAST_MAX_ROWS unless given); `rows`: how many it holds at most, when the caller knows (else they are
    counted)."""
    from pyspark.sql import functions as F

    limit = BROADCAST_MAX_ROWS if limit is None else limit
    return F.broadcast(frame) if (frame.count() if rows is None else rows) <= limit else frame


def local_frame(spark, rows, ddl: str):
    """A DataFrame of the schema `ddl` (`name TYPE, ...`) from rows the driver holds (a pyarrow Table, or tuples
    in `ddl`'s column order), handed to Spark as Arrow. `createDataFrame` of a Python list starts Python workers
    to unpickle it: about 2 s in a new session, and again once they were idle for a minute."""
    import pyarrow as pa

    from audit.contract.arrow import ddl_schema

    schema = ddl_schema(ddl)
    if isinstance(rows, pa.Table):
        return spark.createDataFrame(rows.select(schema.names).cast(schema))
    records = [dict(zip(schema.names, row, strict=True)) for row in rows]
    return spark.createDataFrame(pa.Table.from_pylist(records, schema=schema))


def side_by_side(*steps: Callable[[], object], threads: int | None = None) -> list:
    """Run `steps` (no-argument calls) at the same time in threads of this driver; their results in order.

    For independent steps of a Spark job: a Delta commit mostly waits on the driver and the file system,
    and a small query leaves cores idle, so two of them side by side take little more than the longer one.
    The first step to fail raises its error once every step has ended."""
    with ThreadPoolExecutor(max_workers=threads or len(steps) or 1) as pool:
        running = [pool.submit(step) for step in steps]
        return [future.result() for future in running]
