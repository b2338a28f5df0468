"""Every implementation of the content digest against the one table of cases (tests/contract_cases.py): the
contract itself, the librdkafka plugin's C form (through its exported functions), the Java interceptor's form
(io.kaudit.ContentDigest and the sum its WindowTally keeps, in the jar `make setup` builds) and the lake's Spark
columns (in the Spark tier)."""

from __future__ import annotations

import subprocess

import pytest

from audit.contract import digest
from audit.io import jvm, plugin
from audit.io.interceptor_jar import interceptor_jar
from tests.conftest import cache_dir
from tests.contract_cases import DIGEST_CASES, DIGEST_SET_CASES, FRAMING_PAIRS, DigestCase, DigestSetCase

INT64 = range(-(2**63), 2**63)


def test_the_table_says_what_it_claims():
    assert all(a.hash != b.hash for a, b in FRAMING_PAIRS)
    assert all(case.hash in INT64 for case in DIGEST_CASES)
    assert all(case.digest in INT64 for case in DIGEST_SET_CASES)
    for case in DIGEST_SET_CASES:
        unsigned_sum = sum(digest.message_hash(key, value) % 2**64 for key, value in case.messages)
        assert case.wraps == (unsigned_sum >= 2**64), case


# -- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", DIGEST_CASES, ids=str)
def test_the_contract(case: DigestCase):
    assert digest.message_hash(case.key, case.value) == case.hash


@pytest.mark.parametrize("case", DIGEST_SET_CASES, ids=str)
def test_the_contracts_digests(case: DigestSetCase):
    assert digest.digest_of(case.messages) == case.digest
    half = len(case.messages) // 2
    halves = digest.digest_of(case.messages[:half]), digest.digest_of(case.messages[half:])
    assert digest.merge(*halves) == case.digest


# -- the librdkafka plugin ------------------------------------------------------------------------


@pytest.mark.parametrize("case", DIGEST_CASES, ids=str)
def test_the_plugins_hash(case: DigestCase):
    assert plugin.message_hash(case.key, case.value) == case.hash


@pytest.mark.parametrize("case", DIGEST_SET_CASES, ids=str)
def test_the_plugins_digests(case: DigestSetCase):
    assert plugin.digest_of(list(case.messages)) == case.digest


# -- the Java interceptor ------------------------------------------------------------------------


def java_answers(questions: list[tuple[str, list[tuple[bytes | None, bytes | None]]]]) -> list[int]:
    """io.kaudit.ContentDigest's answer to each (`hash` or `digest`, messages) (see its main: hex, `-`: null)."""
    lines = "".join(
        " ".join([verb, *("-" if b is None else b.hex() for message in messages for b in message)]) + "\n"
        for verb, messages in questions
    )
    command = [jvm.java_executable(), "-cp", str(interceptor_jar(cache_dir())), "io.kaudit.ContentDigest"]
    done = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=120, check=True)
    return [int(line) for line in done.stdout.split()]


def java_hashes(messages: list[tuple[bytes | None, bytes | None]]) -> list[int]:
    """io.kaudit.ContentDigest's hash of each (key, value)."""
    return java_answers([("hash", [message]) for message in messages])


@pytest.mark.jvm
def test_the_java_interceptors_hash():
    got = java_hashes([(case.key, case.value) for case in DIGEST_CASES])
    wrong = [(str(case), g, case.hash) for case, g in zip(DIGEST_CASES, got, strict=True) if g != case.hash]
    assert wrong == [], "\n".join(f"{why}: Java {g}, the contract {e}" for why, g, e in wrong)


@pytest.mark.jvm
def test_the_java_interceptors_digests():
    """Each set's hashes summed as the interceptor's WindowTally sums a window's partition (none: no digest, 0)."""
    got = java_answers([("digest", list(case.messages)) for case in DIGEST_SET_CASES])
    wrong = [(str(case), g, case.digest) for case, g in zip(DIGEST_SET_CASES, got, strict=True) if g != case.digest]
    assert wrong == [], "\n".join(f"{why}: Java {g}, the contract {e}" for why, g, e in wrong)


@pytest.mark.jvm
def test_the_java_interceptors_hash_at_every_length():
    """Keys and values of 0 to 80 bytes: XXH64's stripes of 32 bytes, its 8- and 4-byte steps and its tail."""
    messages = [(bytes(range(n)), bytes(range(255, 255 - n // 2, -1))) for n in range(81)]
    assert java_hashes(messages) == [digest.message_hash(key, value) for key, value in messages]


# -- the lake's Spark columns ---------------------------------------------------------------------


def message_frame(spark, messages: list[tuple[int, bytes | None, bytes | None]]):
    """(group, key, value) rows with BINARY key and value columns, nulls kept."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    schema = StructType(
        [StructField("group", IntegerType()), StructField("key", BinaryType()), StructField("value", BinaryType())]
    )
    return spark.createDataFrame(messages, schema)


@pytest.mark.spark
def test_the_lakes_spark_hash(spark):
    from audit.hops.lake.columns import message_hash_column

    frame = message_frame(spark, [(i, case.key, case.value) for i, case in enumerate(DIGEST_CASES)])
    got = {
        row.group: row.hash
        for row in frame.select("group", message_hash_column("key", "value").alias("hash")).collect()
    }
    wrong = [(str(case), got[i], case.hash) for i, case in enumerate(DIGEST_CASES) if got[i] != case.hash]
    assert wrong == [], "\n".join(f"{why}: Spark {g}, the contract {e}" for why, g, e in wrong)


@pytest.mark.spark
def test_the_lakes_spark_digests(spark):
    """Per group as the lake job aggregates a window, and merged again from three parts of each group."""
    from pyspark.sql import functions as F

    from audit.hops.lake.columns import digest_sum, message_hash_column

    rows = [(i, key, value) for i, case in enumerate(DIGEST_SET_CASES) for key, value in case.messages]
    hashed = message_frame(spark, rows).withColumn("hash", message_hash_column("key", "value"))
    whole = hashed.groupBy("group").agg(digest_sum("hash").alias("digest"))
    parts = hashed.groupBy("group", F.pmod(F.xxhash64("key"), F.lit(3))).agg(digest_sum("hash").alias("part"))
    merged = parts.groupBy("group").agg(digest_sum("part").alias("merged"))
    got = {row.group: (row.digest, row.merged) for row in whole.join(merged, "group").collect()}
    expected = {i: (case.digest, case.digest) for i, case in enumerate(DIGEST_SET_CASES) if case.messages}
    assert got == expected
    assert hashed.filter(F.lit(False)).agg(digest_sum("hash")).first()[0] == digest.EMPTY_DIGEST


@pytest.mark.spark
def test_the_lakes_spark_hash_at_every_length(spark):
    """Keys and values of 0 to 80 bytes: XXH64's stripes of 32 bytes, its 8- and 4-byte steps and its tail."""
    from audit.hops.lake.columns import message_hash_column

    rows = [(n, bytes(range(n)), bytes(range(255, 255 - n // 2, -1))) for n in range(81)]
    frame = message_frame(spark, rows).select("group", message_hash_column("key", "value").alias("hash"))
    got = {row.group: row.hash for row in frame.collect()}
    assert got == {n: digest.message_hash(key, value) for n, key, value in rows}
