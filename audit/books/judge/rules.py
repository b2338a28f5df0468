"""What the judge step reads of the settings: the tiers in data-flow order, the reference tier, the window size,
the grace, the completeness thresholds, the declared flows and the naming policy they are matched with. Built once per run (`JudgeRules.from_settings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.contract.flows import Flow
from audit.contract.naming import IdentityNaming, NamingPolicy

if TYPE_CHECKING:
    from audit.settings import Settings


@dataclass(frozen=True)
class JudgeRules:
    tiers: tuple[str, ...]
    reference_tier: str
    window_minutes: int
    grace_s: float
    thresholds: tuple[tuple[re.Pattern[str], float], ...] = ()  # (regex, percent), the first match wins
    flows: tuple[Flow, ...] = ()
    naming: NamingPolicy = IdentityNaming()

    @classmethod
    def from_settings(cls, settings: Settings) -> JudgeRules:
        return cls(
            tiers=tuple(settings.tiers),
            reference_tier=settings.reference_tier,
            window_minutes=settings.window_minutes,
            grace_s=settings.grace_s,
            thresholds=tuple(settings.threshold_patterns()),
            flows=settings.declared_flows(),
            naming=settings.naming_policy(),
        )

    @property
    def grace_ms(self) -> int:
        return int(self.grace_s * 1000)
