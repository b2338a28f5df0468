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
