"""Where a replicator instance stands on each source partition assigned to it: one `PartitionFlow` each (what
was read, sent, acknowledged by the target, committed), all under one lock, since the target's delivery callbacks
and the status read them; and the acknowledged position of the partitions it gave up at a revoke, resumed from
should they come back to it."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping

from confluent_kafka import Consumer, TopicPartition

from audit.hops.replicator.state import PartitionFlow, lags_and_stall
from audit.hops.retention import Skip, seek_past_deleted

Key = tuple[str, int]  # (topic, partition)


class SourcePositions:
    def __init__(self) -> None:
        self.flows: dict[Key, PartitionFlow] = {}
        self.lock = threading.Lock()
        self.released: dict[Key, int] = {}  # acknowledged position of partitions given up

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, starts: Mapping[Key, int], committed: Mapping[Key, int]) -> list[TopicPartition]:
        """A flow per partition from its start (the next offset to copy) and its committed offset; the
        partitions with their starts, for the consumer."""
        with self.lock:
            for key, start in starts.items():
                self.flows[key] = PartitionFlow(committed=committed[key], acked=start, next_offset=start)
        return [TopicPartition(topic, partition, start) for (topic, partition), start in starts.items()]

    def resumed(self, starts: Mapping[Key, int]) -> dict[Key, int]:
        """`starts` moved past what the target acknowledged of the partitions this process copied before the
        rebalance, even when the commit at the revoke did not land (it can fail mid-rebalance)."""
        with self.lock:
            return {key: max(start, self.released.pop(key, -1)) for key, start in starts.items()}

    def release(self, partitions: list[TopicPartition], *, remember: Collection[str] = ()) -> None:
        """Drop the flows of revoked `partitions`; those of the topics in `remember` keep their acknowledged
        position for `resumed` (a topic gone is not assigned again)."""
        with self.lock:
            for tp in partitions:
                flow = self.flows.pop((tp.topic, tp.partition), None)
                if flow is not None and tp.topic in remember:
                    self.released[(tp.topic, tp.partition)] = flow.acked

    def forget_topics(self, present: set[str]) -> None:
        with self.lock:
            self.released = {key: acked for key, acked in self.released.items() if key[0] in present}

    def of(
        self, keys: list[Key], consumer: Consumer | None = None
    ) -> dict[Key, tuple[PartitionFlow | None, int | None]]:
        """The flow of each of `keys` (None: not assigned here) and, given the `consumer`, its position: the offset
        of the next message it will hand over, -1001 while it has fetched nothing of the partition."""
        with self.lock:
            flows = {key: self.flows.get(key) for key in keys}
        mine = [TopicPartition(*key) for key, flow in flows.items() if flow is not None]
        at = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(mine)} if consumer and mine else {}
        return {key: (flow, at.get(key)) for key, flow in flows.items()}

    # -- acknowledgement and commit (at least once) --------------------------------------------

    def sent(self, flow: PartitionFlow, offset: int) -> None:
        with self.lock:
            flow.sent.append(offset)

    def acknowledge(self, key: Key, offset: int, timestamp_ms: int, *, sent: bool = True) -> None:
        """The target acknowledged `offset` (`sent=False`: it was never sent, and is done at once)."""
        with self.lock:
            flow = self.flows.get(key)
            if flow is not None:
                if not sent:
                    flow.sent.append(offset)
                flow.acknowledge(offset, timestamp_ms)

    def committable(self) -> list[TopicPartition]:
        """Per partition, the position before which the target acknowledged everything, where not committed."""
        with self.lock:
            return [TopicPartition(t, p, f.acked) for (t, p), f in self.flows.items() if f.acked > f.committed]

    def mark_committed(self, offsets: list[TopicPartition]) -> None:
        with self.lock:
            for tp in offsets:
                flow = self.flows.get((tp.topic, tp.partition))
                if flow is not None:
                    flow.committed = max(flow.committed, tp.offset)

    # -- exactly once: positions committed on the target ---------------------------------------

    def advance(self, committed: Mapping[Key, tuple[int, int]], now: float) -> None:
        """Positions committed on the target with their copies ((next offset, audit time before it) each)."""
        with self.lock:
            for key, (position, timestamp_ms) in committed.items():
                flow = self.flows.get(key)
                if flow is not None:
                    flow.acked = max(flow.acked, position)
                    flow.last_progress = now
                    if timestamp_ms > 0:
                        flow.last_audit_time_ms = timestamp_ms

    def rewind(self, stored: Mapping[Key, int]) -> list[TopicPartition]:
        """Every assigned partition back to its position in `stored`; the seeks for the consumer."""
        with self.lock:
            back = [TopicPartition(t, p, position) for (t, p), position in stored.items() if (t, p) in self.flows]
            for tp in back:
                self.flows[(tp.topic, tp.partition)].next_offset = tp.offset
        return back

    # -- what the consumer passed over ---------------------------------------------------------

    def idle(self) -> list[TopicPartition]:
        """The partitions with nothing in flight."""
        with self.lock:
            return [
                TopicPartition(topic, partition) for (topic, partition), flow in self.flows.items() if not flow.sent
            ]

    def read_past(self, positions: list[TopicPartition]) -> list[Skip]:
        """Move each idle partition over what its consumer passed (`positions`) without a message: commit and
        abort markers, aborted batches, neither lag nor something to copy. The skips, for the retention check:
        its consumer may also have jumped to the log start after a deletion, with no message since."""
        skips = []
        with self.lock:
            for tp in positions:
                flow = self.flows.get((tp.topic, tp.partition))
                if flow is None or flow.sent:
                    continue
                flow.acked = max(flow.acked, tp.offset)
                if tp.offset > flow.next_offset >= 0:
                    skips.append(Skip(tp.topic, tp.partition, flow.next_offset, (tp.offset,), flow.last_audit_time_ms))
                    flow.next_offset = tp.offset
        return skips

    def idle_behind(self, ends: Mapping[Key, int]) -> list[Key]:
        with self.lock:
            return [key for key, flow in self.flows.items() if not flow.sent and ends.get(key, -1) > flow.acked]

    def pass_deleted(self, consumer, behind: list[Key], log_starts: Mapping[Key, int]) -> list[Skip]:
        """Idle partitions of `behind` whose next offset retention deleted move to their log start
        (`seek_past_deleted`); the skips."""
        with self.lock:
            idle = {key: flow for key in behind if (flow := self.flows.get(key)) is not None and not flow.sent}
            positions = {key: (max(f.acked, f.next_offset), f.last_audit_time_ms) for key, f in idle.items()}
            skips = seek_past_deleted(consumer, positions, dict(log_starts))
            for skip in skips:
                idle[(skip.topic, skip.partition)].acked = idle[(skip.topic, skip.partition)].next_offset = (
                    skip.offsets[0]
                )
        return skips

    # -- where it stands -----------------------------------------------------------------------

    def lags(self, ends: Mapping[Key, int], now: float, stall_after_s: float) -> tuple[dict[Key, int], bool]:
        with self.lock:
            return lags_and_stall(self.flows, dict(ends), now, stall_after_s)

    def snapshot(self) -> tuple[dict[Key, int], dict[Key, int | None]]:
        """The acknowledged position and the last audit time of each partition."""
        with self.lock:
            return (
                {key: flow.acked for key, flow in self.flows.items()},
                {key: flow.last_audit_time_ms for key, flow in self.flows.items()},
            )
