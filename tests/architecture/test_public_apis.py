"""Code that runs inside other people's processes uses public client APIs only (DESIGN invariant 12): no
native source of the tree copies a client library's private layout or reaches into a Python client's
objects, and the plugin is built against librdkafka's public header alone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from native.build import RDKAFKA_TESTED_BEYOND

ROOT = Path(__file__).resolve().parents[2]
NATIVE_SOURCES = sorted(
    path
    for pattern in ("**/*.c", "**/*.h", "**/*.java")
    for path in ROOT.glob(pattern)
    if not {".venv", "build", ".git", "node_modules"} & set(path.relative_to(ROOT).parts)
)
# What reaching into confluent-kafka (or CPython objects of a client) from C would need: its private structs'
# names, its private header, a PyObject head laid over a client object, or the Python C API at all.
PRIVATE = re.compile(
    r"confluent_kafka\.h|\bCkMessage\b|\bHandle\b|\bMessageState\b|PyObject_HEAD|#include\s*<Python\.h>"
)


def test_there_are_native_sources_to_check():
    names = {path.name for path in NATIVE_SOURCES}
    assert {"kaudit_plugin.h", "rdk.c", "KafkaAuditInterceptor.java"} <= names


def test_no_native_source_copies_a_private_layout():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in NATIVE_SOURCES
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []


def test_the_plugin_includes_only_librdkafkas_public_header_xxhash_and_its_own():
    includes = set()
    for path in (ROOT / "native" / "plugin").glob("*.[ch]"):
        includes |= set(re.findall(r'#include\s*[<"]([^>"]+)[>"]', path.read_text()))
    ours = {"kaudit_plugin.h", "audit_window.h", "kaudit_contract.h", "digest.h"}
    xxhash = {"xxhash.h"}  # the content digest's XXH64, compiled in from the header (XXH_INLINE_ALL): not a client
    system = {name for name in includes - ours - xxhash if "/" not in name or name.startswith("sys/")}
    assert includes - ours - system == {"librdkafka/rdkafka.h", *xxhash}


def test_confluent_kafka_may_only_be_a_version_whose_librdkafka_the_plugin_accepts():
    """confluent-kafka x.y bundles librdkafka x.y: a release past the plugin's gate would install, then refuse it."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d.split("#")[0].strip() for d in dependencies if d.startswith("confluent-kafka")]
    major, minor = RDKAFKA_TESTED_BEYOND
    assert spec.endswith(f",<{major}.{minor}"), spec
    pinned = (ROOT / "constraints.txt").read_text().split("confluent-kafka==", 1)[1].split()[0]
    assert tuple(int(part) for part in pinned.split(".")[:2]) < RDKAFKA_TESTED_BEYOND
