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
    assert f"-XX:SharedArchiveFile={archive}" in jvm.class_archive_options(cache, jvm.KAFKA_JARS)
