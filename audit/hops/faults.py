"""Fault injection for tests and the demo: off unless asked for, and loud when on.

A `DropFault` makes the replicator lose a known number of messages (optionally in chosen windows only,
that number in each),
so the reconciliation can be checked to report exactly that loss; a `PauseFault` makes it stop
copying for a while, so a stall must show as lag and never as loss.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from audit.contract.errors import ConfigError
from audit.contract.windows import DEFAULT_WINDOW_MINUTES


@dataclass
class DropFault:
    """Drop exactly `count` messages (or a `fraction` of them) of the topics matching `topics`; with
    `windows_ms`, only messages whose timestamp falls in one of those windows, `count` in each."""

    topics: str  # regex on source topic names
    count: int | None = None
    fraction: float = 0.0
    seed: int = 0
    windows_ms: tuple[int, ...] = ()  # window starts; empty: every message may be dropped
    window_minutes: int = DEFAULT_WINDOW_MINUTES
    dropped: int = 0
    _dropped_by_window: dict[int | None, int] = field(default_factory=dict, init=False, repr=False)
    _pattern: re.Pattern = field(init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.count is None) == (not self.fraction):
            raise ConfigError("drop fault: give exactly one of count or fraction")
        if self.count is not None and self.count < 0:
            raise ConfigError(f"drop fault: count {self.count} is negative")
        if not 0 <= self.fraction <= 1:
            raise ConfigError(f"drop fault: fraction {self.fraction} is not between 0 and 1")
        try:
            self._pattern = re.compile(self.topics)
        except re.error as exc:
            raise ConfigError(f"drop fault: topics {self.topics!r} is not a valid regex: {exc}") from None
        self._rng = random.Random(self.seed)

    def should_drop(self, topic: str, timestamp_ms: int = 0) -> bool:
        if not self._pattern.search(topic):
            return False
        window = self._window_of(timestamp_ms)
        if self.windows_ms and window is None:
            return False
        if self.count is not None:
            drop = self._dropped_by_window.get(window, 0) < self.count
        else:
            drop = self._rng.random() < self.fraction
        self._dropped_by_window[window] = self._dropped_by_window.get(window, 0) + drop
        self.dropped += drop
        return drop

    def _window_of(self, timestamp_ms: int) -> int | None:
        """The chosen window holding `timestamp_ms`, or None."""
        width = self.window_minutes * 60_000
        return next((start for start in self.windows_ms if start <= timestamp_ms < start + width), None)

    def describe(self) -> str:
        amount = f"exactly {self.count}" if self.count is not None else f"{self.fraction:.1%}"
        if len(self.windows_ms) == 1:
            amount += f" in the window starting at {self.windows_ms[0]} ms"
        elif self.windows_ms:
            amount += (
                f" in each of {len(self.windows_ms)} windows starting at {', '.join(map(str, self.windows_ms))} ms"
            )
        return f"drop {amount} of the messages of topics matching {self.topics!r}"


@dataclass
class PauseFault:
    """Copy nothing from `after_s` to `after_s + for_s` after the replicator starts (a stall on purpose), or
    until `end()` (SIGUSR1 to `kaudit mirror`): a demo ends the stall once the tables show it."""

    after_s: float
    for_s: float
    _started: float | None = field(default=None, init=False, repr=False)
    _ended: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.after_s < 0 or self.for_s <= 0:
            raise ConfigError(f"pause fault: after {self.after_s} s for {self.for_s} s: both must be >= 0, for > 0")

    def paused(self, now: float) -> bool:
        if self._started is None:
            self._started = now
        return not self._ended and self.after_s <= now - self._started < self.after_s + self.for_s

    def end(self) -> None:
        self._ended = True

    def describe(self) -> str:
        return f"copy nothing from {self.after_s:g} s to {self.after_s + self.for_s:g} s after start"
