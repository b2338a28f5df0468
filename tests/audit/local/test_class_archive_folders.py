"""Archives of jars that are gone (a deleted checkout's venv) are removed; those of jars still there, and those
recorded before their folders were listed, stay (audit/local/class_archives.py)."""

from __future__ import annotations

from audit.io import jvm
from audit.local.class_archives import FOLDERS_SUFFIX, forget_archives_of_gone_jars


def test_only_the_archives_of_jars_gone_are_removed_with_their_lists(tmp_path):
    archives, venv = tmp_path / jvm.CLASS_ARCHIVES, tmp_path / "venv-still-here"
    archives.mkdir()
    (venv / "jars").mkdir(parents=True)

    def archive(name: str, *folders) -> tuple:
        recorded = archives / f"{name}{jvm.AOT_SUFFIX}"
        recorded.write_bytes(b"classes")
        if not folders:
            return (recorded,)
        listed = recorded.with_suffix(FOLDERS_SUFFIX)
        listed.write_text("".join(f"{folder}\n" for folder in folders))
        return recorded, listed

    kept = [
        *archive("spark-aaaaaaaa-0000000000000001", venv / "jars", tmp_path),
        *archive("kafka-bbbbbbbb-0000000000000002", venv / "jars"),
        *archive("spark-cccccccc-0000000000000003"),  # no list: recorded before the lists
    ]
    gone = [
        *archive("spark-dddddddd-0000000000000004", tmp_path / "deleted" / "jars", venv / "jars"),  # one folder gone
        *archive("kafka-eeeeeeee-0000000000000005", tmp_path / "deleted" / "jars"),
    ]

    removed = forget_archives_of_gone_jars(archives)

    assert sorted(removed) == sorted(path for path in gone if path.suffix == jvm.AOT_SUFFIX)
    assert sorted(archives.iterdir()) == sorted(kept)
    assert forget_archives_of_gone_jars(archives) == []
