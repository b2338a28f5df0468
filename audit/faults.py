"""Fault injection for tests and the demo: off unless asked for, and loud when on.

A `DropFault` makes the replicator lose a known number of messages, so the reconciliation can be
checked to report exactly that loss.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field


@dataclass
class DropFault:
    """Drop exactly `count` messages (or a `fraction` of them) of the topics matching `topics`."""

    topics: str  # regex on source topic names
    count: int | None = None
    fraction: float = 0.0
    seed: int = 0
    dropped: int = 0
    _pattern: re.Pattern = field(init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.count is None) == (not self.fraction):
            raise ValueError("drop fault: give exactly one of count or fraction")
        if self.count is not None and self.count < 0:
            raise ValueError(f"drop fault: count {self.count} is negative")
        if not 0 <= self.fraction <= 1:
            raise ValueError(f"drop fault: fraction {self.fraction} is not between 0 and 1")
        try:
            self._pattern = re.compile(self.topics)
        except re.error as exc:
            raise ValueError(f"drop fault: topics {self.topics!r} is not a valid regex: {exc}") from None
        self._rng = random.Random(self.seed)

    def should_drop(self, topic: str) -> bool:
        if not self._pattern.search(topic):
            return False
        if self.count is not None:
            drop = self.dropped < self.count
        else:
            drop = self._rng.random() < self.fraction
        self.dropped += drop
        return drop

    def describe(self) -> str:
        amount = f"exactly {self.count}" if self.count is not None else f"{self.fraction:.1%}"
        return f"drop {amount} of the messages of topics matching {self.topics!r}"
