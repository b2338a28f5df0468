"""The whole pipeline as services: what `kaudit demo` and the soak start, in one place.

Hub and spoke on the configured clusters: producers write to every regional cluster (all but the
last), one replicator per regional cluster copies into the hub (the last cluster, the aggregate)
with prefix naming (`dc1.orders`), a counter per cluster, the lake job on the hub, the continuous
reconciliation (which sends the alert emails) and the UI.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from audit.contract.errors import HarnessError
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, window_start
from audit.io.clients import client_config, ensure_topics
from audit.local.services import Supervisor

if TYPE_CHECKING:
    from audit.settings import Settings


TOPICS = ("orders", "clicks", "payments")
PARTITIONS = 6


@dataclass(frozen=True)
class DropPlan:
    """Exactly `count` messages of `topic` in the window starting at `window_start_ms` (and as many in
    each of `later_windows_ms`), lost between `cluster` and the hub."""

    cluster: str
    topic: str
    window_start_ms: int
    count: int
    later_windows_ms: tuple[int, ...] = ()

    @property
    def windows_ms(self) -> tuple[int, ...]:
        return (self.window_start_ms, *self.later_windows_ms)


@dataclass(frozen=True)
class StallPlan:
    """The replicator of `cluster` stops copying `after_s` after it starts, for `for_s` seconds."""

    cluster: str
    after_s: float
    for_s: float


@dataclass(frozen=True)
class PipelinePlan:
    regional: tuple[str, ...]
    hub: str
    topics: tuple[str, ...] = TOPICS
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # topic -> settings at creation
    drop: DropPlan | None = None
    stall: StallPlan | None = None
    flush_interval_s: float = 5.0
    status_interval_s: float = 5.0
    stall_after_s: float = 20.0
    lake_trigger_s: float = 10.0
    reconcile_interval_s: float = 30.0
    with_ui: bool = True
    exactly_once: frozenset[str] = frozenset()  # regional clusters whose replicator runs exactly once


def default_config_with(replacements: Sequence[tuple[str, str]]) -> str:
    """The built-in default's text with each (old, new) replaced; an `old` no longer in it is named."""
    from audit.settings import EXAMPLE_CONFIG

    text = EXAMPLE_CONFIG.read_text()
    for old, new in replacements:
        if old not in text:
            raise HarnessError(f"{old!r} is not in {EXAMPLE_CONFIG.name} any more: update the caller")
        text = text.replace(old, new)
    return text


def hub_and_spokes(settings: Settings) -> tuple[tuple[str, ...], str]:
    names = settings.cluster_names
    return (tuple(names[:-1]) or (names[0],)), names[-1]


def drop_window(backfill_hours: float, now_ms: int | None = None, window_minutes: int = DEFAULT_WINDOW_MINUTES) -> int:
    """A window in the middle of the backfilled hours: full of messages, long past its grace."""
    now_ms = now_ms or time.time_ns() // 1_000_000
    return window_start(now_ms - int(backfill_hours * 3_600_000 / 2), window_minutes)


def create_topics(settings: Settings, plan: PipelinePlan) -> None:
    for cluster in plan.regional:
        ensure_topics(
            client_config(settings, cluster),
            {t: PARTITIONS for t in plan.topics} | {settings.audit_topic: 1},
            topic_configs=plan.topic_configs,
        )
    ensure_topics(client_config(settings, plan.hub), {settings.audit_topic: 1})


def start_services(supervisor: Supervisor, settings: Settings, plan: PipelinePlan) -> list[str]:
    """Start counters, replicators, the lake job, the reconciliation and the UI; returns their names."""
    started = []
    for cluster in settings.cluster_names:
        supervisor.start(
            f"count-{cluster}",
            "count",
            "--cluster",
            cluster,
            "--flush-interval-s",
            str(plan.flush_interval_s),
            "--topic-refresh-s",
            "10",
        )
        started.append(f"count-{cluster}")
    for cluster in plan.regional:
        supervisor.start(f"mirror-{cluster}", *replicator_args(plan, cluster))
        started.append(f"mirror-{cluster}")
    supervisor.start("lake", "lake", "--cluster", plan.hub, "--trigger-s", str(plan.lake_trigger_s))
    supervisor.start("reconcile", "reconcile", "--continuous", "--interval-s", str(plan.reconcile_interval_s))
    started += ["lake", "reconcile"]
    if plan.with_ui:
        supervisor.start("ui", "ui")
        started.append("ui")
    return started


def replicator_args(plan: PipelinePlan, cluster: str) -> list[str]:
    args = [
        "mirror",
        "--from",
        cluster,
        "--to",
        plan.hub,
        "--status-interval-s",
        str(plan.status_interval_s),
        "--stall-after-s",
        str(plan.stall_after_s),
        "--topic-refresh-s",
        "10",
    ]
    if plan.drop and plan.drop.cluster == cluster:
        args += ["--drop-topics", f"^{plan.drop.topic}$", "--drop-count", str(plan.drop.count)]
        for start_ms in plan.drop.windows_ms:
            args += ["--drop-window", datetime.fromtimestamp(start_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
    if plan.stall and plan.stall.cluster == cluster:
        args += ["--pause-after-s", str(plan.stall.after_s), "--pause-for-s", str(plan.stall.for_s)]
    if cluster in plan.exactly_once:
        args.append("--exactly-once")
    return args


def backfill(supervisor: Supervisor, plan: PipelinePlan, *, messages: int, hours: float, seed: int = 0) -> None:
    """Produce `messages` audited messages per regional cluster spread over the last `hours` (foreground)."""
    for index, cluster in enumerate(plan.regional):
        result = supervisor.run(
            "produce",
            "--cluster",
            cluster,
            "--topics",
            ",".join(plan.topics),
            "--count",
            str(messages),
            "--backfill-hours",
            str(hours),
            "--seed",
            str(seed + index),
            timeout_s=900,
        )
        if result.returncode != 0:
            raise HarnessError(f"producing to {cluster} failed: {result.stderr[-2000:]}")


def start_live_traffic(supervisor: Supervisor, plan: PipelinePlan, *, rate: float, duration_s: float) -> list[str]:
    names = []
    for index, cluster in enumerate(plan.regional):
        name = f"produce-{cluster}"
        supervisor.start(
            name,
            "produce",
            "--cluster",
            cluster,
            "--topics",
            ",".join(plan.topics),
            "--rate",
            str(rate),
            "--duration-s",
            str(duration_s),
            "--seed",
            str(100 + index),
        )
        names.append(name)
    return names
