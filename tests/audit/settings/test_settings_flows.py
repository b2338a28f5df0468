"""[[flows]]: the default's own, none for other clusters, and errors that name the flow and the key."""

from __future__ import annotations

import pytest

from audit.contract.errors import ConfigError
from audit.settings import EXAMPLE_CONFIG, Settings, from_dict, load_settings

TWO_CLUSTERS = """
[[clusters]]
name = "east"
bootstrap_servers = "kafka-east:9092"
[[clusters]]
name = "hub"
bootstrap_servers = "kafka-hub:9092"
"""


def load(tmp_path, text: str, top: str = "") -> Settings:
    """`top` (top-level keys), the two clusters, then `text` (the flows)."""
    path = tmp_path / "kaudit.toml"
    path.write_text(top + TWO_CLUSTERS + text)
    return load_settings(path, env={})


def error(tmp_path, text: str, top: str = "") -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text, top)
    return str(caught.value)


def test_the_default_declares_its_hub_and_spoke_and_the_example_says_the_same():
    flows = [(f.source, f.target, f.topics) for f in Settings.default().flows]
    assert flows == [("dc1", "aggregate", (".*",)), ("dc2", "aggregate", (".*",)), ("aggregate", "lake", (".*",))]
    assert load_settings(EXAMPLE_CONFIG, env={}).flows == Settings.default().flows


def test_other_clusters_declare_nothing_unless_written_and_what_is_written_loads_back(tmp_path):
    assert load(tmp_path, "").flows == ()
    settings = load(
        tmp_path, '[[flows]]\nfrom = "east"\nto = "hub"\ntopics = ["^orders$"]\n[[flows]]\nfrom = "hub"\nto = "lake"\n'
    )
    assert [(f.source, f.target, f.topics) for f in settings.flows] == [
        ("east", "hub", ("^orders$",)),
        ("hub", "lake", (".*",)),
    ]
    assert from_dict(settings.redacted()) == settings
    assert settings.redacted()["flows"][0] == {"from": "east", "to": "hub", "topics": ["^orders$"]}


@pytest.mark.parametrize(
    ("flow", "message"),
    [
        ('from = "west"\nto = "hub"', "flows[0].from: 'west' is not a configured cluster (east, hub)"),
        ('from = "east"\nto = "lake2"', "flows[0].to: 'lake2' is neither a configured cluster (east, hub) nor lake"),
        ('from = "lake"\nto = "hub"', "flows[0].from: 'lake' is not a configured cluster (east, hub)"),
        ('from = "hub"\nto = "hub"', "'hub' flows into itself"),
        ('from = "east"\nto = "hub"\ntopics = []', "[] is empty"),
        ('from = "east"\nto = "hub"\ntopics = ["("]', "is not a valid regex"),
        ('to = "hub"', "from"),
        ('from = "east"\nto = "hub"\nvia = "x"', "via"),
    ],
)
def test_a_wrong_flow_is_refused_naming_the_key(tmp_path, flow, message):
    assert message in error(tmp_path, f"[[flows]]\n{flow}\n")


def test_a_flow_declared_twice_or_into_a_tier_that_is_not_judged_is_refused(tmp_path):
    twice = '[[flows]]\nfrom = "east"\nto = "hub"\n[[flows]]\nfrom = "east"\nto = "hub"\ntopics = ["^a$"]\n'
    assert "flows[1]: east -> hub is declared twice (also flows[0])" in error(tmp_path, twice)
    untiered = error(tmp_path, '[[flows]]\nfrom = "hub"\nto = "lake"\n', top='tiers = ["producer", "east", "hub"]\n')
    assert "flows[0].to: 'lake' is not one of the tiers" in untiered
