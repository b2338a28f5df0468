"""The class-data archives `make setup` records (audit/local/class_archives.py) are ones the JVMs map.

`-Xshare:on` (`-XX:AOTMode=on` for Java 25's ahead-of-time cache) makes a JVM fail to start unless it maps its
archive, where the options of every day (`auto`) would start it without one, only slower."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from audit.io import jvm
from audit.local import class_archives
from audit.local.clusters import LocalCluster
from tests.conftest import cache_dir

pytestmark = pytest.mark.kafka


AOT = jvm.keeps_aot_cache()


def sharing(mode: str) -> str:
    """The option that makes the JVM map its archive: `on` (or fail), `auto` (or start without it)."""
    return f"-XX:AOTMode={mode}" if AOT else f"-Xshare:{mode}"


def cluster_id_command(cache: Path, tmp_path: Path, *, share: str = "on") -> list[str]:
    """A short broker-side JVM (a new cluster id) on the brokers' class path and options."""
    java, *options = LocalCluster("ids", state_dir=tmp_path, cache_dir=cache)._java_command(
        "kafka.tools.StorageTool", "random-uuid"
    )
    return [java, sharing(share), *options]


def test_a_broker_maps_the_archive_make_setup_recorded(tmp_path):
    assert jvm.class_archive_options(cache_dir(), jvm.KAFKA_JARS), "no broker class archive: run `make setup`"
    result = subprocess.run(cluster_id_command(cache_dir(), tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_spark_driver_maps_the_archive_make_setup_recorded():
    options = jvm.class_archive_options(cache_dir(), jvm.SPARK_JARS)
    assert options, "no Spark class archive: run `make setup`"
    spark_submit = jvm.pyspark_jar_dir().parent / "bin" / "spark-submit"
    java_options = " ".join([sharing("on"), *options])
    result = subprocess.run(
        [str(spark_submit), "--conf", f"spark.driver.extraJavaOptions={java_options}", "--version"],
        env={**os.environ, **jvm.java_home_env()},  # the Java the archive was recorded with, as spark_session does
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_archive_the_jvm_refuses_is_said_on_stderr_and_stdout_stays_the_programs(tmp_path, monkeypatch):
    spark_archive = jvm.class_archive(cache_dir(), jvm.SPARK_JARS)
    assert spark_archive.is_file(), "no Spark class archive: run `make setup`"
    monkeypatch.setattr(jvm, "class_archive", lambda cache, name: spark_archive)  # not recorded for these jars

    result = subprocess.run(
        cluster_id_command(cache_dir(), tmp_path, share="auto"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    tag, refusal = (
        ("[aot", "error has occurred while processing the AOT cache")
        if AOT
        else ("[cds", "Unable to use shared archive")
    )
    assert tag not in result.stdout and "shared" not in result.stdout and "AOT" not in result.stdout, result.stdout
    assert tag in result.stderr and refusal in result.stderr, result.stderr


def test_recording_replaces_the_old_archive_of_these_jars_with_one_a_broker_maps(tmp_path):
    cache = tmp_path / "cache"
    (cache / "jars" / jvm.KAFKA_JARS).mkdir(parents=True)
    for jar in jvm.jars(cache_dir(), jvm.KAFKA_JARS):
        (cache / "jars" / jvm.KAFKA_JARS / jar.name).symlink_to(jar)
    expected = jvm.class_archive(cache, jvm.KAFKA_JARS)
    expected.parent.mkdir()
    stale = [
        expected.with_name(expected.name.rsplit("-", 1)[0] + f"-0000000000000000{suffix}")
        for suffix in jvm.ARCHIVE_SUFFIXES
    ]
    for archive in stale:  # for jars gone since, or another Java
        archive.write_bytes(b"recorded for jars gone since")
    other_venvs = expected.with_name(f"{jvm.KAFKA_JARS}-00000000-0000000000000000{expected.suffix}")
    other_venvs.write_bytes(b"recorded for jars elsewhere")
    gone_venv = expected.with_name(f"{jvm.KAFKA_JARS}-11111111-1111111111111111{expected.suffix}")
    gone_venv.write_bytes(b"recorded for a checkout deleted since")
    gone_venv.with_suffix(class_archives.FOLDERS_SUFFIX).write_text(f"{tmp_path / 'deleted-checkout'}\n")

    archive = class_archives.record(cache, jvm.KAFKA_JARS)

    assert archive == expected
    folders = archive.with_suffix(class_archives.FOLDERS_SUFFIX)
    assert folders.read_text() == f"{cache / 'jars' / jvm.KAFKA_JARS}\n"
    assert sorted((cache / jvm.CLASS_ARCHIVES).iterdir()) == sorted([archive, folders, other_venvs])
    result = subprocess.run(cluster_id_command(cache, tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    recorded_at = archive.stat().st_mtime_ns
    assert class_archives.record(cache, jvm.KAFKA_JARS) == archive  # found, not recorded again
    assert archive.stat().st_mtime_ns == recorded_at
