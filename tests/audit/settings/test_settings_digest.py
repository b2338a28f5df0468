"""`[topics] digest_exclude`: the topics counted without a content digest, as regexes that the plugin (POSIX,
in C) and Python read alike; the counter and `kaudit producer-config` pass them on."""

from __future__ import annotations

import re

import pytest

from audit.contract.errors import ConfigError
from audit.hops.counter.state import CounterOptions
from audit.io.plugin import digest_exclude_regex, plugin_path
from audit.settings import Settings, from_dict
from tests.audit.cli.test_cli import kaudit


def test_no_topic_is_excluded_by_default():
    topics = Settings.default().topics
    assert topics.digest_exclude == () and not topics.digest_off("orders")
    assert digest_exclude_regex(()) is None


def test_an_excluded_topic_is_matched_anywhere_in_its_name():
    topics = from_dict({"topics": {"digest_exclude": ["^media\\.", "-blobs$"]}}).topics
    assert topics.digest_off("media.images") and topics.digest_off("dc1.x-blobs")
    assert not topics.digest_off("orders") and not topics.digest_off("dc1.media.x")
    options = CounterOptions(cluster="dc1", digest_exclude=topics.digest_exclude)
    assert options.digest_off("media.images") and not options.digest_off("orders")
    joined = digest_exclude_regex(topics.digest_exclude)
    assert joined == "(^media\\.)|(-blobs$)" and re.search(joined, "a-blobs") and not re.search(joined, "blobs")


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        (["("], r"^topics\.digest_exclude\[0\]: '\(' is not a valid regex"),
        (["ok", "\\d+"], r"^topics\.digest_exclude\[1\]: '\\\\d\+': \\d is not POSIX"),
        (["(?i)orders"], r"^topics\.digest_exclude\[0\]: .*\(\? is not POSIX"),
        (["a.*?b"], r"^topics\.digest_exclude\[0\]: .*\*\? is not POSIX"),
        (["x" * 2100], r"^topics\.digest_exclude: the regexes are 2102 characters joined, over 2047"),
        ("orders", r"^topics\.digest_exclude:"),
    ],
)
def test_a_regex_the_plugin_would_read_otherwise_is_refused_with_its_key(patterns, message):
    with pytest.raises(ConfigError, match=message):
        from_dict({"topics": {"digest_exclude": patterns}})


def test_producer_config_passes_the_exclusion_to_librdkafka_and_java_clients(tmp_path):
    config = tmp_path / "kaudit.toml"
    config.write_text('[topics]\ndigest_exclude = ["^media[.]", "-blobs$"]\n')
    result = kaudit("--config", str(config), "producer-config", "--cluster", "dc1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"plugin.library.paths={plugin_path()}"
    java = lines.index(next(line for line in lines if line.startswith("# Java")))
    assert "kaudit.digest.exclude=(^media[.])|(-blobs$)" in lines[2:java]
    assert "kaudit.digest.exclude=(^media[.])|(-blobs$)" in lines[java:]  # the Java interceptor takes it too
    kcat = kaudit("--config", str(config), "producer-config", "--cluster", "dc1", "--format", "kcat")
    assert "-X kaudit.digest.exclude=(^media[.])|(-blobs$)" in kcat.stdout
