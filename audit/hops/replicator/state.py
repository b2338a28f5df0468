"""The replicator's settings, its bookkeeping per source partition, its stats and its metrics."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from prometheus_client import Counter, Gauge

from audit.contract.audit_time import header_value, parse_audit_time_header
from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.record import AUDIT_TIME_HEADER, PROVENANCE_HEADER
from audit.contract.windows import DEFAULT_WINDOW_MINUTES
from audit.hops.retention import Skip
from audit.hops.upkeep import DEFAULT_AUDIT_RETENTION_MS

SERVICE = "kaudit-mirror"

COPIED = Counter("kaudit_mirror_messages_total", "Messages acknowledged by the target", ["source", "target", "topic"])
LAG = Gauge("kaudit_mirror_lag_messages", "Source end offset minus acknowledged position", ["source", "target"])
STALLED = Gauge(
    "kaudit_mirror_stalled", "1 while lag > 0 and nothing was acknowledged for stall_after_s", ["source", "target"]
)
LAST_COMMIT = Gauge(
    "kaudit_mirror_last_commit_timestamp_seconds",
    "When everything the target acknowledged was last committed on the source (idle counts: nothing left)",
    ["source", "target"],
)
ERRORS = Counter("kaudit_mirror_errors_total", "Delivery and client errors", ["source", "target"])
SKIPPED = Counter(
    "kaudit_mirror_cycle_skipped_total", "Messages not copied because the target is on their path", ["source", "target"]
)
RETENTION_SKIPPED = Counter(
    "kaudit_mirror_retention_skipped_offsets_total",
    "Source offsets deleted by retention before the replicator read them (lost for the target)",
    ["source", "target", "topic", "partition"],
)
DROPPED = Counter(
    "kaudit_mirror_fault_dropped_total",
    "Messages dropped by the fault hook (tests and demo only)",
    ["source", "target", "topic"],
)


@dataclass(frozen=True, kw_only=True)
class ReplicatorOptions:
    """How one replicator instance runs."""

    source: str
    target: str
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    window_minutes: int = DEFAULT_WINDOW_MINUTES
    group_id: str | None = None  # default kaudit-mirror-<source>-<target>
    session_timeout_ms: int = 10_000  # a crashed instance's partitions move on after this long
    batch_size: int = 5000
    commit_interval_s: float = 2.0
    status_interval_s: float = 10.0
    topic_refresh_s: float = 30.0
    stall_after_s: float = 30.0
    client_timeout_s: float = 30.0
    linger_ms: int = 20
    # How long the audit topics must keep their records (`upkeep.audit_retention_ms` of the configuration):
    # checked at start on both clusters, a warning when one keeps them shorter.
    audit_retention_ms: int = DEFAULT_AUDIT_RETENTION_MS

    @property
    def group(self) -> str:
        return self.group_id or f"kaudit-mirror-{self.source}-{self.target}"


@dataclass
class PartitionFlow:
    """One source partition: what was sent, what the target acknowledged, when that last moved.

    `sent` and `done` hold only offsets in flight: each leaves both once the target acknowledged it and every
    offset before it (`acknowledge`), so they never hold more than the producer's queue."""

    committed: int
    acked: int  # next offset to commit: every message before it is acknowledged
    sent: deque = field(default_factory=deque)  # offsets in send order, not yet committable
    done: dict = field(default_factory=dict)  # offset -> timestamp, acknowledged out of order (rare)
    last_progress: float = field(default_factory=time.monotonic)
    last_audit_time_ms: int | None = None  # Kafka timestamp of the last message acknowledged in order
    next_offset: int = -1  # the offset the next message read should have; a message past it skipped some

    def note_read(self, topic: str, partition: int, offset: int, timestamp_ms: int, skips: list[Skip]) -> None:
        """The next message read; one past the offset expected skipped some (commit markers, aborted
        batches or a retention gap: `RetentionGaps.check` tells which)."""
        if offset > self.next_offset >= 0:
            skips.append(Skip(topic, partition, self.next_offset, (offset,), self.last_audit_time_ms, (timestamp_ms,)))
        self.next_offset = offset + 1

    def acknowledge(self, offset: int, timestamp_ms: int) -> None:
        """Mark one offset done and move the committable position over every done offset before it.

        The time of the message just before the new position becomes the partition's last audit
        time (the watermark's input); a message without a timestamp (<= 0) keeps the previous one.
        """
        if not self.sent:
            return
        if self.sent[0] != offset:  # acknowledged ahead of an earlier message: wait for that one
            self.done[offset] = timestamp_ms
            return
        self.sent.popleft()
        self.acked = offset + 1
        while self.sent and self.sent[0] in self.done:
            timestamp_ms = self.done.pop(self.sent[0])
            self.acked = self.sent.popleft() + 1
        if timestamp_ms > 0:
            self.last_audit_time_ms = timestamp_ms
        self.last_progress = time.monotonic()


@dataclass
class ReplicatorStats:
    """What a replicator did; `copied_by_topic` holds the topics mirrored now (`Replicator._forget_topics`)."""

    copied: int = 0
    copied_by_topic: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    skipped: int = 0
    dropped: int = 0
    errors: int = 0
    stalled: bool = False
    stall_episodes: int = 0
    lag: int = 0
    retention_skipped: int = 0  # source offsets deleted before they were read, each counted once


def provenance(headers) -> list[str]:
    """The clusters a message has been in, from its `kaudit-path` header.

    Read name by name: one garbled name (not ASCII) is left out, the others still stop a cycle.
    """
    value = header_value(headers, PROVENANCE_HEADER)
    if not value or not isinstance(value, bytes):
        return []
    return [name.decode("ascii") for name in value.split(b",") if name and name.isascii()]


def lags_and_stall(
    flows: dict[tuple[str, int], PartitionFlow], ends: dict[tuple[str, int], int], now: float, stall_after_s: float
) -> tuple[dict[tuple[str, int], int], bool]:
    """Lag per partition, and whether any partition lags with nothing acknowledged for `stall_after_s`.

    A partition whose end is unknown (source broker down) is left out: not idle, not lag 0. An idle
    partition (lag 0) counts as progress, so idle is never stalled."""
    lags = {key: max(ends[key] - flow.acked, 0) for key, flow in flows.items() if key in ends}
    stalled = any(lag > 0 and now - flows[key].last_progress > stall_after_s for key, lag in lags.items())
    for key, lag in lags.items():
        if lag == 0:
            flows[key].last_progress = now
    return lags, stalled


def copy_headers(headers: list, path: list[str], source: str, timestamp_kind: int, timestamp_ms: int) -> list:
    """A copy's headers: the source's, the provenance path with `source` added (cycles stop on it), and,
    for a LogAppendTime message without a usable one, the audit-time header holding the source's time,
    last so that it is the one read: the target stamps its own append time, and every tier must bucket
    the message by one time."""
    stamped = [(k, v) for k, v in headers if k != PROVENANCE_HEADER]
    stamped.append((PROVENANCE_HEADER, ",".join([*path, source] if source not in path else path).encode()))
    carried = parse_audit_time_header(header_value(headers, AUDIT_TIME_HEADER))
    if timestamp_kind == TIMESTAMP_LOG_APPEND_TIME and carried is None:
        stamped.append((AUDIT_TIME_HEADER, b"%d" % timestamp_ms))
    return stamped
