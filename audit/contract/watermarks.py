"""Where a reporter stands: partition statuses from positions and end offsets, and the watermark rule
every tier's status records share (the time up to which the tier has seen everything)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from audit.contract.record import PartitionStatus
from audit.contract.windows import EPOCH

# A tier with lag that has delivered nothing yet has no watermark: the books store the epoch for it. A watermark
# before this is "not reported yet", never a time: no email, UI cell or table shows it as a date.
FIRST_REAL_WATERMARK = EPOCH + timedelta(days=1)


def is_real_watermark(watermark: datetime) -> bool:
    """Whether a stored watermark is a time, not the epoch standing for "nothing delivered yet"."""
    return watermark >= FIRST_REAL_WATERMARK


def watermark_ms(partitions: Iterable[PartitionStatus], now_ms: int) -> int | None:
    """The time up to which a tier has seen everything, the same rule for every tier's status records.

    A caught-up partition (lag 0) has seen everything produced so far: `now_ms`. A lagging one has
    seen up to its last acknowledged message's time; None when that is unknown, which makes the
    whole watermark unknown. With no partitions, nothing is behind: `now_ms`.
    """
    watermark = now_ms
    for status in partitions:
        seen_up_to = now_ms if status.lag == 0 else status.last_audit_time_ms
        if seen_up_to is None:
            return None
        watermark = min(watermark, seen_up_to)
    return watermark


def topic_statuses(
    positions: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], int],
    last_audit_times: Mapping[tuple[str, int], int | None],
) -> tuple[dict[str, list[PartitionStatus]], list[str]]:
    """Each topic's partition statuses from a reporter's positions and the broker's end offsets, and
    the topics left out because an end offset is unknown (its broker down or its leader moving).

    A partition whose end is unknown must not be reported as lag 0: that would move the tier's
    watermark to now past messages the reporter has not seen, and the windows they belong to would
    turn final and short (a false loss). The reporter's previous status stays the newest instead.
    """
    by_topic: dict[str, list[PartitionStatus]] = {}
    unknown: set[str] = set()
    for (topic, partition), position in sorted(positions.items()):
        end = ends.get((topic, partition))
        if end is None:
            unknown.add(topic)
            continue
        end = max(end, position)
        by_topic.setdefault(topic, []).append(
            PartitionStatus(partition, position, end, end - position, last_audit_times.get((topic, partition)))
        )
    return {topic: parts for topic, parts in by_topic.items() if topic not in unknown}, sorted(unknown)


def tier_watermark(tier: str, cluster_names: tuple[str, ...], partitions: list[dict]) -> datetime | None:
    """A tier's watermark from the newest status of each of its reporter partitions (`_partition_status` rows):
    the lowest `partition_watermark`.

    A replicator into a cluster tier says what has arrived there, not what the tier's counter has counted:
    without a status of the tier's own counter (a counter not started or hung) the tier has seen nothing for
    sure (the epoch), else its windows would turn final with nothing counted."""
    own = [row for row in partitions if not (tier in cluster_names and row["cluster"] != tier)]
    if not own:
        return EPOCH
    return min(
        (row["partition_watermark"] for row in partitions if row["partition_watermark"] is not None), default=None
    )
