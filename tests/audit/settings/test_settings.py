"""Configuration: a TOML file, environment overrides, errors that name the key and the value."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from audit.contract.errors import ConfigError
from audit.contract.windows import MINUTES_PER_DAY
from audit.settings import (
    EXAMPLE_CONFIG,
    ClusterSettings,
    Secret,
    Settings,
    TopicSelection,
    describe,
    from_dict,
    load_settings,
)


def write(tmp_path: Path, text: str, name: str = "kaudit.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


# -- the default and the shipped example ---------------------------------------------------------


def test_built_in_default_is_the_local_hub_and_spoke():
    settings = Settings.default()
    assert settings.cluster_names == ("dc1", "dc2", "aggregate")
    assert all(c.local and c.bootstrap_servers == "" and c.client == {} for c in settings.clusters)
    assert settings.tiers == ("producer", "dc1", "dc2", "aggregate", "lake")
    assert (settings.window_minutes, settings.grace_s, settings.flush_interval_s) == (10, 300.0, 10.0)
    assert (settings.audit_topic, settings.reference_tier, settings.metrics_host) == ("_audit", "producer", "127.0.0.1")
    assert settings.topics.matches("orders")
    for internal in ("__consumer_offsets", "_audit", "_kaudit-state"):
        assert not settings.topics.matches(internal)


def test_load_without_a_file_is_the_default_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loaded = load_settings(env={})
    assert loaded.state_dir == tmp_path / ".kaudit"
    assert loaded.cache_dir == Path("~/.cache/kafka-audit").expanduser()
    assert loaded == Settings.default().replace(state_dir=loaded.state_dir, cache_dir=loaded.cache_dir)


def test_the_shipped_example_file_means_the_built_in_default():
    from_file = load_settings(EXAMPLE_CONFIG, env={})
    assert from_file.state_dir == EXAMPLE_CONFIG.parent / ".kaudit"
    assert from_file == Settings.default().replace(
        state_dir=from_file.state_dir, cache_dir=Path("~/.cache/kafka-audit").expanduser()
    )


def test_the_shipped_example_has_every_key_with_a_comment_above():
    lines = EXAMPLE_CONFIG.read_text().splitlines()
    for key, _default, text in describe():
        assert text, f"{key} has no description"
        if key in (
            "clusters",
            "topics",
            "flows",
            "smtp",
            "alerts",
            "ui",
            "storage",
            "spark",
            "maintenance",
        ) or key.startswith("alerts.routes[]."):
            continue  # tables; a route's keys are shown in a comment example
        name = key.rsplit(".", 1)[-1]
        at = [i for i, line in enumerate(lines) if re.match(rf"{re.escape(name)}\s*=", line)]
        assert at, f"{key} is not in {EXAMPLE_CONFIG.name}"
        assert lines[at[0] - 1].startswith("#"), f"{key} has no comment above it"


def test_what_config_show_prints_loads_back_as_the_same_settings(tmp_path):
    path = write(
        tmp_path,
        """
tiers = ["dc1", "lake"]
reference_tier = "dc1"
[topics]
include = ["^orders$"]
[[clusters]]
name = "dc1"
bootstrap_servers = "kafka:9092"
client = { "security.protocol" = "SSL" }
""",
    )
    for settings in (load_settings(env={}), load_settings(EXAMPLE_CONFIG, env={}), load_settings(path, env={})):
        assert from_dict(settings.redacted()) == settings


def test_every_key_is_described_with_its_default():
    rows = {key: (default, text) for key, default, text in describe()}
    assert rows["window_minutes"][0] == "10"
    assert rows["clusters[].name"][0] == "(required)"
    assert rows["clusters[].local"][0] == "true when bootstrap_servers is empty"
    assert rows["tiers"][0] == "producer, each cluster, lake"
    assert {
        "grace_s",
        "audit_topic",
        "state_dir",
        "cache_dir",
        "clusters[].client",
        "topics.include",
        "topics.exclude",
        "metrics_host",
        "flush_interval_s",
    } <= rows.keys()
    assert all(text for _default, text in rows.values())


# -- files ---------------------------------------------------------------------------------------


def test_a_file_with_clusters_security_and_topics(tmp_path):
    path = write(
        tmp_path,
        """
state_dir = "state"
cache_dir = "/opt/kaudit-cache"
window_minutes = 5
[topics]
include = ["^orders", "^clicks"]
[[clusters]]
name = "east"
bootstrap_servers = "kafka-east:9093"
client = { "security.protocol" = "SASL_SSL", "sasl.mechanism" = "SCRAM-SHA-512", "sasl.username" = "audit", "sasl.password" = "hunter2" }
[[clusters]]
name = "agg"
bootstrap_servers = "kafka-agg:9093"
""",
    )
    settings = load_settings(path, env={})
    assert settings.state_dir == tmp_path / "state" and settings.cache_dir == Path("/opt/kaudit-cache")
    east = settings.cluster("east")
    assert not east.local
    assert east.client_config() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "audit",
        "sasl.password": "hunter2",
    }
    assert east.client["sasl.password"] == Secret("hunter2") and east.client["sasl.username"] == "audit"
    assert settings.topics.matches("orders.v2") and not settings.topics.matches("payments")
    assert settings.tiers == ("producer", "east", "agg", "lake")


def test_client_settings_written_as_nested_toml_tables_are_dotted_keys(tmp_path):
    path = write(
        tmp_path,
        """
[[clusters]]
name = "east"
bootstrap_servers = "kafka-east:9093"
[clusters.client]
security.protocol = "SSL"
ssl.key.password = "pw"
"enable.idempotence" = true
"message.max.bytes" = 2000000
""",
    )
    cluster = load_settings(path, env={}).cluster("east")
    assert cluster.client_config() == {
        "security.protocol": "SSL",
        "ssl.key.password": "pw",
        "enable.idempotence": "true",
        "message.max.bytes": "2000000",
    }
    assert isinstance(cluster.client["ssl.key.password"], Secret)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("windw_minutes = 5", "windw_minutes: unknown key (did you mean 'window_minutes'?)"),
        ("zzz = 5", "zzz: unknown key (known: state_dir, cache_dir"),
        ("window_minutes = 7", "window_minutes: 7 does not divide a day"),
        ("window_minutes = 0", f"window_minutes: 0 is not between 1 and {MINUTES_PER_DAY}"),
        ("window_minutes = '10'", "window_minutes: expected an integer, got '10'"),
        ("window_minutes = true", "window_minutes: expected an integer, got True"),
        ("window_minutes = 10.0", "window_minutes: expected an integer, got 10.0"),
        ("grace_s = -1", "grace_s: -1 is negative"),
        ("grace_s = nan", "grace_s: nan is not a finite number"),
        ("grace_s = '5m'", "grace_s: expected a number, got '5m'"),
        ("flush_interval_s = 0", "flush_interval_s: 0 must be a finite number of seconds > 0"),
        ("flush_interval_s = inf", "flush_interval_s: inf must be a finite number"),
        ("audit_topic = 'a b'", "audit_topic: 'a b' is not a legal Kafka topic name"),
        ("audit_topic = '..'", "audit_topic: '..' is not a legal Kafka topic name"),
        ("metrics_host = ' '", "metrics_host: ' ' is empty"),
        ("state_dir = 5", "state_dir: expected a path (string), got 5"),
        ("naming = 'suffix'", "naming: 'suffix' is not a naming policy (prefix or identity)"),
        ("tiers = []", "tiers: [] is empty"),
        ("tiers = 'producer'", "tiers: expected a list of strings, got 'producer'"),
        ("tiers = ['producer', 3]", "tiers[1]: expected a string, got 3"),
        ("tiers = ['producer', 'dc9']", "tiers[1]: 'dc9' is neither producer, lake nor a configured cluster"),
        ("tiers = ['producer', 'dc1', 'producer']", "tiers[2]: 'producer' is named twice"),
        ("reference_tier = 'nowhere'", "reference_tier: 'nowhere' is not one of the tiers"),
        ("tiers = ['dc1', 'lake']", "reference_tier: 'producer' is not one of the tiers ['dc1', 'lake']"),
        ("topics = 'x'", "topics: expected a table, got 'x'"),
        ("[topics]\ninclude = ['(']", "topics.include[0]: '(' is not a valid regex"),
        ("[topics]\ninclude = ['ok', 'a{99999999999}']", "topics.include[1]: 'a{99999999999}' is not a valid regex"),
        ("[topics]\nexclude = ['[']", "topics.exclude[0]: '[' is not a valid regex"),
        ("[topics]\ninclude = []", "topics.include: [] is empty"),
        ("[topics]\ninclud = ['x']", "topics.includ: unknown key (did you mean 'include'?)"),
        ("clusters = 3", "clusters: expected a list of tables ([[clusters]]), got 3"),
        ("clusters = []", "clusters: [] is empty"),
        ("[clusters]\nname = 'a'", "clusters: expected a list of tables ([[clusters]]), got {'name': 'a'}"),
        ("clusters = ['dc1']", "clusters[0]: expected a table, got 'dc1'"),
        ("[[clusters]]\nbootstrap_servers = 'x:1'", "clusters[0].name: missing (required)"),
        ("[[clusters]]\nname = 'a b'", "clusters[0].name: 'a b' is not a name"),
        ("[[clusters]]\nname = 7", "clusters[0].name: expected a string, got 7"),
        ("[[clusters]]\nname = 'lake'", "clusters[0].name: 'lake' is reserved for a tier"),
        ("[[clusters]]\nname = 'a'\n[[clusters]]\nname = 'a'", "clusters[1].name: 'a' is used twice"),
        ("[[clusters]]\nname = 'dc1'\n[[clusters]]\nname = 'DC1'", "clusters[1].name: 'DC1' clashes with 'dc1'"),
        (
            "[[clusters]]\nname = 'a'\nbootstrap = 'x'",
            "clusters[0].bootstrap: unknown key (did you mean 'bootstrap_servers'?)",
        ),
        ("[[clusters]]\nname = 'a'\nbootstrap_servers = ' '", "clusters[0].bootstrap_servers: ' ' is blank"),
        ("[[clusters]]\nname = 'a'\nlocal = 'yes'", "clusters[0].local: expected true or false, got 'yes'"),
        ("[[clusters]]\nname = 'a'\nlocal = false", "clusters[0].local: false needs bootstrap_servers"),
        (
            "[[clusters]]\nname = 'a'\nlocal = true\nbootstrap_servers = 'k:9092'",
            "clusters[0].bootstrap_servers: 'k:9092' is set but local = true",
        ),
        (
            "[[clusters]]\nname = 'a'\nclient = 'x'",
            "clusters[0].client: expected a table of librdkafka settings, got 'x'",
        ),
        (
            "[[clusters]]\nname = 'a'\nclient = { 'acks' = [1] }",
            "clusters[0].client.acks: expected a string, a number or true/false, got [1]",
        ),
        (
            "[[clusters]]\nname = 'a'\nclient = { 'bootstrap.servers' = 'k:1' }",
            "clusters[0].client.bootstrap.servers: set the cluster's bootstrap_servers instead",
        ),
        (
            "[[clusters]]\nname = 'a'\nclient = { 'sasl.password' = 'p', sasl = { password = 'q' } }",
            "clusters[0].client.sasl.password: is set twice",
        ),
    ],
)
def test_each_bad_value_is_named_with_its_key_and_file(tmp_path, text, message):
    path = write(tmp_path, text)
    error = error_of(load_settings, path, env={})
    assert error.startswith(f"{path}: ") and message in error


def test_toml_syntax_errors_give_the_file_line_and_column(tmp_path):
    path = write(tmp_path, "audit_topic = '_audit'\nwindow_minutes = \n")
    assert error_of(load_settings, path, env={}) == f"{path}:2:18: not valid TOML: Invalid value"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "config file {path} does not exist"),
        (b"\xff\xfe", "config file {path} is not UTF-8 text"),
        ("dir", "config file {path} cannot be read"),
    ],
)
def test_unreadable_files_are_named(tmp_path, content, message):
    path = tmp_path / "kaudit.toml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    assert message.format(path=path) in error_of(load_settings, path, env={})


def test_the_config_file_may_come_from_kaudit_config(tmp_path):
    path = write(tmp_path, "window_minutes = 30\n")
    assert load_settings(env={"KAUDIT_CONFIG": str(path)}).window_minutes == 30
    assert load_settings(write(tmp_path, "", "other.toml"), env={"KAUDIT_CONFIG": str(path)}).window_minutes == 10
    missing = tmp_path / "nope.toml"
    assert (
        error_of(load_settings, env={"KAUDIT_CONFIG": str(missing)})
        == f"config file {missing} (from KAUDIT_CONFIG) does not exist"
    )


def test_unknown_cluster_lists_the_known_ones():
    assert error_of(Settings.default().cluster, "dc9") == "cluster 'dc9' is not configured (known: dc1, dc2, aggregate)"


# -- direct construction follows the same rules ---------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Settings(window_minutes="10"), "window_minutes: expected an integer, got '10'"),
        (lambda: Settings(tiers=["producer", "nowhere"]), "tiers[1]: 'nowhere' is neither producer"),
        (lambda: Settings(clusters=[]), "clusters: [] is empty"),
        (lambda: Settings(clusters=["dc1"]), "clusters[0]: expected a cluster table, got 'dc1'"),
        (lambda: Settings(topics={"include": []}), "topics: expected a table"),
        (lambda: TopicSelection(include="orders"), "topics.include: expected a list of strings, got 'orders'"),
        (lambda: TopicSelection(include=["("]), "topics.include[0]: '(' is not a valid regex"),
        (lambda: ClusterSettings(name="a b"), "clusters[].name: 'a b' is not a name"),
        (lambda: ClusterSettings(name="a", client={"sasl.password": ["x"]}), "clusters[].client.sasl.password"),
    ],
)
def test_direct_construction_is_checked_too(build, message):
    assert message in error_of(build)


def test_direct_construction_converts_lists_and_wraps_secrets():
    settings = Settings(
        clusters=[ClusterSettings(name="a", client={"sasl.password": "pw", "linger.ms": 5})],
        tiers=["producer", "a"],
        state_dir="s",
    )
    assert settings.tiers == ("producer", "a") and settings.state_dir == Path("s")
    assert settings.cluster("a").client == {"sasl.password": Secret("pw"), "linger.ms": "5"}
    assert hash(settings) == hash(settings.replace())


# -- secrets ---------------------------------------------------------------------------------------


def test_secret_never_prints_and_compares_by_value():
    secret = Secret("hunter2")
    assert repr(secret) == "Secret('****')" and str(secret) == "****" and f"{secret}" == "****"
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2") and secret != Secret("other") and secret != "hunter2"
    assert len({secret, Secret("hunter2")}) == 1


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("ssl.keystore.password", True),
        ("sasl.oauthbearer.client.secret", True),
        ("ssl.key.pem", True),
        ("sasl.oauthbearer.config", True),
        ("SASL.PASSWORD", True),
        ("sasl.username", False),
        ("ssl.ca.location", False),
        ("ssl.certificate.pem", False),
        ("security.protocol", False),
    ],
)
def test_which_client_settings_are_secret(key, secret):
    cluster = ClusterSettings(name="a", bootstrap_servers="k:1", client={key: "VALUE-123"})
    assert isinstance(cluster.client[key], Secret) is secret
    assert cluster.client_config() == {key: "VALUE-123"}
    if secret:
        assert "VALUE-123" not in repr(cluster) + str(cluster) + str(Settings(clusters=[cluster]).redacted())


def test_secrets_appear_nowhere_but_the_client_config(tmp_path):
    path = write(
        tmp_path,
        """
[[clusters]]
name = "dc1"
bootstrap_servers = "k:9092"
client = { "sasl.password" = "from-file", "ssl.key.pem" = "-----BEGIN KEY-----" }
""",
    )
    settings = load_settings(path, env={"KAUDIT_CLUSTER_DC1_CLIENT__SASL__OAUTHBEARER__CLIENT__SECRET": "from-env"})
    printed = repr(settings) + str(settings) + str(settings.redacted()) + str(describe())
    for value in ("from-file", "BEGIN KEY", "from-env"):
        assert value not in printed
    assert settings.redacted()["clusters"][0]["client"] == {
        "sasl.password": "****",
        "ssl.key.pem": "****",
        "sasl.oauthbearer.client.secret": "****",
    }
    assert settings.cluster("dc1").client_config()["sasl.oauthbearer.client.secret"] == "from-env"


def test_errors_about_a_secret_do_not_show_its_value(tmp_path):
    path = write(tmp_path, "[[clusters]]\nname = 'a'\nclient = { 'sasl.password' = ['hunter2'] }\n")
    message = error_of(load_settings, path, env={})
    assert "clusters[0].client.sasl.password: expected a string" in message and "hunter2" not in message


# -- environment overrides -------------------------------------------------------------------------


def test_environment_overrides_every_scalar_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {
        "KAUDIT_WINDOW_MINUTES": "5",
        "KAUDIT_GRACE_S": "60",
        "KAUDIT_AUDIT_TOPIC": "audit.v2",
        "KAUDIT_STATE_DIR": "run",
        "KAUDIT_CACHE_DIR": "/var/cache/k",
        "KAUDIT_FLUSH_INTERVAL_S": "0.5",
        "KAUDIT_METRICS_HOST": "0.0.0.0",
        "KAUDIT_REFERENCE_TIER": "dc1",
        "KAUDIT_NAMING": "identity",
        "KAUDIT_LOG_LEVEL": "DEBUG",
        "KAUDIT_LOG_FORMAT": "json",
        "KAUDIT_SPARK_MASTER": "local[2]",
        "PATH": "/bin",
    }
    settings = load_settings(write(tmp_path / "..", "window_minutes = 15\n", "elsewhere.toml"), env=env)
    assert (settings.window_minutes, settings.grace_s, settings.audit_topic, settings.flush_interval_s) == (
        5,
        60.0,
        "audit.v2",
        0.5,
    )
    assert (settings.metrics_host, settings.reference_tier, settings.naming) == ("0.0.0.0", "dc1", "identity")
    # relative paths from the environment are relative to the working directory, not to the file
    assert settings.state_dir == tmp_path / "run" and settings.cache_dir == Path("/var/cache/k")


def test_environment_overrides_per_cluster(tmp_path):
    path = write(
        tmp_path,
        """
[[clusters]]
name = "dc1"
[clusters.client]
sasl.password = "old"
sasl.username = "audit"
[[clusters]]
name = "dc1_b"
[[clusters]]
name = "east-1"
bootstrap_servers = "east:9092"
""",
    )
    env = {
        "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS": "far:9092",
        "KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD": "s3cret",
        "KAUDIT_CLUSTER_DC1_CLIENT__SECURITY__PROTOCOL": "SASL_SSL",
        "KAUDIT_CLUSTER_DC1_CLIENT__LOG_LEVEL": "3",
        "KAUDIT_CLUSTER_DC1_B_BOOTSTRAP_SERVERS": "b:9092",
        "KAUDIT_CLUSTER_EAST_1_LOCAL": "false",
    }
    settings = load_settings(path, env=env)
    dc1 = settings.cluster("dc1")
    assert dc1.bootstrap_servers == "far:9092" and not dc1.local
    assert dc1.client_config() == {
        "sasl.password": "s3cret",
        "sasl.username": "audit",
        "security.protocol": "SASL_SSL",
        "log_level": "3",
    }
    assert settings.cluster("dc1_b").bootstrap_servers == "b:9092"
    assert not settings.cluster("east-1").local
    assert (
        load_settings(env={"KAUDIT_CLUSTER_AGGREGATE_BOOTSTRAP_SERVERS": "agg:1"})
        .cluster("aggregate")
        .bootstrap_servers
        == "agg:1"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"KAUDIT_WINDOW_MINUTS": "5"},
            "KAUDIT_WINDOW_MINUTS: not a configuration variable (did you mean KAUDIT_WINDOW_MINUTES?)",
        ),
        ({"KAUDIT_CONFIGG": "x.toml"}, "KAUDIT_CONFIGG: not a configuration variable (did you mean KAUDIT_CONFIG?)"),
        (
            {"KAUDIT_TIERS": "producer"},
            "KAUDIT_TIERS: not a configuration variable (tiers can be set in the config file only)",
        ),
        (
            {"KAUDIT_CLUSTERS_DC1_LOCAL": "true"},
            "KAUDIT_CLUSTERS_DC1_LOCAL: not a configuration variable (did you mean KAUDIT_CLUSTER_DC1_LOCAL?)",
        ),
        ({"KAUDIT_XYZZY": "1"}, "KAUDIT_XYZZY: not a configuration variable (known: KAUDIT_STATE_DIR"),
        ({"KAUDIT_WINDOW_MINUTES": "ten"}, "KAUDIT_WINDOW_MINUTES: 'ten' is not an integer (window_minutes)"),
        ({"KAUDIT_WINDOW_MINUTES": "5.0"}, "KAUDIT_WINDOW_MINUTES: '5.0' is not an integer (window_minutes)"),
        ({"KAUDIT_GRACE_S": "5m"}, "KAUDIT_GRACE_S: '5m' is not a number (grace_s)"),
        ({"KAUDIT_WINDOW_MINUTES": "7"}, "KAUDIT_WINDOW_MINUTES: window_minutes: 7 does not divide a day"),
        ({"KAUDIT_GRACE_S": "-5"}, "KAUDIT_GRACE_S: grace_s: -5 is negative"),
        ({"KAUDIT_FLUSH_INTERVAL_S": "nan"}, "KAUDIT_FLUSH_INTERVAL_S: flush_interval_s: nan must be a finite number"),
        ({"KAUDIT_AUDIT_TOPIC": ""}, "KAUDIT_AUDIT_TOPIC: audit_topic: '' is not a legal Kafka topic name"),
        ({"KAUDIT_REFERENCE_TIER": "dc9"}, "KAUDIT_REFERENCE_TIER: reference_tier: 'dc9' is not one of the tiers"),
        (
            {"KAUDIT_CLUSTER_DC9_BOOTSTRAP_SERVERS": "x"},
            "KAUDIT_CLUSTER_DC9_BOOTSTRAP_SERVERS: no configured cluster matches (known: dc1, dc2, aggregate)",
        ),
        ({"KAUDIT_CLUSTER_DC1_PORT": "1"}, "KAUDIT_CLUSTER_DC1_PORT: 'port' is not a cluster setting"),
        ({"KAUDIT_CLUSTER_DC1_CLIENT__": "1"}, "KAUDIT_CLUSTER_DC1_CLIENT__: 'client__' is not a cluster setting"),
        (
            {"KAUDIT_CLUSTER_DC1_LOCAL": "maybe"},
            "KAUDIT_CLUSTER_DC1_LOCAL: 'maybe' is not true or false (clusters[0].local)",
        ),
        (
            {"KAUDIT_CLUSTER_DC1_LOCAL": "false"},
            "KAUDIT_CLUSTER_DC1_LOCAL: clusters[0].local: false needs bootstrap_servers",
        ),
        (
            {"KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS": " "},
            "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS: clusters[0].bootstrap_servers: ' ' is blank",
        ),
        (
            {"KAUDIT_CLUSTER_DC1_CLIENT__BOOTSTRAP__SERVERS": "k:1"},
            "KAUDIT_CLUSTER_DC1_CLIENT__BOOTSTRAP__SERVERS: clusters[0].client.bootstrap.servers: set the cluster's",
        ),
    ],
)
def test_environment_errors_name_the_variable(env, message):
    assert message in error_of(load_settings, env=env)


@pytest.mark.parametrize("text", [" 5 ", "+5", "5\n", "5\x1f", "\x1c5"])
def test_an_integer_variable_may_be_padded_with_what_python_calls_whitespace(text):
    """`\\s` matches \\x1f around the digits, and int() does not take it (a ValueError): the text is
    stripped (str.strip) before it is matched."""
    assert load_settings(env={"KAUDIT_WINDOW_MINUTES": text}).window_minutes == 5


def test_an_environment_error_on_a_file_value_names_the_file(tmp_path):
    path = write(tmp_path, "clusters = 3\n")
    assert (
        error_of(load_settings, path, env={"KAUDIT_CLUSTER_DC1_LOCAL": "true"})
        == f"{path}: clusters: expected a list of tables ([[clusters]]), got 3"
    )


def test_os_environ_is_read_when_no_env_is_given(monkeypatch):
    monkeypatch.setenv("KAUDIT_GRACE_S", "42")
    assert load_settings().grace_s == 42.0
    monkeypatch.setenv("KAUDIT_GRACE", "42")
    assert "KAUDIT_GRACE: not a configuration variable" in error_of(load_settings)


# -- nothing but ConfigError, whatever comes in ----------------------------------------------------

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
top_keys = st.sampled_from(
    [
        "window_minutes",
        "grace_s",
        "flush_interval_s",
        "clusters",
        "topics",
        "tiers",
        "audit_topic",
        "state_dir",
        "cache_dir",
        "reference_tier",
        "naming",
        "metrics_host",
        "unknown",
    ]
)
cluster_table = st.fixed_dictionaries(
    {"name": st.sampled_from(["dc1", "agg", "a-b", "A_B", "lake", ""]) | st.text(max_size=6)},
    optional={
        "bootstrap_servers": st.text(max_size=6) | junk,
        "local": st.booleans() | junk,
        "client": st.dictionaries(
            st.sampled_from(["sasl.password", "acks", "sasl"]) | st.text(max_size=6), junk, max_size=3
        )
        | junk,
    },
)
documents = st.dictionaries(top_keys, junk, max_size=4) | st.fixed_dictionaries(
    {"clusters": st.lists(cluster_table, max_size=3)},
    optional={
        "tiers": st.lists(st.sampled_from(["producer", "lake", "dc1", "agg", "zz"]), max_size=4),
        "reference_tier": st.sampled_from(["producer", "dc1", "lake"]),
        "topics": st.fixed_dictionaries(
            {}, optional={"include": st.lists(st.text(max_size=6), max_size=2), "exclude": junk}
        ),
    },
)
env_names = st.sampled_from(
    [
        "KAUDIT_WINDOW_MINUTES",
        "KAUDIT_GRACE_S",
        "KAUDIT_STATE_DIR",
        "KAUDIT_AUDIT_TOPIC",
        "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS",
        "KAUDIT_CLUSTER_DC1_LOCAL",
        "KAUDIT_CLUSTER_AGG_CLIENT__SASL__PASSWORD",
        "KAUDIT_CLUSTER_A_B_CLIENT__ACKS",
        "KAUDIT_LOG_LEVEL",
        "OTHER",
    ]
) | st.text(max_size=12).map(lambda s: "KAUDIT_" + s)


@hypothesis_settings(max_examples=300)
@given(documents, st.dictionaries(env_names, st.text(max_size=8), max_size=3))
def test_junk_either_loads_or_raises_config_error(raw, env):
    try:
        from_dict(raw)
    except ConfigError:
        pass
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "junk.toml"
        path.write_text(_as_toml(raw))
        try:
            load_settings(path, env=env)
        except ConfigError:
            pass


@given(st.text(max_size=80))
def test_any_text_as_a_file_loads_or_raises_config_error(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "junk.toml"
        path.write_text(text, errors="surrogatepass")
        try:
            load_settings(path, env={})
        except ConfigError:
            pass


def _as_toml(raw) -> str:
    """A rough TOML rendering of a junk document (JSON scalars are close enough; bad ones are syntax errors)."""
    import json

    def value(item):
        if isinstance(item, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(v)}" for k, v in item.items()) + "}"
        if isinstance(item, list):
            return "[" + ", ".join(value(v) for v in item) + "]"
        if isinstance(item, bool):
            return "true" if item else "false"
        if item is None:
            return '""'
        return json.dumps(item)

    return "\n".join(f"{json.dumps(k)} = {value(v)}" for k, v in raw.items()) + "\n"
