"""The audit records one counter instance writes: a count delta per topic and window, a status per topic, each
under a record id of its own (the instance id and a sequence number)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from audit.contract.record import AuditRecord, PartitionStatus, count_record, new_instance_id, record_id, status_record
from audit.contract.retention import RetentionGap
from audit.contract.tally import WindowTally
from audit.contract.watermarks import watermark_ms
from audit.hops.counter.state import SERVICE, CounterOptions


class CounterRecords:
    """Builds the records of one counter instance; `instance_id` is new for every process start."""

    def __init__(self, options: CounterOptions, *, host: str | None = None) -> None:
        self.options = options
        self.host = host or socket.gethostname()
        self.instance_id = new_instance_id(f"{SERVICE}-{options.cluster}")
        self._sequence = 0

    def counts(self, deltas: Mapping[tuple[str, int], WindowTally]) -> list[AuditRecord]:
        """A count record per (topic, window start) of `deltas`, in that order."""
        return [
            count_record(
                **self._identity(),
                topic=topic,
                window_start_ms=start,
                count=tally.count,
                bytes=tally.bytes,
                no_timestamp=tally.no_timestamp,
                by_partition=dict(tally.by_partition) or None,
                digest_by_partition=tally.digests(),
                latency_ms=tally.latency_ms(),
            )
            for (topic, start), tally in sorted(deltas.items())
        ]

    def statuses(
        self,
        by_topic: Mapping[str, list[PartitionStatus]],
        now_ms: int,
        gaps_of: Callable[[str], tuple[RetentionGap, ...]],
    ) -> list[AuditRecord]:
        """A status record per topic: its partitions, its watermark at `now_ms`, its retention gaps."""
        return [
            status_record(
                **self._identity(),
                topic=topic,
                partitions=tuple(partitions),
                watermark_ms=watermark_ms(partitions, now_ms),
                retention_gaps=gaps_of(topic),
            )
            for topic, partitions in by_topic.items()
        ]

    def _identity(self) -> dict[str, Any]:
        """The fields every record of this instance carries, with a fresh record id."""
        self._sequence += 1
        return {
            "record_id": record_id(self.instance_id, self._sequence),
            "tier": self.options.cluster,
            "cluster": self.options.cluster,
            "service": SERVICE,
            "host": self.host,
            "instance_id": self.instance_id,
            "window_minutes": self.options.window_minutes,
        }
