"""What a hop does about offsets it skipped: ask the log start offsets, keep the retention gaps it found
(for its status records), count them (Prometheus) and log each one (see audit/contract/retention.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from confluent_kafka import KafkaException, TopicPartition

from audit.contract.retention import RetentionGap, add_gap, first_resumed, union_skipped
from audit.hops.upkeep import DEFAULT_AUDIT_RETENTION_MS

log = logging.getLogger(__name__)

EXPIRY_EVERY_MS = 60_000  # how often the gaps kept are checked for their age


@dataclass(frozen=True)
class Skip:
    """Offsets one partition skipped: the reader expected `expected`, then read `offsets` (ascending; the
    position its consumer moved to, for a skip with no message after it)."""

    topic: str
    partition: int
    expected: int
    offsets: tuple[int, ...]
    after_time_ms: int | None  # audit time of the last message read before the skip
    times_ms: tuple[int | None, ...] = ()  # audit times of `offsets`, where known


def skips_in_batch(skipped: dict[tuple[str, int], tuple[int, int | None]], messages: list) -> list[Skip]:
    """The skips of a consumed batch: for each partition in `skipped` ((topic, partition) -> (position
    before the batch, audit time before it)), the offsets and times of its messages in the batch."""
    read: dict[tuple[str, int], list] = {key: [] for key in skipped}
    for message in messages:
        found = read.get((message.topic(), message.partition()))
        if found is not None and not message.error():
            found.append(message)
    return [
        Skip(
            topic,
            partition,
            expected,
            tuple(m.offset() for m in read[(topic, partition)]),
            when_before,
            tuple(m.timestamp()[1] for m in read[(topic, partition)]),
        )
        for (topic, partition), (expected, when_before) in skipped.items()
    ]


def seek_past_deleted(
    consumer, behind: dict[tuple[str, int], tuple[int, int | None]], log_starts: dict[tuple[str, int], int]
) -> list[Skip]:
    """Seek each partition that is behind (key -> (next offset, audit time of the message before it)) and
    whose next offset retention has deleted to its log start; the skips, for `RetentionGaps.check`.

    Its consumer resets there by itself, but with no message after the gap the hop's position would never
    say so: lag for ever, a watermark that never passes the gap. The seek drops whatever was fetched below
    the log start, so the gap reported is exactly what the hop will never read."""
    skips = []
    for key, (position, time_before) in behind.items():
        log_start = log_starts.get(key)
        if log_start is None or log_start <= position:
            continue
        try:
            consumer.seek(TopicPartition(*key, log_start))
        except KafkaException as exc:  # not assigned any more: its next owner finds the gap
            log.info("seek skipped", extra={"topic": key[0], "partition": key[1], "error": exc.args[0].str()})
            continue
        skips.append(Skip(*key, position, (log_start,), time_before))
    return skips


class RetentionGaps:
    """One hop instance's retention gaps per topic; `count(topic, partition, n)` exports the newly skipped.

    Bounded whatever the deployment's age: at most MAX_GAPS_PER_TOPIC gaps a topic (`add_gap`), and a topic's gaps
    are forgotten once none was found for `keep_ms`. Its status records repeat them until then, and no reader of
    the audit topic needs them longer: `keep_ms` is what the audit topic must keep its records for (the books'
    lookback plus the longest outage of a reader, `upkeep.audit_retention_ms`), so a gap found is in status records
    for as long as the books judge its windows. A deleted topic's gaps leave with the same expiry."""

    def __init__(
        self,
        count: Callable[[str, int, int], None],
        *,
        keep_ms: int = DEFAULT_AUDIT_RETENTION_MS,
        clock: Callable[[], float] = time.time,
        **log_fields: str,
    ) -> None:
        self._count = count
        self._log_fields = log_fields
        self.keep_ms = keep_ms
        self._clock = clock  # seconds, wall clock
        self._gaps: dict[str, list[RetentionGap]] = {}
        self._found_ms: dict[str, int] = {}  # topic -> when its last gap was found
        self._open: set[tuple[str, int]] = set()  # partitions with a gap no message has been read after yet
        self._next_expiry_ms = 0
        self.skipped = 0  # offsets lost to retention, each counted once

    def of_topic(self, topic: str) -> tuple[RetentionGap, ...]:
        self._expire()
        return tuple(self._gaps.get(topic, ()))

    def _expire(self) -> None:
        """Forget the gaps of every topic none was found for in `keep_ms` (checked every EXPIRY_EVERY_MS)."""
        now_ms = int(self._clock() * 1000)
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + EXPIRY_EVERY_MS
        expired = {topic for topic, found_ms in self._found_ms.items() if now_ms - found_ms > self.keep_ms}
        for topic in expired:
            del self._gaps[topic], self._found_ms[topic]
        self._open = {key for key in self._open if key[0] not in expired}

    def check(
        self, skips: list[Skip], log_starts: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]
    ) -> int:
        """Compare `skips` with the partitions' log start offsets (asked now, once for all); returns the
        offsets newly found deleted. A skip whose log start is unknown (broker away) is not judged."""
        if not skips:
            return 0
        starts = log_starts(sorted({(s.topic, s.partition) for s in skips}))
        unknown = [s for s in skips if (s.topic, s.partition) not in starts]
        if unknown:
            log.warning(
                "skipped offsets not checked against retention: log start unknown",
                extra={**self._log_fields, "partitions": len(unknown)},
            )
        found = 0
        for skip in skips:
            log_start = starts.get((skip.topic, skip.partition))
            if log_start is None:
                continue
            deleted = first_resumed(skip.expected, skip.offsets, log_start)
            if deleted is None:
                continue
            before = next((t for o, t in zip(skip.offsets, skip.times_ms, strict=False) if o >= log_start and t), None)
            found += self._add(skip.topic, RetentionGap(skip.partition, *deleted, skip.after_time_ms, before))
        return found

    def close_open(self, messages: list) -> None:
        """Give a gap found before any message after it (by position) the audit time of the first one read."""
        if not self._open:
            return
        for message in messages:
            key = (message.topic(), message.partition())
            if key not in self._open or message.error():
                continue
            self._open.discard(key)
            gaps = self._gaps[key[0]]
            for index in range(len(gaps) - 1, -1, -1):
                if gaps[index].partition == key[1] and gaps[index].before_time_ms is None:
                    gaps[index] = replace(gaps[index], before_time_ms=message.timestamp()[1])
                    break
            if not self._open:
                return

    def _add(self, topic: str, gap: RetentionGap) -> int:
        gaps = self._gaps.get(topic, [])
        ranges = [(g.from_offset, g.to_offset) for g in gaps if g.partition == gap.partition]
        before = union_skipped(ranges)
        self._gaps[topic] = add_gap(gaps, gap)
        self._found_ms[topic] = int(self._clock() * 1000)
        if gap.before_time_ms is None:
            self._open.add((topic, gap.partition))
        new = union_skipped([*ranges, (gap.from_offset, gap.to_offset)]) - before
        log.warning(
            "offsets deleted by retention before they were read: lost for this tier",
            extra={
                **self._log_fields,
                "topic": topic,
                "partition": gap.partition,
                "from_offset": gap.from_offset,
                "to_offset": gap.to_offset,
                "skipped": gap.skipped,
                "newly_skipped": new,
            },
        )
        if new:
            self._count(topic, gap.partition, new)
            self.skipped += new
        return new
