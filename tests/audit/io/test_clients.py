"""Kafka client helpers against a broker that is not there."""

from __future__ import annotations


def test_the_admin_client_is_renewed_after_an_unanswered_query_at_most_once_per_interval():
    from confluent_kafka.admin import OffsetSpec

    from audit.io.clients import Admin

    nobody = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    eager = Admin(nobody, renew_every_s=0.0)
    first = eager.client
    assert eager.list_offsets([("t", 0)], OffsetSpec.latest(), timeout_s=0.5) == {}
    assert eager.client is not first, "an unanswered query renews the client"

    patient = Admin(nobody, renew_every_s=3600.0)
    first = patient.client
    for _ in range(2):
        assert patient.list_offsets([("t", 0)], OffsetSpec.latest(), timeout_s=0.5) == {}
    assert patient.client is first, "while the broker is away, not a new client per query"


def test_committed_offsets_are_asked_again_until_the_timeout_then_the_error_names_what_was_asked(caplog):
    import time

    import pytest
    from confluent_kafka import Consumer, TopicPartition

    from audit.contract.errors import KafkaClientError
    from audit.io.clients import committed_offsets

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0})
    began = time.monotonic()
    try:
        with pytest.raises(KafkaClientError, match="did not answer committed offsets for 2 partitions in 2 s"):
            committed_offsets(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)], timeout_s=2, attempt_s=0.5)
    finally:
        consumer.close()
    assert 1.9 <= time.monotonic() - began < 5
    asked_again = [r for r in caplog.records if r.getMessage() == "committed offsets not answered; asking again"]
    assert len(asked_again) >= 2, "each unanswered attempt is followed by a fresh request"
