"""Hostile configuration: whatever a TOML file, a dict or the environment holds, the loader gives
Settings or a ConfigError naming the key (or the variable, or the file and line); nothing else
escapes (issue 8, part 2)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.contract.errors import ConfigError
from audit.settings import from_dict, load_settings


def load_text(tmp_path: Path, text: str, env: dict | None = None):
    path = tmp_path / "kaudit.toml"
    path.write_text(text)
    return load_settings(path, env=env or {})


def deep(levels: int, leaf=1):
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


# (what, TOML text, a piece the ConfigError must contain: the key, or file:line)
FILE_CASES = [
    ("newline after a cluster name", '[[clusters]]\nname = "dc1\\n"\n', "clusters[0].name:"),
    ("control character in a cluster name", '[[clusters]]\nname = "dc\\u001b1"\n', "clusters[0].name:"),
    ("cyrillic cluster name", '[[clusters]]\nname = "dс1"\n', "clusters[0].name:"),
    ("newline after the audit topic", 'audit_topic = "_audit\\n"\n', "audit_topic:"),
    ("unicode audit topic", 'audit_topic = "audit\u00e9"\n', "audit_topic:"),
    ("newline in metrics_host", 'metrics_host = "0.0.0.0\\n"\n', "metrics_host:"),
    ("space in metrics_host", 'metrics_host = "127.0.0.1 evil"\n', "metrics_host:"),
    (
        "NUL in bootstrap_servers",
        '[[clusters]]\nname = "dc1"\nbootstrap_servers = "h:9092\\u0000"\n',
        "clusters[0].bootstrap_servers:",
    ),
    ("window of 7 minutes", "window_minutes = 7\n", "window_minutes:"),
    ("window of 0 minutes", "window_minutes = 0\n", "window_minutes:"),
    ("window of two days", "window_minutes = 2880\n", "window_minutes:"),
    ("window as a float", "window_minutes = 10.0\n", "window_minutes:"),
    ("window as a string", 'window_minutes = "10"\n', "window_minutes:"),
    ("window as true", "window_minutes = true\n", "window_minutes:"),
    ("grace NaN", "grace_s = nan\n", "grace_s:"),
    ("grace infinity", "grace_s = inf\n", "grace_s:"),
    ("grace -infinity", "grace_s = -inf\n", "grace_s:"),
    ("flush interval 1e400", "flush_interval_s = 1e400\n", "flush_interval_s:"),
    ("a 5000-digit window", "\n\nwindow_minutes = " + "9" * 5000 + "\n", "kaudit.toml:3"),
    ("arrays nested 100000 deep", "tiers = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    (
        "client tables nested 800 deep",
        '[[clusters]]\nname = "dc1"\nclient = ' + "{a=" * 800 + "1" + "}" * 800 + "\n",
        "nested too deeply",
    ),
    (
        "client tables nested 20 deep",
        '[[clusters]]\nname = "dc1"\nclient = ' + "{a=" * 20 + "1" + "}" * 20 + "\n",
        "clusters[0].client.a",
    ),
    ("client value NaN", '[[clusters]]\nname = "dc1"\nclient = {"acks" = nan}\n', "clusters[0].client.acks:"),
    ("client value a list", '[[clusters]]\nname = "dc1"\nclient = {"acks" = [1]}\n', "clusters[0].client.acks:"),
    ("a key given twice", "window_minutes = 10\nwindow_minutes = 5\n", "kaudit.toml:2"),
    (
        "a client key given twice",
        '[[clusters]]\nname = "dc1"\nclient = {"sasl.mechanism" = "PLAIN", sasl = {mechanism = "X"}}\n',
        "clusters[0].client.sasl.mechanism:",
    ),
    ("clusters as a table", "[clusters]\nname = 1\n", "clusters:"),
    ("tiers with a number", "tiers = [1]\n", "tiers[0]:"),
    ("unknown key with a control character", '"win\\u0000dow" = 1\n', "unknown key"),
    ("a regex that does not compile", '[topics]\ninclude = ["(("]\n', "topics.include[0]:"),
    ("not UTF-8", None, "not UTF-8"),
]


@pytest.mark.parametrize(("what", "text", "named"), FILE_CASES, ids=[case[0] for case in FILE_CASES])
def test_each_hostile_file_is_a_config_error_naming_the_key(tmp_path, what, text, named):
    path = tmp_path / "kaudit.toml"
    if text is None:
        path.write_bytes(b"window_minutes = 10\n# \xff\xfe\n")
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert named in str(caught.value), (what, str(caught.value))
    assert len(str(caught.value)) < 400, "an error is a line, not a dump of the value"


ENV_CASES = [
    ({"KAUDIT_WINDOW_MINUTES": "9" * 5000}, "KAUDIT_WINDOW_MINUTES:"),
    ({"KAUDIT_WINDOW_MINUTES": "١٠"}, "KAUDIT_WINDOW_MINUTES:"),  # arabic-indic ten: int() would take it
    ({"KAUDIT_WINDOW_MINUTES": "7"}, "KAUDIT_WINDOW_MINUTES: window_minutes:"),
    ({"KAUDIT_GRACE_S": "nan"}, "KAUDIT_GRACE_S: grace_s:"),
    ({"KAUDIT_GRACE_S": "-inf"}, "KAUDIT_GRACE_S: grace_s:"),
    ({"KAUDIT_FLUSH_INTERVAL_S": "1e999"}, "KAUDIT_FLUSH_INTERVAL_S: flush_interval_s:"),
    ({"KAUDIT_AUDIT_TOPIC": "_audit\n"}, "KAUDIT_AUDIT_TOPIC: audit_topic:"),
    ({"KAUDIT_METRICS_HOST": "0.0.0.0\r\n"}, "KAUDIT_METRICS_HOST: metrics_host:"),
    ({"KAUDIT_STATE_DIR": "a\x00b"}, "KAUDIT_STATE_DIR: state_dir:"),
    (
        {"KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS": "h:1\n"},
        "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS: clusters[0].bootstrap_servers:",
    ),
    ({"KAUDIT_CLUSTER_DC1_LOCAL": "maybe"}, "KAUDIT_CLUSTER_DC1_LOCAL:"),
    ({"KAUDIT_CLUSTER_DC1_CLIENT__": "x"}, "KAUDIT_CLUSTER_DC1_CLIENT__:"),
    ({"KAUDIT_CLUSTER_DC1_CLIENT__SASL\n__PASSWORD": "x"}, "KAUDIT_CLUSTER_DC1_CLIENT__SASL\n__PASSWORD:"),
    ({"KAUDIT_CLUSTER_D\u00c91_LOCAL": "true"}, "KAUDIT_CLUSTER_D\u00c91_LOCAL:"),
    ({"KAUDIT_\x1b[2J": "1"}, "KAUDIT_\x1b[2J:"),
]


@pytest.mark.parametrize(("env", "named"), ENV_CASES, ids=[repr(next(iter(case[0])))[:40] for case in ENV_CASES])
def test_each_hostile_environment_variable_is_a_config_error_naming_it(tmp_path, env, named):
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env=env)
    assert named in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"window_minutes": deep(5000)}, "window_minutes:"),  # repr of the value would recurse
        ({"clusters": [{"name": "dc1", "client": deep(5000)}]}, "clusters[0].client.a"),
        ({"grace_s": 10**400}, "grace_s:"),
        ({"grace_s": math.nan}, "grace_s:"),
        ({"window_minutes": 10**300}, "window_minutes:"),
        ({"clusters": [{"name": 5}]}, "clusters[0].name:"),
        ({"clusters": [{"name": "dc1", 3: "x"}]}, "clusters[0].3:"),
        ({7: 1}, "7:"),
        ({"topics": {"include": [".*"], "exclude": "^_"}}, "topics.exclude:"),
        ({"tiers": ["producer", "producer"]}, "tiers[1]:"),
    ],
)
def test_hostile_dicts_are_config_errors_naming_the_key(raw, named):
    with pytest.raises(ConfigError) as caught:
        from_dict(raw)
    assert named in str(caught.value), str(caught.value)
    assert len(str(caught.value)) < 400


# -- properties ----------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=12)
    | st.text(alphabet=st.characters(categories=("Cc", "Cf", "Zl", "Nd")), max_size=6)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=3)
    ),
    max_leaves=15,
)
keys = st.sampled_from(
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
        "lake_path",
    ]
)
env_keys = st.sampled_from(
    [
        "KAUDIT_WINDOW_MINUTES",
        "KAUDIT_GRACE_S",
        "KAUDIT_METRICS_HOST",
        "KAUDIT_STATE_DIR",
        "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS",
        "KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD",
        "KAUDIT_CLUSTER_DC1_LOCAL",
        "KAUDIT_AUDIT_TOPIC",
        "KAUDIT_NAMING",
    ]
)
env_values = (
    st.text(max_size=10)
    | st.integers(1, 6000).map(lambda digits: "9" * digits)
    | st.sampled_from(["nan", "inf", "-0", "1e999", "\x00", "٣", "10\n", " 10 ", "0x10", "1_0"])
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(keys, values, max_size=4), st.dictionaries(env_keys, env_values, max_size=3))
def test_any_dict_and_environment_give_settings_or_a_keyed_config_error(raw, env):
    try:
        from_dict(raw)
    except ConfigError as exc:
        assert getattr(exc, "key", None) or ":" in str(exc)
    try:
        with tempfile.TemporaryDirectory() as folder:
            load_settings(Path(folder) / "missing.toml", env=env)
    except ConfigError as exc:
        assert str(exc)
    try:
        load_settings(None, env={**env, "KAUDIT_CONFIG": ""})
    except ConfigError as exc:
        message = str(exc)
        assert any(message.startswith(variable + ":") for variable in env), message


toml_pieces = st.sampled_from(
    [
        "window_minutes = ",
        "grace_s = ",
        "[[clusters]]\n",
        'name = "dc1"\n',
        "client = {",
        "}",
        "[",
        "]",
        "{",
        "=",
        '"',
        "'''",
        "nan",
        "inf",
        "1e400",
        "9" * 50,
        "\n",
        ",",
        "tiers = ",
        "[topics]\n",
        "include = ",
        "\\u0000",
        "sasl.password = ",
        '"x"',
        "true",
        "1979-05-27T07:32:00Z",
        "#",
        "\x00",
        "\x7f",
        "é",
    ]
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(toml_pieces | st.text(max_size=5), max_size=25))
def test_any_toml_ish_text_gives_settings_or_a_config_error(pieces):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "junk.toml"
        path.write_text("".join(pieces), errors="surrogatepass")
        try:
            load_settings(path, env={})
        except ConfigError as exc:
            assert str(exc)
