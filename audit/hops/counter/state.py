"""What a counter instance is set up with and keeps: its options, partition progress, stats and metrics."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.windows import DEFAULT_WINDOW_MINUTES
from audit.hops.upkeep import DEFAULT_AUDIT_RETENTION_MS

SERVICE = "kaudit-counter"
DEFAULT_BATCH = 5000
DEFAULT_TOPIC_REFRESH_S = 30.0
SESSION_TIMEOUT_MS = 10_000
DEFAULT_CLIENT_TIMEOUT_S = 30.0
DEFAULT_TRANSACTION_CALL_TIMEOUT_S = 5.0

MESSAGES = Counter("kaudit_counter_messages_total", "Messages counted", ["cluster", "topic"])
LAG = Gauge("kaudit_counter_lag_messages", "End offset minus position", ["cluster", "topic", "partition"])
LAST_FLUSH = Gauge("kaudit_counter_last_flush_timestamp_seconds", "When the last transaction committed", ["cluster"])
ABORTS = Counter(
    "kaudit_counter_transaction_aborts_total", "Transactions aborted (their deltas are recounted)", ["cluster"]
)
FLUSHES = Counter("kaudit_counter_flushes_total", "Transactions committed", ["cluster"])
RETENTION_SKIPPED = Counter(
    "kaudit_counter_retention_skipped_offsets_total",
    "Offsets deleted by retention before the counter read them (lost for this tier)",
    ["cluster", "topic", "partition"],
)


@dataclass(frozen=True, kw_only=True)
class CounterOptions:
    """How one counter instance runs; defaults suit the embedded local clusters."""

    cluster: str
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    window_minutes: int = DEFAULT_WINDOW_MINUTES
    flush_interval_s: float = 10.0
    instance: str = "0"  # slot name: stable across restarts of the same slot
    group_id: str | None = None  # default kaudit-counter-<cluster>
    by_partition: bool = True  # per-partition counts let the reconciliation see a loss hidden by duplicates
    # Regexes (POSIX extended, `topics.digest_exclude`) of topics counted without a content digest.
    digest_exclude: tuple[str, ...] = ()
    batch_size: int = DEFAULT_BATCH
    topic_refresh_s: float = DEFAULT_TOPIC_REFRESH_S
    client_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S  # how long a broker call may take before it is an error
    # A transaction call that waits longer is given up: the flush aborts and its messages are counted
    # again. Short, so a broker's absence never holds the loop (and its consumer's polls) for long.
    transaction_call_timeout_s: float = DEFAULT_TRANSACTION_CALL_TIMEOUT_S
    # How long the audit topic must keep its records (`upkeep.audit_retention_ms` of the configuration): checked
    # at start, a warning when it keeps them shorter.
    audit_retention_ms: int = DEFAULT_AUDIT_RETENTION_MS

    def digest_off(self, topic: str) -> bool:
        """Whether `topic` is counted without a content digest."""
        return any(re.search(pattern, topic) for pattern in self.digest_exclude)

    @property
    def group(self) -> str:
        return self.group_id or f"kaudit-counter-{self.cluster}"

    @property
    def transactional_id(self) -> str:
        return f"{self.group}-{self.instance}"


@dataclass
class PartitionProgress:
    """Where one assigned partition stands: next offset to count, last committed, last audit time."""

    position: int
    committed: int
    last_audit_time_ms: int | None = None


@dataclass
class CounterStats:
    """What a counter did; `lag` holds one entry per partition assigned now (`ClusterCounter._forget`)."""

    counted: int = 0
    flushes: int = 0
    aborts: int = 0
    records_emitted: int = 0
    retention_skipped: int = 0  # offsets deleted before they were read, each counted once
    lag: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())
