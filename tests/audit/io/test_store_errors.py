"""Failures of the lake's object store, one line each: through the CLI against the real S3-compatible store the tests
start (a missing bucket, no credentials) and a port nobody listens on, from Spark's S3A, and from the raw texts of
each engine."""

from __future__ import annotations

import uuid

import pytest

from audit.cli.main import main
from audit.contract.errors import JobError
from audit.io.lake import Lake
from audit.io.store_errors import store_failure
from audit.local.processes import free_port
from audit.settings import Settings
from audit.settings.storage import StorageSettings
from tests.conftest import cache_dir

NO_BUCKET = "s3a://no-such-bucket/lake"
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
AWS_VARIABLES += ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION")


def lake_on(root: str, endpoint: str, key: str = "", secret: str = "") -> Lake:
    storage = StorageSettings(endpoint=endpoint, access_key_id=key, secret_access_key=secret)
    return Lake.from_settings(Settings(lake_path=root, storage=storage), env={})


def run_kaudit(command: str, tmp_path, monkeypatch, capsys, *, endpoint: str, key: str, secret: str) -> str:
    """`kaudit <command>` on `s3://no-such-bucket/lake` with the store reached the AWS way: its exit code must be 2;
    its stderr."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    if key:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    config = tmp_path / f"{command}.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nlake_path = "s3://no-such-bucket/lake"\n')
    capsys.readouterr()
    assert main(["--config", str(config), command]) == 2
    return capsys.readouterr().err


def assert_one_line(err: str, cause: str) -> None:
    assert err == f"kaudit: error: the lake {NO_BUCKET}: {cause}\n", err
    assert "\x1b[" not in err and "<?xml" not in err


@pytest.mark.parametrize("command", ["ui", "reconcile", "lake", "alert"])
def test_a_missing_bucket_is_one_line_naming_the_lake_and_the_bucket(
    command, object_store, tmp_path, monkeypatch, capsys
):
    store = object_store
    err = run_kaudit(
        command, tmp_path, monkeypatch, capsys, endpoint=store.endpoint, key="kaudit", secret=store.secret_access_key
    )
    assert_one_line(err, "bucket no-such-bucket does not exist")


@pytest.mark.parametrize("command", ["ui", "reconcile"])
def test_no_credentials_is_one_line_naming_the_lake(command, object_store, tmp_path, monkeypatch, capsys):
    err = run_kaudit(command, tmp_path, monkeypatch, capsys, endpoint=object_store.endpoint, key="", secret="")
    assert err.startswith(f"kaudit: error: the lake {NO_BUCKET}: no credentials found"), err
    assert err.count("\n") == 1 and "\x1b[" not in err and "<?xml" not in err


@pytest.mark.parametrize("command", ["ui", "lake"])
def test_an_endpoint_nobody_listens_on_is_one_line_naming_it(command, tmp_path, monkeypatch, capsys):
    endpoint = f"http://127.0.0.1:{free_port()}"
    err = run_kaudit(command, tmp_path, monkeypatch, capsys, endpoint=endpoint, key="kaudit", secret="secret")
    assert_one_line(err, f"endpoint {endpoint} unreachable")


@pytest.mark.spark
def test_spark_s3a_failures_are_one_line_too(spark, object_store):
    """A Delta read through S3A of a missing bucket, of a bucket behind a closed port and of one without
    credentials (per-bucket S3A settings, so the suite's session keeps reaching the store)."""
    from audit.io.spark import spark_session

    unreachable, without_keys = f"unreachable-{uuid.uuid4().hex[:8]}", f"no-keys-{uuid.uuid4().hex[:8]}"
    closed = f"http://127.0.0.1:{free_port()}"
    bucket_conf = "spark.hadoop.fs.s3a.bucket."
    conf = {
        **object_store.spark_conf(),
        f"{bucket_conf}{unreachable}.endpoint": closed,
        f"{bucket_conf}{unreachable}.attempts.maximum": "1",
        f"{bucket_conf}{unreachable}.retry.limit": "1",
        f"{bucket_conf}{without_keys}.aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    }
    session = spark_session(app_name="kaudit-tests", cache_dir=cache_dir(), conf=conf)
    key, secret = object_store.access_key_id, object_store.secret_access_key
    cases = [
        (lake_on(NO_BUCKET, object_store.endpoint, key, secret), "bucket no-such-bucket does not exist"),
        (lake_on(f"s3a://{unreachable}/lake", closed, key, secret), f"endpoint {closed} unreachable"),
        (lake_on(f"s3a://{without_keys}/lake", object_store.endpoint), "no credentials found"),
    ]
    for lake, cause in cases:
        with pytest.raises(Exception) as raised:
            session.read.format("delta").load(lake.path("completeness")).collect()
        failure = store_failure(lake, raised.value)
        assert failure is not None and str(failure).startswith(f"the lake {lake}: {cause}"), (failure, raised.value)
        wrapped = JobError(f"lake job failed: {raised.value}")  # as the lake job reports its stream's failure
        assert str(store_failure(lake, wrapped)) == str(failure)


DELTA_RS_NO_BUCKET = (
    "Kernel error -> Generic S3 error\n   \x1b[31m↳\x1b[0m Error performing list request\n   \x1b[31m↳\x1b[0m 404 Not "
    'Found\n   \x1b[31m↳\x1b[0m <?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code><Message>The '
    "specified bucket does not exist</Message></Error>"
)


def test_the_raw_texts_of_each_engine_give_the_cause_and_other_errors_none():
    lake = lake_on("s3://bucket/lake", "http://127.0.0.1:9000", "key", "secret")
    assert (
        str(store_failure(lake, OSError(DELTA_RS_NO_BUCKET)))
        == "the lake s3a://bucket/lake: bucket bucket does not exist"
    )
    slow_down = (
        "Generic S3 error\n \x1b[31m↳\x1b[0m 503\n<Error><Code>SlowDown</Code><Message>Reduce your rate</Message>"
    )
    assert (
        str(store_failure(lake, OSError(slow_down)))
        == "the lake s3a://bucket/lake: object store error: SlowDown Reduce your rate"
    )
    refused = "org.apache.hadoop.fs.s3a.AWSBadRequestException: InvalidAccessKeyId: The key is not known"
    assert "access denied" in str(store_failure(lake, RuntimeError(refused)))
    try:
        raise ValueError("a bug of ours") from OSError("Generic S3 error: Connection refused (os error 111)")
    except ValueError as chained:
        assert (
            str(store_failure(lake, chained))
            == "the lake s3a://bucket/lake: endpoint http://127.0.0.1:9000 unreachable"
        )
    assert store_failure(lake, ValueError("no kafka-audit tables at s3a://bucket/lake")) is None
    assert store_failure(Lake.of("/tmp/lake"), OSError(DELTA_RS_NO_BUCKET)) is None  # a local lake has no store
