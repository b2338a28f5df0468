"""Which class-data archive a JVM maps (audit/io/jvm.py): one per Java and jar set, none until recorded."""

from __future__ import annotations

from audit.io import jvm


def fake_cache(tmp_path, *jar_names: str):
    folder = tmp_path / "jars" / jvm.KAFKA_JARS
    folder.mkdir(parents=True, exist_ok=True)
    for name in jar_names:
        (folder / name).write_bytes(b"PK")
    return tmp_path


def test_an_archive_is_named_by_every_jar_so_new_jars_look_for_a_new_one(tmp_path):
    cache = fake_cache(tmp_path, "kafka-clients-4.1.0.jar", "kafka-server-4.1.0.jar")
    first = jvm.class_archive(cache, jvm.KAFKA_JARS)
    assert jvm.class_archive(cache, jvm.KAFKA_JARS) == first
    assert first.parent == cache / jvm.CLASS_ARCHIVES and first.name.startswith("kafka-")

    (cache / "jars" / jvm.KAFKA_JARS / "kafka-server-4.1.0.jar").write_bytes(b"PK rebuilt")
    rebuilt = jvm.class_archive(cache, jvm.KAFKA_JARS)
    fake_cache(tmp_path, "zstd-jni-1.5.6.jar")
    added = jvm.class_archive(cache, jvm.KAFKA_JARS)
    assert len({first, rebuilt, added}) == 3


def test_no_options_until_the_archive_is_recorded(tmp_path):
    cache = fake_cache(tmp_path, "kafka-clients-4.1.0.jar")
    assert jvm.class_archive_options(cache, jvm.KAFKA_JARS) == []

    archive = jvm.class_archive(cache, jvm.KAFKA_JARS)
    archive.parent.mkdir()
    archive.write_bytes(b"recorded")
    assert any(str(archive) in option for option in jvm.class_archive_options(cache, jvm.KAFKA_JARS))


def fake_jdk(folder, name: str, version: str | None):
    """A JDK home whose `release` file gives `version` (None: no release file), with a `bin/java`."""
    home = folder / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    if version is not None:
        (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\nOS_NAME="Linux"\n')
    return home


def test_the_java_version_is_read_from_the_release_file(tmp_path):
    assert jvm.java_version(fake_jdk(tmp_path, "a", "25.0.3")) == (25, 0, 3)
    assert jvm.java_version(fake_jdk(tmp_path, "b", "17")) == (17,)
    assert jvm.java_version(fake_jdk(tmp_path, "c", None)) == ()


def test_spark_runs_on_17_21_and_25_from_25_0_3_on():
    assert [jvm.supported(v) for v in [(17, 0, 15), (21,), (25, 0, 3), (25, 1)]] == [True] * 4
    assert [jvm.supported(v) for v in [(11, 0, 2), (25, 0, 2), (26,), ()]] == [False] * 4


def test_the_newest_supported_jdk_installed_is_chosen(tmp_path):
    assert jvm.newest_installed_jdk(tmp_path) is None
    fake_jdk(tmp_path, "java-17-openjdk-amd64", "17.0.15")
    fake_jdk(tmp_path, "temurin-25-early", "25.0.1")  # before 25.0.3: Spark deprecates it
    fake_jdk(tmp_path, "jdk-26", "26")  # not supported by Spark 4.2
    fake_jdk(tmp_path, "broken", None)
    assert jvm.newest_installed_jdk(tmp_path) == tmp_path / "java-17-openjdk-amd64"
    newest = fake_jdk(tmp_path, "temurin-25-jdk-amd64", "25.0.3")
    (tmp_path / "default-java").symlink_to(newest)  # an alias is not a second JDK
    assert jvm.newest_installed_jdk(tmp_path) == newest


def test_java_home_wins_over_the_jdks_installed(tmp_path, monkeypatch):
    chosen = fake_jdk(tmp_path, "chosen", "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(chosen))
    assert jvm.java_home() == chosen
    assert jvm.java_executable() == str(chosen / "bin" / "java")
    assert jvm.java_home_env() == {"JAVA_HOME": str(chosen)}


def test_java_25_keeps_an_aot_cache_and_java_17_a_class_data_archive(tmp_path, monkeypatch):
    cache = fake_cache(tmp_path / "cache", "kafka-clients-4.1.0.jar")
    for version, suffix, option in [("17.0.15", ".jsa", "-XX:SharedArchiveFile="), ("25.0.3", ".aot", "-XX:AOTCache=")]:
        monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / version, "jdk", version)))
        archive = jvm.class_archive(cache, jvm.KAFKA_JARS)
        assert archive.suffix == suffix
        archive.parent.mkdir(exist_ok=True)
        archive.write_bytes(b"recorded")
        assert f"{option}{archive}" in jvm.class_archive_options(cache, jvm.KAFKA_JARS)
        recording = jvm.recording_options(archive.with_suffix(".recording"))
        assert recording[0].startswith("-XX:AOTCacheOutput=" if suffix == ".aot" else "-XX:ArchiveClassesAtExit=")
        logged = " ".join(jvm.class_archive_options(cache, jvm.KAFKA_JARS) + recording)
        assert ("-Xlog:aot" in logged) == (suffix == ".aot")  # Java 17 refuses the aot tag
