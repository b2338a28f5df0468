"""What a judge step leaves its session's next one: the windows it left open, so the next need not read
`completeness` to find them. Apart from the judge step (completeness.py) because both engines read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpenBooks:
    """The windows a judge step left open (`WINDOW_KEY`: not final, or pending or lagging) and the
    (origin_cluster, topic, tier) on the paths it judged with (a window judged since holds a row for each)."""

    windows: frozenset[tuple]
    path_tiers: frozenset[tuple]
