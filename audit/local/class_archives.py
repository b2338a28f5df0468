"""Record the class-data archives the brokers and the Spark drivers start from.

A JVM started with `-XX:ArchiveClassesAtExit` (Java 17: AppCDS) writes every class it loaded, parsed and
verified, to an archive when it exits; a JVM started with that archive maps them instead of loading them
again. On Java 25, `-XX:AOTCacheOutput` writes an ahead-of-time cache instead, which also holds the classes
linked and the profiles of the methods that ran. `make setup` records one per jar set here, by starting the
JVM once on a short workload like the real one: a broker that serves a transaction and a consumer group, a
Spark driver that creates the lake's tables and merges into one. Where an archive is missing, every JVM
starts as before (jvm.class_archive_options).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from audit.contract.errors import SetupError
from audit.io import jvm
from audit.io.clients import ensure_topics
from audit.local.clusters import LocalCluster
from audit.settings import DEFAULT_CACHE_DIR

log = logging.getLogger(__name__)

RECORDED_SETS = (jvm.KAFKA_JARS, jvm.SPARK_JARS)
FOLDERS_SUFFIX = ".folders"  # beside each archive: the folders of the jars it was recorded for, one a line
WORKLOAD_MESSAGES = 100
# How long a recording JVM may take to exit: on Java 25 it starts a second JVM that writes the cache, 10-40 s.
RECORDING_EXIT_S = 300


def record(cache_dir: Path, name: str) -> Path:
    """The archive of jar set `name`, recorded unless it already is; the set's older archives are removed."""
    archive = jvm.class_archive(cache_dir, name)
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    recording = archive.with_suffix(".recording")
    recording.unlink(missing_ok=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"kaudit-{name}-classes-") as scratch:
        RECORDERS[name](Path(cache_dir), Path(scratch), jvm.recording_options(recording))
    if not recording.is_file() or recording.stat().st_size == 0:
        raise SetupError(f"the {name} JVM exited without writing its class archive {recording}")
    for suffix in jvm.ARCHIVE_SUFFIXES:  # this venv's, for older jars or another Java
        for stale in archive.parent.glob(archive.name.rsplit("-", 1)[0] + f"-*{suffix}"):
            stale.unlink()
            stale.with_suffix(FOLDERS_SUFFIX).unlink(missing_ok=True)
    recording.replace(archive)
    folders = jvm.class_archive_folders(jvm.class_archive_jars(cache_dir, name))
    archive.with_suffix(FOLDERS_SUFFIX).write_text("".join(f"{folder}\n" for folder in folders))
    forget_archives_of_gone_jars(archive.parent)
    log.info(
        "class archive recorded",
        extra={"jars": name, "archive": str(archive), "seconds": round(time.monotonic() - began, 1)},
    )
    return archive


def forget_archives_of_gone_jars(archives: Path) -> list[Path]:
    """Remove the archives (of `archives`, the cache's folder of them) recorded for jars whose folder is gone, a
    deleted checkout's venv: some 200 MB each that no JVM can map again, one more per fresh clone. An archive
    without its list of folders (recorded before the lists were written) stays. Returns the archives removed."""
    removed = []
    for listed in archives.glob(f"*{FOLDERS_SUFFIX}"):
        try:
            folders = listed.read_text().splitlines()
        except FileNotFoundError:  # `make setup` records the two sets side by side: the other removed it
            continue
        if all(Path(folder).is_dir() for folder in folders):
            continue
        for suffix in jvm.ARCHIVE_SUFFIXES:
            archive = listed.with_suffix(suffix)
            try:
                archive.unlink()  # a JVM still mapping it keeps its pages: unlinked, never overwritten
            except FileNotFoundError:
                continue
            removed.append(archive)
        listed.unlink(missing_ok=True)
    if removed:
        log.info("class archives of jars gone removed", extra={"archives": ",".join(p.name for p in removed)})
    return removed


def run_broker(cache_dir: Path, scratch: Path, options: list[str]) -> None:
    """A broker that starts, serves a committed transaction and a consumer group, and stops. (The storage
    format before it is a JVM of its own on the same options: it records first, and the broker replaces that.)"""
    cluster = LocalCluster("classes", state_dir=scratch, cache_dir=cache_dir, class_data_options=options)
    cluster.start()
    try:
        config = cluster.client_config()
        ensure_topics(config, {"classes": 1})
        producer = Producer({**config, "transactional.id": "classes"})
        producer.init_transactions()
        producer.begin_transaction()
        for number in range(WORKLOAD_MESSAGES):
            producer.produce("classes", str(number).encode())
        producer.commit_transaction()
        producer.close()  # else it calls the broker again while it stops, and logs each refusal
        consumer = Consumer(
            {**config, "group.id": "classes", "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
        )
        consumer.subscribe(["classes"])
        read = 0
        deadline = time.monotonic() + 60
        while read < WORKLOAD_MESSAGES and time.monotonic() < deadline:
            read += len(consumer.consume(WORKLOAD_MESSAGES, timeout=1))
        consumer.commit(asynchronous=False)
        consumer.close()
    finally:
        cluster.stop(timeout_s=RECORDING_EXIT_S)  # SIGTERM: the JVM writes the archive as it exits


def run_spark_driver(cache_dir: Path, scratch: Path, options: list[str]) -> None:
    """A Spark driver that reads the lake's new tables, writes and merges into a Delta table, reads it back and exits."""
    from delta.tables import DeltaTable
    from pyspark import SparkContext

    from audit.io.delta_io import ensure_tables
    from audit.io.spark import spark_session

    spark = spark_session(app_name="kaudit-class-archive", cache_dir=cache_dir, class_data_options=options)
    gateway = SparkContext._gateway.proc  # type: ignore[union-attr]
    for path in ensure_tables(str(scratch / "lake")).values():  # created by deltalake, read by Spark
        spark.read.format("delta").load(path).count()
    path = str(scratch / "merged")
    rows = spark.range(1000).selectExpr("id", "id % 10 AS window", "to_json(named_struct('n', id)) AS payload")
    rows.write.format("delta").save(path)
    merge = DeltaTable.forPath(spark, path).alias("t").merge(rows.where("id % 2 = 0").alias("s"), "t.id = s.id")
    merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    parsed = spark.read.format("delta").load(path).selectExpr("window", "from_json(payload, 'n BIGINT') AS parsed")
    parsed.groupBy("window").count().collect()
    spark.stop()
    gateway.stdin.close()  # the gateway JVM exits when its stdin closes, and writes the archive then
    gateway.wait(timeout=RECORDING_EXIT_S)


RECORDERS = {jvm.KAFKA_JARS: run_broker, jvm.SPARK_JARS: run_spark_driver}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m audit.local.class_archives",
        description="Record the class-data archives the brokers and Spark drivers start from (run by `make setup`; "
        "does nothing for an archive already recorded for this Java and these jars).",
    )
    parser.add_argument(
        "jar_sets", nargs="*", metavar="JARS", help=f"which archives: {' or '.join(RECORDED_SETS)} (default: both)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("KAUDIT_CACHE_DIR", DEFAULT_CACHE_DIR)).expanduser(),
        help="the jar cache `make setup` fills (default: $KAUDIT_CACHE_DIR, else %(default)s)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.jar_sets) - set(RECORDED_SETS))
    if unknown:
        parser.error(f"no jar set {', '.join(unknown)}: choose from {', '.join(RECORDED_SETS)}")
    for name in args.jar_sets or RECORDED_SETS:
        began = time.monotonic()
        existed = jvm.class_archive(args.cache_dir, name).is_file()
        archive = record(args.cache_dir, name)
        verb = "up to date" if existed else f"recorded in {time.monotonic() - began:.0f} s"
        print(f"class archive of the {name} jars {verb}: {archive} ({archive.stat().st_size // 2**20} MiB)")


if __name__ == "__main__":
    main()
