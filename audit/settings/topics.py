"""Which topics are audited ([topics]), how replicated topics are named, the tiers and the thresholds."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, PrivateAttr, model_validator

from audit.contract.names import DEFAULT_AUDIT_TOPIC, RESERVED_TIERS
from audit.settings.errors import invalid, show
from audit.settings.fields import Regexes, SettingsModel, compiled, setting

# The longest kaudit.digest.exclude the librdkafka plugin takes (native/plugin/kaudit_plugin.h), all regexes joined.
MAX_DIGEST_EXCLUDE_CHARS = 2047
DEFAULT_NAMING = "prefix"
NAMING_POLICIES = ("prefix", "identity")
DEFAULT_INCLUDE = (".*",)
DEFAULT_EXCLUDE = (
    r"^__.*",
    rf"^{DEFAULT_AUDIT_TOPIC}$",
    r"^_kaudit.*",
)  # Kafka's internal topics, the audit topic, ours


def posix_regexes(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Regexes that POSIX extended regex (the plugin's, in C) and Python's `re` read alike: no `(?...)` group,
    no lazy quantifier, no backslash class such as \\d (escape punctuation only)."""
    for index, pattern in enumerate(patterns):
        escaped = False
        for at, char in enumerate(pattern):
            if escaped:
                escaped = False
                if char.isalnum() or not char.isascii():
                    raise invalid(
                        f"{pattern!r}: \\{char} is not POSIX (write [0-9] for \\d, escape punctuation only)", index
                    )
            elif char == "\\":
                escaped = True
            elif char == "?" and at and pattern[at - 1] in "(*+?}":
                raise invalid(
                    f"{pattern!r}: {pattern[at - 1]}? is not POSIX (no (?...) group, no lazy quantifier)", index
                )
    return patterns


PosixRegexes = Annotated[Regexes, AfterValidator(posix_regexes)]


class TopicSelection(SettingsModel):
    """Which topics are audited: one include regex matches (re.search) and no exclude regex does."""

    key_prefix = "topics."

    include: Regexes = setting(
        "regexes of topics to audit, any may match (searched anywhere in the name: anchor with ^...$)", DEFAULT_INCLUDE
    )
    exclude: Regexes = setting(
        "regexes of topics never audited, even when included: Kafka's internal topics and the audit topic",
        DEFAULT_EXCLUDE,
    )
    digest_exclude: PosixRegexes = setting(
        "regexes of audited topics counted without a content digest of keys and values (their count records carry "
        "none, so their windows are judged by counts only): POSIX extended regexes, searched anywhere in the name",
        (),
    )

    _include: tuple[re.Pattern[str], ...] = PrivateAttr(default=())
    _exclude: tuple[re.Pattern[str], ...] = PrivateAttr(default=())
    _digest_exclude: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _compile(self) -> TopicSelection:
        if not self.include:
            raise invalid("[] is empty, so no topic would be audited", "include")
        self._include = tuple(map(re.compile, self.include))
        self._exclude = tuple(map(re.compile, self.exclude))
        self._digest_exclude = tuple(map(re.compile, self.digest_exclude))
        joined = sum(len(pattern) + 3 for pattern in self.digest_exclude)
        if joined > MAX_DIGEST_EXCLUDE_CHARS + 1:
            raise invalid(
                f"the regexes are {joined - 1} characters joined, over {MAX_DIGEST_EXCLUDE_CHARS}", "digest_exclude"
            )
        return self

    def matches(self, topic: str) -> bool:
        """Whether `topic` is audited."""
        return any(p.search(topic) for p in self._include) and not any(p.search(topic) for p in self._exclude)

    def digest_off(self, topic: str) -> bool:
        """Whether `topic` is counted without a content digest."""
        return any(p.search(topic) for p in self._digest_exclude)


def check_naming(naming: str) -> str:
    if naming not in NAMING_POLICIES:
        raise invalid(f"{naming!r} is not a naming policy ({' or '.join(NAMING_POLICIES)})")
    return naming


def check_thresholds(table: Mapping[str, float]) -> Mapping[str, float]:
    """Completeness thresholds: regex = percent between 0 and 100."""
    for pattern, percent in table.items():
        compiled((pattern,), pattern)
        if not (math.isfinite(percent) and 0 <= percent <= 100):
            raise invalid(f"{show(percent)} is not a percentage between 0 and 100", pattern)
    return table


def check_tiers(tiers: tuple[str, ...], cluster_names: tuple[str, ...], reference_tier: str) -> None:
    """The tiers name producer, lake or configured clusters, each once, and include the reference tier."""
    if not tiers:
        raise invalid("[] is empty (leave the key out for: producer, each cluster, lake)", "tiers")
    known = {*RESERVED_TIERS, *cluster_names}
    for index, tier in enumerate(tiers):
        if tier not in known:
            raise invalid(
                f"{tier!r} is neither producer, lake nor a configured cluster ({', '.join(cluster_names)})",
                "tiers",
                index,
            )
        if tier in tiers[:index]:
            raise invalid(f"{tier!r} is named twice", "tiers", index)
    if reference_tier not in tiers:
        raise invalid(f"{reference_tier!r} is not one of the tiers {list(tiers)}", "reference_tier")


def compiled_thresholds(table: Mapping[str, Any]) -> list[tuple[re.Pattern[str], float]]:
    """(compiled regex, percent) in the order of the configuration."""
    return [(re.compile(pattern), float(percent)) for pattern, percent in table.items()]
