"""[[flows]]: where data must go (audit/contract/flows.py holds what the books make of them)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, StrictStr, model_validator

from audit.contract.flows import Flow
from audit.contract.names import LAKE_TIER
from audit.settings.clusters import DEFAULT_CLUSTERS
from audit.settings.errors import invalid
from audit.settings.fields import Regexes, SettingsModel

ALL_TOPICS = (".*",)


class FlowSettings(SettingsModel):
    """One declared flow: the topics of `from` matching `topics` must reach `to`."""

    # `from` is a Python keyword: the fields are `source` and `target`, written `from` and `to`.
    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True)
    key_prefix = "flows[]."

    source: StrictStr = Field(alias="from", description="a cluster the data is written to or copied into")
    target: StrictStr = Field(alias="to", description='a cluster the data must be copied into, or "lake"')
    topics: Regexes = Field(
        ALL_TOPICS,
        description="regexes of the source's topics that must arrive, searched in their names on the source "
        "(anchor with ^...$); after [topics] filtering",
    )

    _patterns: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _compile(self) -> FlowSettings:
        if not self.topics:
            raise invalid("[] is empty, so the flow would expect nothing (leave it out for every topic)", "topics")
        if self.source == self.target:
            raise invalid(f"{self.source!r} flows into itself", "to")
        self._patterns = tuple(map(re.compile, self.topics))
        return self

    def flow(self) -> Flow:
        return Flow(self.source, self.target, self._patterns)


def default_flows(values: dict[str, Any]) -> tuple[FlowSettings, ...]:
    """The embedded hub and spoke's own: dc1 and dc2 to the aggregate, the aggregate to the lake. None for other
    clusters: with no [[flows]], paths are what was observed."""
    names = tuple(cluster.name for cluster in values.get("clusters", ()))
    if names != DEFAULT_CLUSTERS:
        return ()
    *regional, hub = DEFAULT_CLUSTERS
    pairs = (*((name, hub) for name in regional), (hub, LAKE_TIER))
    return tuple(FlowSettings.model_validate({"from": source, "to": target}) for source, target in pairs)


def check_flows(flows: tuple[FlowSettings, ...], cluster_names: tuple[str, ...], tiers: tuple[str, ...]) -> None:
    """Each flow leaves a configured cluster for another or the lake, both tiers; no flow twice."""
    seen: dict[tuple[str, str], int] = {}
    for index, flow in enumerate(flows):
        if flow.source not in cluster_names:
            raise invalid(
                f"{flow.source!r} is not a configured cluster ({', '.join(cluster_names)})", "flows", index, "from"
            )
        if flow.target not in (*cluster_names, LAKE_TIER):
            raise invalid(
                f"{flow.target!r} is neither a configured cluster ({', '.join(cluster_names)}) nor lake",
                "flows",
                index,
                "to",
            )
        for key, tier in (("from", flow.source), ("to", flow.target)):
            if tier not in tiers:
                raise invalid(
                    f"{tier!r} is not one of the tiers {list(tiers)}: it would never be judged", "flows", index, key
                )
        if (flow.source, flow.target) in seen:
            raise invalid(
                f"{flow.source} -> {flow.target} is declared twice (also flows[{seen[(flow.source, flow.target)]}]): "
                "list every regex in one topics",
                "flows",
                index,
            )
        seen[(flow.source, flow.target)] = index
