"""The Lake: one root, one set of storage settings, translated once for Spark and for deltalake."""

from __future__ import annotations

import pytest

from audit.cli.main import main
from audit.contract.errors import LakeError
from audit.io.lake import Lake, normalized_root
from audit.settings import Settings, load_settings
from audit.settings.storage import StorageSettings

S3A = "spark.hadoop.fs.s3a."


def lake(path: str, env: dict[str, str] | None = None, **storage) -> Lake:
    settings = Settings(lake_path=path, storage=StorageSettings(**storage))
    return Lake.from_settings(settings, env=env or {})


@pytest.mark.parametrize(
    "configured, root",
    [
        ("s3://bucket/audit", "s3a://bucket/audit"),
        ("s3a://bucket/audit/", "s3a://bucket/audit"),
        ("s3a://bucket", "s3a://bucket"),
    ],
)
def test_either_s3_scheme_is_one_root_spark_reads_as_s3a_and_deltalake_as_s3(configured, root):
    found = lake(configured)
    assert found.root == root
    assert found.path("completeness") == f"{root}/completeness"
    assert found.uri("completeness") == f"s3://{root.removeprefix('s3a://')}/completeness"


def test_a_local_root_is_absolute_and_its_tables_need_no_storage_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = Lake.from_settings(Settings(lake_path="lake"), env={"AWS_ACCESS_KEY_ID": "ignored"})
    assert found.root == str(tmp_path / "lake")
    assert found.storage_options() is None and found.spark_conf() == {}
    assert Lake.from_settings(Settings(state_dir=tmp_path / "s"), env={}).root == str(tmp_path / "s" / "lake")


@pytest.mark.parametrize("root", ["s3://", "s3a:///", "hdfs://namenode/lake", "gs://bucket/lake"])
def test_a_root_that_is_no_lake_is_refused_naming_it(root):
    with pytest.raises(LakeError, match="s3a://bucket|only local folders"):
        normalized_root(root)


def test_the_aws_conventions_alone_reach_a_custom_endpoint_path_style():
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_REGION": "eu-west-3",
        "AWS_ACCESS_KEY_ID": "id-from-env",
        "AWS_SECRET_ACCESS_KEY": "secret-from-env",
    }
    found = lake("s3://bucket/audit", env)
    options = found.storage_options()
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8333"
    assert options["AWS_ALLOW_HTTP"] == "true"
    assert options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false", "a custom endpoint implies path style"
    assert options["AWS_REGION"] == "eu-west-3"
    assert options["AWS_ACCESS_KEY_ID"] == "id-from-env" and options["AWS_SECRET_ACCESS_KEY"] == "secret-from-env"
    assert options["AWS_CONDITIONAL_PUT"] == "etag", "commits are conditional puts"
    conf = found.spark_conf()
    assert conf[f"{S3A}endpoint"] == "http://127.0.0.1:8333"
    assert conf[f"{S3A}connection.ssl.enabled"] == "false"
    assert conf[f"{S3A}path.style.access"] == "true"
    assert conf[f"{S3A}endpoint.region"] == "eu-west-3"
    assert conf[f"{S3A}access.key"] == "id-from-env" and conf[f"{S3A}secret.key"] == "secret-from-env"
    assert conf[f"{S3A}aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert conf["spark.hadoop.fs.s3.impl"].endswith("S3AFileSystem"), "s3:// paths go through S3A too"


def test_settings_win_over_the_aws_variables_and_temporary_credentials_pick_their_provider():
    env = {"AWS_ENDPOINT_URL": "http://elsewhere:1", "AWS_ACCESS_KEY_ID": "env-id", "AWS_REGION": "env-region"}
    found = lake(
        "s3a://bucket",
        env,
        endpoint="https://store.example:9000",
        region="ap-south-1",
        access_key_id="file-id",
        secret_access_key="file-secret",
        session_token="file-token",
    )
    conf = found.spark_conf()
    assert conf[f"{S3A}endpoint"] == "https://store.example:9000"
    assert conf[f"{S3A}connection.ssl.enabled"] == "true"
    assert conf[f"{S3A}access.key"] == "file-id" and conf[f"{S3A}session.token"] == "file-token"
    assert conf[f"{S3A}aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert found.storage_options()["AWS_SESSION_TOKEN"] == "file-token"
    assert found.storage_options()["AWS_REGION"] == "ap-south-1"


def test_with_no_key_at_all_each_engine_keeps_its_own_credential_chain_and_aws_itself():
    found = lake("s3://bucket/audit")
    assert not any(key.startswith("AWS_ACCESS_KEY") or key == "AWS_ENDPOINT_URL" for key in found.storage_options())
    conf = found.spark_conf()
    assert f"{S3A}aws.credentials.provider" not in conf and f"{S3A}endpoint" not in conf
    assert conf[f"{S3A}path.style.access"] == "false"
    assert found.storage_options()["AWS_REGION"] == "us-east-1"


def test_tls_verification_off_reaches_deltalake():
    assert lake("s3://b", verify_tls=False).storage_options()["AWS_ALLOW_INVALID_CERTIFICATES"] == "true"
    assert "AWS_ALLOW_INVALID_CERTIFICATES" not in lake("s3://b").storage_options()


def test_storage_keys_come_from_kaudit_variables_and_the_secret_never_prints(capsys, tmp_path):
    env = {
        "KAUDIT_STORAGE_ENDPOINT": "http://127.0.0.1:8333",
        "KAUDIT_STORAGE_SECRET_ACCESS_KEY": "hunter2-secret",
        "KAUDIT_STORAGE_ACCESS_KEY_ID": "kaudit-id",
        "KAUDIT_SPARK_MASTER": "spark://127.0.0.1:7077",
        "KAUDIT_LAKE_PATH": "s3://bucket/audit",
    }
    settings = load_settings(env=env)
    assert settings.storage.endpoint == "http://127.0.0.1:8333"
    assert settings.spark.master == "spark://127.0.0.1:7077"
    assert "hunter2-secret" not in repr(settings) and "hunter2-secret" not in str(settings.redacted())
    assert Lake.from_settings(settings, env={}).storage_options()["AWS_SECRET_ACCESS_KEY"] == "hunter2-secret"


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("endpoint", "127.0.0.1:8333", r"http\(s\) endpoint"),
        ("lease_ttl_s", 0.5, ">= 1"),
    ],
)
def test_a_bad_storage_key_is_named(key, value, named):
    from audit.contract.errors import ConfigError

    with pytest.raises(ConfigError, match=f"storage.{key}.*{named}"):
        StorageSettings(**{key: value})


# `kaudit ui` waits for the books' first run instead (tests/dashboards/test_first_run.py).
@pytest.mark.parametrize("command", [["alert"]])
def test_a_lake_the_books_never_wrote_to_exits_2_naming_it(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KAUDIT_LAKE_PATH", str(tmp_path / "typo"))
    monkeypatch.setenv("KAUDIT_STATE_DIR", str(tmp_path))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "no kafka-audit tables at" in err and str(tmp_path / "typo") in err


def test_an_empty_lake_the_books_created_is_not_missing(tmp_path):
    from audit.io import delta_io

    delta_io.ensure_tables(str(tmp_path / "lake"), ("completeness",))
    assert Lake.of(tmp_path / "lake").require_books().has_books()
    with pytest.raises(LakeError, match="is lake_path right"):
        Lake.of(tmp_path / "nothing").require_books()
