"""Retention gaps: offsets a reader skipped because the broker had deleted them before it got there.

A consumer with `auto.offset.reset=earliest` (the counter's and the replicator's) whose next offset
fell below the partition's log start offset (retention, or `delete_records`) silently resumes at the
log start: nothing tells the application. Skipping offsets is otherwise normal (transaction markers,
aborted batches, compaction), so a reader checks a skip against the log start offset: only the
offsets below it were deleted before it read them, and those are real loss for its tier.

Pure: the hops feed it what they read; the books sum what the hops report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

MAX_GAPS_PER_TOPIC = 32  # a status record carries at most this many (the newest) gaps of its topic


@dataclass(frozen=True)
class RetentionGap:
    """Offsets [from_offset, to_offset) of one partition, deleted before the reporting tier read them."""

    partition: int
    from_offset: int  # the reader's next offset when the gap began
    to_offset: int  # the log start offset it resumed at
    after_time_ms: int | None = None  # audit time of the last message read before the gap (None: unknown)
    before_time_ms: int | None = None  # audit time of the first message read after it (None: none yet)

    @property
    def skipped(self) -> int:
        return self.to_offset - self.from_offset


def deleted_range(expected: int, resumed_at: int, log_start: int) -> tuple[int, int] | None:
    """The offsets a reader lost to retention, or None.

    `expected` is the next offset the reader was at; `resumed_at` the offset it read next (or the position
    its consumer moved to without a message); `log_start` the partition's log start offset, asked right
    after. Offsets in [expected, log_start) were deleted before the reader got them, when the reader has
    indeed passed the log start. A skip that ends below the log start (markers, aborted batches) is no loss.
    """
    if resumed_at >= log_start > expected:
        return expected, log_start
    return None


def first_resumed(expected: int, offsets: Iterable[int], log_start: int) -> tuple[int, int] | None:
    """Where a reader that read `offsets` (ascending, one partition) from `expected` on lost offsets to
    retention: (from, to) with the offsets read before the log start counted as read, or None."""
    position = expected
    for offset in offsets:
        if offset >= log_start:
            return deleted_range(position, offset, log_start)
        position = max(position, offset + 1)
    return None


def add_gap(gaps: list[RetentionGap], gap: RetentionGap) -> list[RetentionGap]:
    """`gaps` (one reader's) with `gap` added; a gap that overlaps an earlier one of its partition (the
    same deletion found again after a rewind) is merged with it, so its offsets count once."""
    merged = gap
    kept = []
    for old in gaps:
        if (
            old.partition == merged.partition
            and old.from_offset < merged.to_offset
            and merged.from_offset < old.to_offset
        ):
            merged = replace(
                merged,
                from_offset=min(old.from_offset, merged.from_offset),
                to_offset=max(old.to_offset, merged.to_offset),
                after_time_ms=_earliest(old.after_time_ms, merged.after_time_ms),
                before_time_ms=_latest(old.before_time_ms, merged.before_time_ms),
            )
        else:
            kept.append(old)
    return [*kept, merged][-MAX_GAPS_PER_TOPIC:]


def union_skipped(ranges: Iterable[tuple[int, int]]) -> int:
    """How many offsets the union of [from, to) ranges covers: the same gap reported twice (two status
    records, two instances) counts once."""
    total = 0
    reach = None
    for start, end in sorted(ranges):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _earliest(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else min(a, b)


def _latest(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)
