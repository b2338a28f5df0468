"""Configuration: a TOML file, environment overrides, errors that name the key and the value."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.errors import ConfigError
from audit.settings import Secret, Settings, describe, from_dict, load_settings

EXAMPLE = Path(__file__).parents[2] / "audit" / "default.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kaudit.toml"
    path.write_text(text)
    return path


def test_built_in_default_is_the_local_hub_and_spoke():
    settings = load_settings(env={})
    assert [c.name for c in settings.clusters] == ["dc1", "dc2", "aggregate"]
    assert all(c.local for c in settings.clusters)
    assert settings.tiers == ("producer", "dc1", "dc2", "aggregate", "lake")
    assert (settings.window_minutes, settings.audit_topic, settings.reference_tier) == (10, "_audit", "producer")
    assert settings.topics.matches("orders") and not settings.topics.matches("__consumer_offsets")


def test_the_shipped_example_file_means_the_built_in_default():
    from_file = load_settings(EXAMPLE, env={})
    default = load_settings(env={})
    assert from_file.redacted() | {"state_dir": None} == default.redacted() | {"state_dir": None}
    assert from_file.state_dir == EXAMPLE.parent / ".kaudit"


def test_a_file_with_clusters_security_and_topics(tmp_path):
    path = write(tmp_path, """
state_dir = "state"
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
""")
    settings = load_settings(path, env={})
    assert settings.state_dir == tmp_path / "state"
    east = settings.cluster("east")
    assert not east.local and east.client_config()["sasl.password"] == "hunter2"
    assert isinstance(east.client["sasl.password"], Secret)
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.redacted())
    assert settings.topics.matches("orders.v2") and not settings.topics.matches("payments")
    assert settings.tiers == ("producer", "east", "agg", "lake")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("windw_minutes = 5", "windw_minutes: unknown key (did you mean 'window_minutes'?)"),
        ("window_minutes = 7", "window_minutes: 7 does not divide a day"),
        ("window_minutes = '10'", "window_minutes: expected an integer, got '10'"),
        ("window_minutes = true", "window_minutes: expected an integer, got True"),
        ("grace_s = -1", "grace_s: -1.0 is negative"),
        ("flush_interval_s = 0", "flush_interval_s: 0.0 must be positive"),
        ("audit_topic = 'a b'", "audit_topic: 'a b' is not a legal Kafka topic name"),
        ("reference_tier = 'nowhere'", "reference_tier: 'nowhere' is not one of the tiers"),
        ("tiers = ['producer', 'dc9']", "tiers[1]: 'dc9' is neither producer, lake nor a configured cluster"),
        ("[topics]\ninclude = ['(']", "topics.include[0]: '(' is not a valid regex"),
        ("[topics]\ninclud = ['x']", "topics.includ: unknown key (did you mean 'include'?)"),
        ("[[clusters]]\nbootstrap_servers = 'x:1'", "clusters[0].name: missing"),
        ("[[clusters]]\nname = 'a b'", "clusters[0].name: 'a b' is not a name"),
        ("[[clusters]]\nname = 'lake'", "clusters[0].name: 'lake' is reserved for a tier"),
        ("[[clusters]]\nname = 'a'\n[[clusters]]\nname = 'a'", "clusters: name 'a' is used twice"),
        ("[[clusters]]\nname = 'a'\nbootstrap = 'x'", "clusters[0].bootstrap: unknown key (did you mean 'bootstrap_servers'?)"),
        ("[[clusters]]\nname = 'a'\nclient = { 'acks' = [1] }", "clusters[0].client.acks: expected a string"),
        ("clusters = 3", "clusters: expected a list of tables"),
        ("window_minutes = ", "not valid TOML"),
    ],
)
def test_each_bad_value_is_named(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), env={})
    assert message in str(caught.value)


def test_environment_overrides_and_their_errors():
    env = {"KAUDIT_WINDOW_MINUTES": "5", "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS": "far:9092",
           "KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD": "s3cret", "KAUDIT_LOG_LEVEL": "DEBUG"}
    settings = load_settings(env=env)
    assert settings.window_minutes == 5
    assert settings.cluster("dc1").bootstrap_servers == "far:9092"
    assert settings.cluster("dc1").client_config() == {"sasl.password": "s3cret"}
    assert "s3cret" not in str(settings.redacted())
    for variable, value, message in [
        ("KAUDIT_WINDOW_MINUTS", "5", "KAUDIT_WINDOW_MINUTS: not a configuration variable (did you mean KAUDIT_WINDOW_MINUTES?)"),
        ("KAUDIT_WINDOW_MINUTES", "ten", "KAUDIT_WINDOW_MINUTES: 'ten' is not an integer"),
        ("KAUDIT_CLUSTER_DC9_BOOTSTRAP_SERVERS", "x", "KAUDIT_CLUSTER_DC9_BOOTSTRAP_SERVERS: no configured cluster matches"),
        ("KAUDIT_CLUSTER_DC1_PORT", "1", "KAUDIT_CLUSTER_DC1_PORT: 'port' is not a cluster setting"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
            load_settings(env={variable: value})


def test_missing_file_and_unknown_cluster_are_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match=r"cluster 'dc9' is not configured \(known: dc1, dc2, aggregate\)"):
        Settings.default().cluster("dc9")


def test_every_key_is_described():
    keys = {key for key, _default, text in describe() if text}
    assert {"window_minutes", "grace_s", "audit_topic", "clusters[].client", "topics.include"} <= keys


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
keys = st.sampled_from(["window_minutes", "grace_s", "clusters", "topics", "tiers", "audit_topic", "state_dir",
                        "reference_tier", "flush_interval_s", "unknown"])


@given(st.dictionaries(keys, junk, max_size=4))
def test_junk_either_loads_or_raises_config_error(raw):
    try:
        from_dict(raw)
    except ConfigError:
        pass
