"""The object store the lake runs on in the tests (SeaweedFS on loopback): that it is a real, authenticated S3
endpoint, that its conditional writes hold when writers race (the lake's commits rely on them), that it stops
promptly, and that Spark's S3A and the deltalake package both read and write one Delta table on it."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from botocore import UNSIGNED
from botocore.exceptions import ClientError

from audit.contract.errors import HarnessError, SetupError
from audit.local.object_store import WEED_VERSION, start_object_store, weed_binary
from tests.conftest import cache_dir

pytestmark = pytest.mark.object_store

WRITERS = 3  # concurrent writers of one key in the conditional-write tests
LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it
ROUNDS = 10  # races per test: a lost race that passes once in a while still shows


def status_of(call) -> int:
    """The HTTP status of an S3 call: 200, or the status of the error it raised."""
    try:
        call()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"]
    return 200


def race(calls: list) -> list[int]:
    """Run `calls` at the same moment on their own threads (each with its own client); their statuses in order."""
    statuses: list[int] = [0] * len(calls)
    start = threading.Barrier(len(calls))

    def run(index: int) -> None:
        start.wait()
        statuses[index] = status_of(calls[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(hex address, port) of every TCP socket process `pid` listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


def test_listens_only_on_the_loopback_ports_it_was_given(object_store):
    sockets = listening_sockets(object_store.pid)
    s3_port = int(object_store.endpoint.rsplit(":", 1)[1])
    assert (LOOPBACK, s3_port) in sockets
    assert {address for address, _ in sockets} == {LOOPBACK}, sockets
    assert {port for _, port in sockets} <= set(object_store.ports), (sockets, object_store.ports)


def test_requests_need_a_valid_signature(object_store, lake_bucket):
    assert status_of(lambda: object_store.client().list_objects_v2(Bucket=lake_bucket)) == 200
    wrong_secret = replace(object_store, secret_access_key="not-the-secret", process=None)
    with pytest.raises(ClientError) as refused:
        wrong_secret.client().list_objects_v2(Bucket=lake_bucket)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    unknown_key = replace(object_store, access_key_id="somebody-else", process=None)
    assert status_of(lambda: unknown_key.client().list_objects_v2(Bucket=lake_bucket)) == 403
    anonymous = object_store.client()
    anonymous.meta.events.register_first("choose-signer.s3.*", lambda **_: UNSIGNED)
    assert status_of(lambda: anonymous.list_objects_v2(Bucket=lake_bucket)) == 403
    assert status_of(lambda: anonymous.put_object(Bucket=lake_bucket, Key="anonymous", Body=b"x")) == 403


def test_put_get_and_list(object_store, lake_bucket):
    client, prefix = object_store.client(), f"objects-{uuid.uuid4().hex}/"
    bodies = {f"{prefix}a": b"first", f"{prefix}b/c": b"second" * 1000, f"{prefix}d": b""}
    for key, body in bodies.items():
        client.put_object(Bucket=lake_bucket, Key=key, Body=body)
    for key, body in bodies.items():
        assert client.get_object(Bucket=lake_bucket, Key=key)["Body"].read() == body
    listed = client.list_objects_v2(Bucket=lake_bucket, Prefix=prefix)["Contents"]
    assert {item["Key"]: item["Size"] for item in listed} == {key: len(body) for key, body in bodies.items()}
    top = client.list_objects_v2(Bucket=lake_bucket, Prefix=prefix, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == [f"{prefix}b/"]
    assert status_of(lambda: client.get_object(Bucket=lake_bucket, Key=f"{prefix}missing")) == 404


def racing_puts(store, bucket: str, key: str, bodies: list[bytes], **condition: str) -> list[int]:
    """PUT each body to `key` at the same moment, each from its own client, with `condition` (IfNoneMatch or
    IfMatch); their statuses in order."""
    clients = [store.client() for _ in bodies]
    calls = [partial(c.put_object, Bucket=bucket, Key=key, Body=body, **condition) for c, body in zip(clients, bodies)]
    return race(calls)


def test_if_none_match_has_exactly_one_winner_among_concurrent_writers(object_store, lake_bucket):
    reader = object_store.client()
    for round_ in range(ROUNDS):
        key, bodies = f"create-once-{uuid.uuid4().hex}", [f"writer {index}".encode() for index in range(WRITERS)]
        statuses = racing_puts(object_store, lake_bucket, key, bodies, IfNoneMatch="*")
        assert statuses.count(200) == 1, (round_, statuses)
        assert set(statuses) - {200} <= {412, 409}, statuses  # S3 answers 409 to a write it found in progress
        assert reader.get_object(Bucket=lake_bucket, Key=key)["Body"].read() == bodies[statuses.index(200)]
        late = partial(reader.put_object, Bucket=lake_bucket, Key=key, Body=b"late", IfNoneMatch="*")
        assert status_of(late) == 412


def test_if_match_refuses_a_stale_etag_and_lets_one_racer_win(object_store, lake_bucket):
    client, key = object_store.client(), f"compare-and-swap-{uuid.uuid4().hex}"
    first = client.put_object(Bucket=lake_bucket, Key=key, Body=b"v1")["ETag"]
    second = client.put_object(Bucket=lake_bucket, Key=key, Body=b"v2", IfMatch=first)["ETag"]
    assert second != first
    stale = partial(client.put_object, Bucket=lake_bucket, Key=key, Body=b"v3", IfMatch=first)
    assert status_of(stale) == 412
    assert client.get_object(Bucket=lake_bucket, Key=key)["Body"].read() == b"v2"
    for round_ in range(ROUNDS):
        current = client.head_object(Bucket=lake_bucket, Key=key)["ETag"]
        bodies = [f"round {round_} writer {index}".encode() for index in range(WRITERS)]
        statuses = racing_puts(object_store, lake_bucket, key, bodies, IfMatch=current)
        assert statuses.count(200) == 1, (round_, statuses)
        assert set(statuses) - {200} <= {412, 409}, statuses
        assert client.get_object(Bucket=lake_bucket, Key=key)["Body"].read() == bodies[statuses.index(200)]


def test_stops_within_15_s_of_sigterm(tmp_path):
    store = start_object_store(tmp_path / "store", cache_dir())
    try:
        client = store.client()
        store.create_bucket("stopping")
        for index in range(20):  # data and metadata the filer flushes as it stops
            client.put_object(Bucket="stopping", Key=f"k{index}", Body=b"x" * 1000)
        assert store.process is not None
        began = time.monotonic()
        os.kill(store.pid, signal.SIGTERM)
        assert store.process.wait(timeout=15) == 0  # exited by itself, cleanly: not killed by the signal (-15)
        assert time.monotonic() - began < 15
    finally:
        store.stop()


def test_a_missing_binary_names_make_setup(tmp_path):
    with pytest.raises(SetupError, match="run `make setup`"):
        weed_binary(tmp_path)


def test_a_store_that_cannot_start_says_why(tmp_path):
    fake = tmp_path / "cache" / "bin" / f"weed-{WEED_VERSION}"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'flag provided but not defined: -s3.port' >&2\nexit 2\n")
    fake.chmod(0o755)
    with pytest.raises(HarnessError, match="(?s)exited while starting.*flag provided but not defined"):
        start_object_store(tmp_path / "store", tmp_path / "cache", timeout_s=10)


@pytest.fixture(scope="module")
def s3a_spark(spark, object_store):
    """The suite's Spark session with S3A pointed at the store, through `spark_session(conf=...)`."""
    from audit.io.spark import spark_session

    return spark_session(app_name="kaudit-tests", cache_dir=cache_dir(), conf=object_store.spark_conf())


@pytest.mark.spark
def test_spark_writes_a_delta_table_to_the_store_and_reads_it_back(s3a_spark, object_store, s3_lake):
    table = s3_lake()
    s3a_spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id INT, name STRING").write.format("delta").save(table)
    assert sorted(tuple(row) for row in s3a_spark.read.format("delta").load(table).collect()) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]
    bucket, key = table.removeprefix("s3a://").split("/", 1)
    listed = object_store.client().list_objects_v2(Bucket=bucket, Prefix=f"{key}/_delta_log/")["Contents"]
    assert f"{key}/_delta_log/00000000000000000000.json" in {item["Key"] for item in listed}


def delta_rows(table) -> list[tuple]:
    """The rows of a pyarrow table as sorted tuples, to compare with Spark's."""
    return sorted(zip(*(table.column(name).to_pylist() for name in table.column_names)))


@pytest.mark.spark
def test_deltalake_reads_and_appends_to_a_spark_table(s3a_spark, object_store, s3_lake):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table, options = s3_lake(), object_store.deltalake_options()
    s3a_spark.createDataFrame([(1, "spark"), (2, "spark")], "id INT, name STRING").write.format("delta").save(table)
    assert delta_rows(DeltaTable(table, storage_options=options).to_pyarrow_table()) == [(1, "spark"), (2, "spark")]
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    write_deltalake(
        table, pa.table({"id": [3], "name": ["rust"]}, schema=schema), mode="append", storage_options=options
    )
    assert DeltaTable(table, storage_options=options).version() == 1
    assert sorted(tuple(row) for row in s3a_spark.read.format("delta").load(table).collect()) == [
        (1, "spark"),
        (2, "spark"),
        (3, "rust"),
    ]


def test_concurrent_deltalake_appends_each_get_their_own_version(object_store, s3_lake):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table, options = s3_lake(), object_store.deltalake_options()
    write_deltalake(table, pa.table({"writer": pa.array([0], pa.int64())}), storage_options=options)
    errors: list[str] = []

    def append(writer: int) -> None:
        try:
            batch = pa.table({"writer": pa.array([writer], pa.int64())})
            write_deltalake(table, batch, mode="append", storage_options=options)
        except Exception as error:  # any failure fails the test below, with the others
            errors.append(repr(error))

    writers = range(1, WRITERS + 2)
    race([lambda writer=writer: append(writer) for writer in writers])
    assert errors == []
    result = DeltaTable(table, storage_options=options)
    assert result.version() == len(writers)  # each commit took the next version: none replaced another
    assert sorted(result.to_pyarrow_table().column("writer").to_pylist()) == [0, *writers]
