"""The `catching up` line of a replicator run until caught up says where its consumer stands on each partition behind
assigned to it (no broker: the replicator is built, never opened, and its consumer is a stand-in)."""

from __future__ import annotations

import logging

from confluent_kafka import TopicPartition

from audit.hops.replicator import status as replicator_status
from audit.hops.replicator.state import PartitionFlow
from audit.io.logs import KeyValueFormatter
from tests.audit.hops.test_replicator import PREFIX, options_for, replicator


class Positions:
    """A consumer that has fetched nothing of any partition yet (librdkafka's -1001), asked only for positions."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, int]]] = []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.asked.append([(tp.topic, tp.partition) for tp in partitions])
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]


def test_a_catch_up_line_names_the_consumer_position_of_each_partition_assigned_here(caplog, unique_name):
    """A partition stuck behind with nothing in flight: its flow alone cannot tell a consumer that never fetched it
    from one that fetched past it; the line says which."""
    mirror = replicator("127.0.0.1:1", "127.0.0.1:1", options_for(unique_name), PREFIX, lambda t: True)
    mirror.flows[("_audit", 0)] = PartitionFlow(committed=2, acked=2, next_offset=2)
    mirror._consumer = consumer = Positions()
    caplog.set_level(logging.INFO, logger=replicator_status.__name__)
    caplog.handler.setFormatter(KeyValueFormatter())

    mirror._log_behind({("_audit", 0): 2, ("orders", 1): 3})

    [line] = [caplog.handler.format(r) for r in caplog.records if r.getMessage() == "catching up"]
    assert "_audit[0]:2:committed=2,acked=2,next=2,in-flight=0,position=-1001" in line, line
    assert "orders[1]:3:not-assigned-here" in line, line
    assert consumer.asked == [[("_audit", 0)]], "only partitions assigned here are asked"
