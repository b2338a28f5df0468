"""The soak's plan: its own config and folder, its seeded fault schedule, and the log of what it injected."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from audit.contract.errors import HarnessError
from audit.local.services import stop_leftovers
from audit.settings import EXAMPLE_CONFIG, Settings

if TYPE_CHECKING:
    pass


FAULT_KINDS = ("kill-counter", "kill-replicator", "kill-lake", "kill-broker", "kill-reconcile")
WINDOW_MINUTES = 1
GRACE_S = 60
SOAK_MARKER = "kaudit-soak-state"


@dataclass(frozen=True)
class Fault:
    at_s: float  # not before this many seconds into the live load
    kind: str
    target: str  # cluster name, or the service for lake / reconcile


@dataclass
class FaultDone:
    fault: Fault
    began_s: float
    down_s: float
    note: str = ""


@dataclass
class SoakLog:
    """What the soak did, for the report."""

    seed: int = 0
    faults: list[FaultDone] = field(default_factory=list)
    unplanned_exits: list[str] = field(default_factory=list)
    acked: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    malformed_markers: tuple[str, ...] = ()
    phases_s: dict[str, float] = field(default_factory=dict)


def fault_schedule(
    rng: random.Random, duration_s: float, gap_s: float, regional: tuple[str, ...], hub: str
) -> list[Fault]:
    """Faults at random times (gaps uniform in [0.5, 1.5] x gap_s) over `duration_s`, the kinds dealt from shuffled
    decks so every kind comes up once before any comes up twice."""
    clusters = (*regional, hub)
    faults, deck, at_s = [], [], rng.uniform(0.2, 0.6) * gap_s
    while at_s < duration_s:
        if not deck:
            deck = list(FAULT_KINDS)
            rng.shuffle(deck)
        kind = deck.pop()
        target = {
            "kill-counter": rng.choice(clusters),
            "kill-replicator": rng.choice(regional),
            "kill-broker": rng.choice(clusters),
            "kill-lake": "lake",
            "kill-reconcile": "reconcile",
        }[kind]
        faults.append(Fault(round(at_s, 1), kind, target))
        at_s += rng.uniform(0.5, 1.5) * gap_s
    return faults


def write_soak_config(settings: Settings, soak_dir: Path) -> Path:
    """The built-in default with the soak's folder, 1-minute windows, a 60 s grace and 5 s flushes."""
    text = EXAMPLE_CONFIG.read_text()
    for old, new in (
        ('state_dir = ".kaudit"', f'state_dir = "{soak_dir.resolve()}"'),
        ('cache_dir = "~/.cache/kafka-audit"', f'cache_dir = "{Path(settings.cache_dir).expanduser().resolve()}"'),
        ("window_minutes = 10", f"window_minutes = {WINDOW_MINUTES}"),
        ("grace_s = 300", f"grace_s = {GRACE_S}"),
        ("flush_interval_s = 10", "flush_interval_s = 5"),
    ):
        if old not in text:
            raise HarnessError(f"soak config: {old!r} not found in default.toml; update write_soak_config")
        text = text.replace(old, new)
    path = soak_dir / "soak.toml"
    path.write_text(text)
    return path


def fresh_soak_dir(soak_dir: Path) -> None:
    """Stop what a previous soak left and wipe its folder (only a folder a soak made, or an empty one)."""
    if soak_dir.exists():
        if any(soak_dir.iterdir()) and not (soak_dir / SOAK_MARKER).exists():
            raise HarnessError(
                f"{soak_dir} exists and is not a soak folder (no {SOAK_MARKER}); choose another --state-dir"
            )
        stop_leftovers(soak_dir)
        from audit.local.clusters import LocalClusters

        LocalClusters(
            [p.name for p in (soak_dir / "clusters").glob("*")], state_dir=soak_dir, cache_dir=Path(".")
        ).down()
        shutil.rmtree(soak_dir)
    soak_dir.mkdir(parents=True)
    (soak_dir / SOAK_MARKER).write_text("made by kaudit soak; wiped by the next soak\n")
