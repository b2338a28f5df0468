"""Fault injection for tests and the demo: off unless asked for, and loud when on.

A `DropFault` makes the replicator lose a known number of messages (optionally in chosen windows only,
that number in each),
so the reconciliation can be checked to report exactly that loss; a `FlipFault` makes it change one byte of
one message it copies, so the counts balance and only the content digest can tell; a `PauseFault` makes it
stop copying for a while, so a stall must show as lag and never as loss.

The replicator asks its drop or flip fault `should_drop(topic, timestamp_ms)` of every message it reads, then
copies `changed_value(topic, partition, timestamp_ms, value)` in place of the value of each one it copies.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from audit.contract.errors import ConfigError
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, window_end


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

    def changed_value(self, topic: str, partition: int, timestamp_ms: int, value: bytes | None) -> bytes | None:
        """A drop fault copies what it does not drop unchanged."""
        return value

    def _window_of(self, timestamp_ms: int) -> int | None:
        """The chosen window holding `timestamp_ms`, or None."""
        return next(
            (start for start in self.windows_ms if start <= timestamp_ms < window_end(start, self.window_minutes)), None
        )

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
class FlipFault:
    """Flip every bit of one byte (`byte_index`, counted from the end when negative) of one message of the topics
    matching `topics`: the first with a value that long, of `partition` and in the window starting at
    `window_ms` when given. Nothing is dropped, so every count balances; the message's copy differs from it.
    `flipped_at` says which message it was: (source topic, partition, timestamp ms)."""

    topics: str  # regex on source topic names
    partition: int | None = None
    window_ms: int | None = None  # a window start; None: any window
    window_minutes: int = DEFAULT_WINDOW_MINUTES
    byte_index: int = 0
    flipped: int = 0
    flipped_at: tuple[str, int, int] | None = None
    _pattern: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.partition is not None and self.partition < 0:
            raise ConfigError(f"flip fault: partition {self.partition} is negative")
        try:
            self._pattern = re.compile(self.topics)
        except re.error as exc:
            raise ConfigError(f"flip fault: topics {self.topics!r} is not a valid regex: {exc}") from None

    def should_drop(self, topic: str, timestamp_ms: int = 0) -> bool:
        return False

    def changed_value(self, topic: str, partition: int, timestamp_ms: int, value: bytes | None) -> bytes | None:
        """`value` with its chosen byte flipped when this is the chosen message; else `value` as it is."""
        if self.flipped or value is None or not self._chosen(topic, partition, timestamp_ms, len(value)):
            return value
        changed = bytearray(value)
        changed[self.byte_index] ^= 0xFF
        self.flipped, self.flipped_at = 1, (topic, partition, timestamp_ms)
        return bytes(changed)

    def _chosen(self, topic: str, partition: int, timestamp_ms: int, length: int) -> bool:
        in_window = self.window_ms is None or self.window_ms <= timestamp_ms < window_end(
            self.window_ms, self.window_minutes
        )
        long_enough = -length <= self.byte_index < length
        return (
            in_window
            and long_enough
            and self.partition in (None, partition)
            and self._pattern.search(topic) is not None
        )

    def describe(self) -> str:
        where = f" of partition {self.partition}" if self.partition is not None else ""
        if self.window_ms is not None:
            where += f" in the window starting at {self.window_ms} ms"
        return f"flip byte {self.byte_index} of one message{where} of the topics matching {self.topics!r}"


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
