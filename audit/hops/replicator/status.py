"""What a replicator says about what it did and where it stands: its counts (stats and metrics, per topic while
the topic is mirrored), its lag and its stalls (in its stats, its gauges and the log), a status record per topic
for the source's audit topic (tier = the target), and, while a run catches up, which partitions are behind and
where this instance stands on each."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import TopicPartition

from audit.contract.record import AuditRecord, record_id, status_record
from audit.contract.retention import RetentionGap
from audit.contract.watermarks import topic_statuses, watermark_ms
from audit.hops.replicator.state import (
    COPIED,
    DROPPED,
    ERRORS,
    LAG,
    RETENTION_SKIPPED,
    SERVICE,
    SKIPPED,
    STALLED,
    PartitionFlow,
    ReplicatorOptions,
    ReplicatorStats,
)
from audit.hops.upkeep import drop_series

log = logging.getLogger(__name__)

PARTITIONS_LOGGED = 5  # a "catching up" line names at most this many partitions


def flow_state(flow: PartitionFlow | None, position: int | None = None) -> str:
    """Where this instance stands on a partition, for a log line; `position`, its consumer's, when known."""
    if flow is None:
        return "not-assigned-here"
    state = f"committed={flow.committed},acked={flow.acked},next={flow.next_offset},in-flight={len(flow.sent)}"
    return state if position is None else f"{state},position={position}"


class ReplicatorStatus:
    """The reports of one replicator instance (`instance_id`), into its `stats` and its metrics."""

    def __init__(self, options: ReplicatorOptions, stats: ReplicatorStats, instance_id: str) -> None:
        self.options = options
        self.stats = stats
        self.instance_id = instance_id
        self._labels = (options.source, options.target)
        self._sequence = 0
        self.copied_metrics: dict[str, Any] = {}  # prometheus_client children, one per topic

    # -- counts --------------------------------------------------------------------------------

    def copied(self, topic: str, count: int = 1) -> None:
        """`count` messages of `topic` acknowledged (or committed) by the target."""
        self.stats.copied += count
        self.stats.copied_by_topic[topic] += count
        metric = self.copied_metrics.get(topic)
        if metric is None:
            metric = self.copied_metrics[topic] = COPIED.labels(self.options.source, self.options.target, topic)
        metric.inc(count)

    def not_copied(self, topic: str, *, dropped: bool) -> None:
        """One message dropped by the fault hook, or skipped because the target is on its path."""
        if dropped:
            self.stats.dropped += 1
            DROPPED.labels(self.options.source, self.options.target, topic).inc()
        else:
            self.stats.skipped += 1
            SKIPPED.labels(*self._labels).inc()

    def error(self) -> None:
        self.stats.errors += 1
        ERRORS.labels(*self._labels).inc()

    def forget_topics(self, gone: set[str]) -> None:
        """Drop the counts and metric series of topics no longer mirrored."""
        for topic in gone:
            self.copied_metrics.pop(topic, None)
            self.stats.copied_by_topic.pop(topic, None)
            for metric in (COPIED, DROPPED, RETENTION_SKIPPED):
                drop_series(metric, source=self.options.source, target=self.options.target, topic=topic)

    # -- where it stands -----------------------------------------------------------------------

    def judge(self, lags: Mapping[tuple[str, int], int], stalled: bool) -> None:
        """Take this check's lag per partition and stall verdict (`state.lags_and_stall`): a stall is
        logged once when it begins and once when it ends."""
        self.stats.lag = sum(lags.values())
        LAG.labels(*self._labels).set(self.stats.lag)
        if stalled and not self.stats.stalled:
            self.stats.stall_episodes += 1
            log.error(
                "replication stalled: lag with no progress",
                extra={**self._fields(), "lag": self.stats.lag, "stall_after_s": self.options.stall_after_s},
            )
        elif self.stats.stalled and not stalled:
            log.warning("replication recovered", extra=self._fields())
        self.stats.stalled = stalled
        STALLED.labels(*self._labels).set(1 if stalled else 0)

    def records(
        self,
        positions: Mapping[tuple[str, int], int],
        audit_times: Mapping[tuple[str, int], int | None],
        lags: Mapping[tuple[str, int], int],
        gaps_of: Callable[[str], tuple[RetentionGap, ...]],
    ) -> list[AuditRecord]:
        """A status record per topic from the acknowledged `positions` and this check's `lags`; a topic with a
        partition whose end is unknown is withheld (logged), never reported as lag 0."""
        now_ms = time.time_ns() // 1_000_000
        ends = {key: positions[key] + lag for key, lag in lags.items() if key in positions}
        by_topic, withheld = topic_statuses(positions, ends, audit_times)
        if withheld:
            log.warning("status withheld: end offsets unknown", extra={**self._fields(), "topics": ",".join(withheld)})
        records = []
        for topic, partitions in by_topic.items():
            self._sequence += 1
            records.append(
                status_record(
                    record_id=record_id(self.instance_id, self._sequence),
                    tier=self.options.target,
                    cluster=self.options.source,
                    service=SERVICE,
                    instance_id=self.instance_id,
                    topic=topic,
                    window_minutes=self.options.window_minutes,
                    partitions=partitions,
                    watermark_ms=watermark_ms(partitions, now_ms),
                    stalled=self.stats.stalled,
                    retention_gaps=gaps_of(topic),
                    emitted_at_ms=now_ms,
                )
            )
        return records

    def log_assignment(self, starts: list[TopicPartition], **counts: int) -> None:
        log.info(
            "partitions assigned",
            extra={
                **self._fields(),
                "partitions": len(starts),
                **counts,
                "first": " ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in starts[:PARTITIONS_LOGGED]),
            },
        )

    def log_behind(
        self,
        behind: Mapping[tuple[str, int], int],
        flows: Mapping[tuple[str, int], tuple[PartitionFlow | None, int | None]],
    ) -> None:
        """One `catching up` line: the group's lag, and this instance's `flows` of the first partitions behind with
        its consumer's position on each (`SourcePositions.of`)."""
        log.info(
            "catching up",
            extra={
                **self._fields(),
                "partitions_behind": len(behind),
                "lag": sum(behind.values()),
                "first": " ".join(f"{t}[{p}]:{behind[(t, p)]}:{flow_state(*flow)}" for (t, p), flow in flows.items()),
            },
        )

    def _fields(self) -> dict[str, str]:
        return {"source": self.options.source, "target": self.options.target}
