"""`kaudit spark-submit-args` and `audit/io/spark_submit.py`, without Spark: the arguments name the versions of
jvm/spark/pom.xml, which agree with the pyproject's pins and pyspark's Hadoop (so neither the command nor the docs
can drift from them), secrets stay out of the output unless asked for, and the master is the one configured."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ElementTree
from importlib.metadata import version
from pathlib import Path

import pytest

from audit.contract.errors import SetupError
from audit.io.spark import BASE_CONF
from audit.io.spark_submit import (
    DRIVER_SCRIPT,
    EnvReference,
    shell_line,
    spark_packages,
    spark_submit_args,
    submitted_conf,
)
from audit.settings import Settings
from audit.settings.clusters import Secret
from audit.settings.storage import SparkSettings, StorageSettings

ROOT = Path(__file__).resolve().parents[3]
POM = ROOT / "jvm" / "spark" / "pom.xml"
MAVEN = "{http://maven.apache.org/POM/4.0.0}"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def pom_versions() -> dict[str, str]:
    """artifactId -> version of the pom's dependencies that carry one, read here rather than by the code under test."""
    project = ElementTree.parse(POM).getroot()
    return {
        dependency.findtext(f"{MAVEN}artifactId"): dependency.findtext(f"{MAVEN}version")
        for dependency in project.iterfind(f"{MAVEN}dependencies/{MAVEN}dependency")
        if dependency.findtext(f"{MAVEN}version")
    }


def pinned(artifact_prefix: str) -> tuple[str, str]:
    """(artifactId, version) of the pom's one dependency whose id starts with `artifact_prefix`."""
    [(artifact, pom_version)] = [(a, v) for a, v in pom_versions().items() if a.startswith(artifact_prefix)]
    return artifact, pom_version


def pyproject_pin(package: str) -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d.split("==", 1)[1].split()[0] for d in dependencies if re.match(rf"{package}(\[\w+\])?==", d)]
    return pin


def fake_cache(tmp_path: Path, *extra: str) -> Path:
    """A jar cache as `make setup` leaves it: a file per artifact of the pom (versions from the BOM included)."""
    folder = tmp_path / "cache" / "jars" / "spark"
    folder.mkdir(parents=True)
    for artifact in spark_packages().artifacts:
        (folder / artifact.jar_name).touch()
    for name in extra:
        (folder / name).touch()
    return tmp_path / "cache"


def settings(tmp_path: Path, **values) -> Settings:
    return Settings(state_dir=tmp_path / "state", cache_dir=fake_cache(tmp_path, "kafka-clients-3.9.2.jar"), **values)


def on_store(tmp_path: Path, **values) -> Settings:
    storage = StorageSettings(
        endpoint="http://127.0.0.1:8333", access_key_id="AKIDEXAMPLE", secret_access_key=Secret(SECRET)
    )
    return settings(tmp_path, lake_path="s3a://audit-bucket/kafka-audit", storage=storage, **values)


def kaudit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def words(output: str) -> list[str]:
    """The arguments a shell reads from the printed line: continuations joined, quotes removed (no expansion)."""
    return shlex.split(output.replace("\\\n", ""))


def option_values(args: list[str], option: str) -> list[str]:
    return [args[index + 1] for index, arg in enumerate(args) if arg == option]


def expanded(arg: str, env: dict[str, str]) -> str:
    """What a shell makes of an argument: a secret's `$VARIABLE` reference replaced by the variable's value."""
    if isinstance(arg, EnvReference):
        key, variable = arg.split("=$", 1)
        return f"{key}={env.get(variable, '')}"
    return arg


def test_packages_are_the_pom_versions_of_delta_kafka_and_s3a():
    result = kaudit("spark-submit-args", "--packages", "--master", "yarn")
    assert result.returncode == 0, result.stderr
    [packages] = option_values(words(result.stdout), "--packages")
    coordinates = packages.split(",")
    for group, prefix in [
        ("io.delta", "delta-spark_"),
        ("org.apache.spark", "spark-sql-kafka-0-10_"),
        ("org.apache.hadoop", "hadoop-aws"),
    ]:
        artifact, pom_version = pinned(prefix)
        named = [c for c in coordinates if c.split(":")[1].startswith(prefix)]
        assert named == [f"{group}:{artifact}:{pom_version}"], coordinates
    sdk = [c for c in coordinates if c.startswith("software.amazon.awssdk:")]
    assert sdk and all(c.count(":") == 2 and c.rsplit(":", 1)[1] for c in sdk), "the BOM gives the SDK its version"
    assert "software.amazon.awssdk:bundle" in option_values(words(result.stdout), "--exclude-packages")[0]


def test_jars_are_the_cached_files_of_the_pom_versions(tmp_path):
    args = spark_submit_args(settings(tmp_path))
    [jars] = option_values(args, "--jars")
    names = [Path(jar).name for jar in jars.split(",")]
    for prefix in ("delta-spark_", "spark-sql-kafka-0-10_", "hadoop-aws"):
        artifact, pom_version = pinned(prefix)
        assert [n for n in names if n.startswith(prefix)] == [f"{artifact}-{pom_version}.jar"]
    assert "kafka-clients-3.9.2.jar" in names, "every cached jar, as the local session's spark.jars"
    assert all(Path(jar).is_absolute() for jar in jars.split(","))


def test_a_cache_older_than_the_pom_is_refused(tmp_path):
    cache = fake_cache(tmp_path)
    delta = next(cache.glob("jars/spark/delta-spark_*.jar"))
    delta.rename(delta.with_name("delta-spark_4.2_2.13-0.0.1.jar"))
    with pytest.raises(SetupError, match="make setup"):
        spark_submit_args(Settings(state_dir=tmp_path / "state", cache_dir=cache))


def test_pyproject_pins_agree_with_the_jars_and_pyspark_ships_the_hadoop_of_hadoop_aws():
    pyspark, delta = pyproject_pin("pyspark"), pyproject_pin("delta-spark")
    assert pyspark == "4.2.0" and re.fullmatch(r"4\.4\.\d+", delta), (pyspark, delta)
    assert (version("pyspark"), version("delta-spark")) == (pyspark, delta), "the venv has the pinned packages"
    delta_jar, delta_jar_version = pinned("delta-spark_")
    kafka_jar, kafka_jar_version = pinned("spark-sql-kafka-0-10_")
    spark_line, scala = re.fullmatch(r"delta-spark_(\d+\.\d+)_(\d+\.\d+)", delta_jar).groups()
    assert delta_jar_version.split(".")[:2] == delta.split(".")[:2], "delta-spark jar and pip package: one minor"
    assert spark_line == ".".join(pyspark.split(".")[:2]), "the delta-spark jar is the build for this Spark"
    assert kafka_jar_version == pyspark and kafka_jar == f"spark-sql-kafka-0-10_{scala}", "Kafka source = Spark"
    import pyspark as installed

    hadoop = [jar.name for jar in (Path(installed.__file__).parent / "jars").glob("hadoop-client-api-*.jar")]
    assert hadoop == [f"hadoop-client-api-{pinned('hadoop-aws')[1]}.jar"], "hadoop-aws must match Spark's Hadoop"


def test_the_docs_name_only_the_pinned_coordinates():
    named = re.findall(
        r"(delta-spark_[\d.]+_[\d.]+|spark-sql-kafka-0-10_[\d.]+|hadoop-aws)[:-](\d+\.\d+\.\d+)",
        "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]),
    )
    assert named, "docs/operations.md shows `kaudit spark-submit-args` output"
    assert {(artifact, pom_version) for artifact, pom_version in named} <= set(pom_versions().items()), named


def test_secrets_are_environment_references_unless_shown(tmp_path):
    values = {"spark": SparkSettings(conf={"spark.authenticate.secret": "conf-secret", "spark.executor.memory": "2g"})}
    args = spark_submit_args(on_store(tmp_path, **values), env={})
    assert not any(SECRET in arg or "conf-secret" in arg for arg in args)
    conf = option_values(args, "--conf")
    assert "spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY" in conf
    assert "spark.authenticate.secret=$SPARK_AUTHENTICATE_SECRET" in conf
    assert all(isinstance(arg, EnvReference) for arg in conf if "$" in arg)
    assert {"spark.hadoop.fs.s3a.access.key=AKIDEXAMPLE", "spark.executor.memory=2g"} <= set(conf)
    assert "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:8333" in conf

    line = shell_line(args)
    assert SECRET not in line and '"spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY"' in line
    shell_env = {"AWS_SECRET_ACCESS_KEY": "from-the-shell"}
    printed = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {line}"],
        capture_output=True,
        text=True,
        env={**os.environ, **shell_env},
        check=True,
    ).stdout.splitlines()
    assert printed == [expanded(arg, shell_env) for arg in args], "one word per argument; the shell fills in secrets"

    shown = option_values(
        spark_submit_args(on_store(tmp_path / "shown", **values), env={}, show_secrets=True), "--conf"
    )
    assert f"spark.hadoop.fs.s3a.secret.key={SECRET}" in shown and "spark.authenticate.secret=conf-secret" in shown


def test_the_cli_masks_a_secret_from_the_environment(tmp_path):
    env = {
        "KAUDIT_LAKE_PATH": "s3a://audit-bucket/kafka-audit",
        "KAUDIT_STORAGE_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "KAUDIT_STORAGE_SECRET_ACCESS_KEY": SECRET,
        "KAUDIT_CACHE_DIR": str(fake_cache(tmp_path)),
    }
    result = kaudit("spark-submit-args", env=env)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert '--conf "spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY"' in result.stdout
    shown = kaudit("spark-submit-args", "--show-secrets", env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"spark.hadoop.fs.s3a.secret.key={SECRET}" in words(shown.stdout)


def test_the_master_is_the_configured_one_unless_given(tmp_path):
    configured = settings(tmp_path, spark=SparkSettings(master="spark://spark-master:7077"))
    assert option_values(spark_submit_args(configured), "--master") == ["spark://spark-master:7077"]
    assert option_values(spark_submit_args(configured, master="yarn"), "--master") == ["yarn"]
    env = {"KAUDIT_SPARK_MASTER": "spark://from-env:7077"}
    assert option_values(words(kaudit("spark-submit-args", "--packages", env=env).stdout), "--master") == [
        "spark://from-env:7077"
    ]
    given = kaudit("spark-submit-args", "--packages", "--master", "k8s://https://api:6443", env=env)
    assert option_values(words(given.stdout), "--master") == ["k8s://https://api:6443"]


def test_the_driver_runs_kaudit_with_the_config_and_the_job_arguments(tmp_path):
    config = tmp_path / "prod.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n')
    result = kaudit(
        "--config", str(config), "spark-submit-args", "--packages", "--job", "lake", "--", "--until-caught-up"
    )
    assert result.returncode == 0, result.stderr
    args = words(result.stdout)
    driver = args.index(str(DRIVER_SCRIPT))
    assert DRIVER_SCRIPT.is_file() and DRIVER_SCRIPT.parent.name == "cli"
    assert args[driver + 1 :] == ["--config", str(config), "lake", "--until-caught-up"]
    assert all(arg.startswith("--") for arg in args[:driver:2]), "options and their values before the driver"


def test_the_conf_is_the_sessions_under_spark_submit(tmp_path):
    conf = submitted_conf(settings(tmp_path, spark=SparkSettings(conf={"spark.driver.extraJavaOptions": "-Xss4m"})))
    assert conf["spark.sql.extensions"] == BASE_CONF["spark.sql.extensions"]
    assert conf["spark.sql.catalog.spark_catalog"] == BASE_CONF["spark.sql.catalog.spark_catalog"]
    assert "spark.sql.shuffle.partitions" not in conf, "left to the submitter, as spark_session does"
    assert conf["spark.driver.extraJavaOptions"] == "-Duser.timezone=UTC -Xss4m", "[spark].conf keeps the UTC zone"
    assert not any(key.startswith("spark.hadoop.") for key in conf), "a local lake needs no storage settings"


def test_help_explains_and_a_bad_job_is_refused():
    shown = kaudit("spark-submit-args", "--help")
    assert shown.returncode == 0 and "usage: kaudit spark-submit-args" in shown.stdout
    assert "--packages" in shown.stdout and "$AWS_SECRET_ACCESS_KEY" in shown.stdout
    refused = kaudit("spark-submit-args", "--job", "compact")
    assert refused.returncode == 2 and "invalid choice: 'compact'" in refused.stderr
