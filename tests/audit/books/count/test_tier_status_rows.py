"""Where each tier stands (`tier_status_rows`): the reporter partitions' newest statuses summed per tier and
logical topic, and the rule that a replicator alone cannot make a cluster tier's windows final."""

from __future__ import annotations

from datetime import UTC, datetime

from audit.books.count.tier_status import tier_status_rows
from audit.contract.windows import EPOCH

CLUSTERS = ("dc1", "aggregate")
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def at(minute: int) -> datetime:
    return datetime(2026, 11, 27, 11, minute, tzinfo=UTC)


def partition(tier: str, cluster: str, service: str, number: int, *, lag=0, watermark=0, stalled=False) -> dict:
    return {
        "tier": tier,
        "cluster": cluster,
        "seen_topic": "orders" if cluster == "dc1" else "dc1.orders",
        "service": service,
        "partition": number,
        "origin_cluster": "dc1",
        "topic": "orders",
        "logical_topic": "dc1.orders",
        "lag": lag,
        "partition_watermark": at(watermark),
        "stalled": stalled,
        "emitted_at": at(watermark + 1),
    }


def by_tier(partitions: list[dict]) -> dict[str, dict]:
    return {row["tier"]: row for row in tier_status_rows(partitions, CLUSTERS, NOW)}


def test_a_tier_sums_its_reporters_and_its_watermark_is_the_lowest_partitions():
    status = by_tier(
        [
            partition("aggregate", "aggregate", "kaudit-counter", 0, lag=3, watermark=20),
            partition("aggregate", "aggregate", "kaudit-counter", 1, lag=4, watermark=10),
            partition("aggregate", "dc1", "kaudit-mirror", 0, lag=0, watermark=5, stalled=True),
        ]
    )["aggregate"]
    assert status["watermark"] == at(5), "the replicator's partition counts once the tier's own counter reported"
    assert (status["lag"], status["stalled"]) == (7, True)
    assert status["reporters"] == "kaudit-counter@aggregate, kaudit-mirror@dc1"
    assert status["last_status_at"] == at(21) and status["updated_at"] == NOW
    assert (status["origin_cluster"], status["topic"], status["logical_topic"]) == ("dc1", "orders", "dc1.orders")


def test_a_cluster_tier_only_a_replicator_reported_on_has_seen_nothing_for_sure():
    status = by_tier(
        [
            partition("aggregate", "dc1", "kaudit-mirror", 0, watermark=30),
            partition("lake", "aggregate", "kaudit-lake", 0, watermark=30),
        ]
    )
    assert status["aggregate"]["watermark"] == EPOCH, "no status of the aggregate's own counter"
    assert status["lake"]["watermark"] == at(30), "the lake is not a cluster tier: its job reports for it"


def test_unknown_lags_and_stalls_stay_unknown():
    status = by_tier([partition("dc1", "dc1", "kaudit-counter", 0, lag=None, stalled=None)])["dc1"]
    assert (status["lag"], status["stalled"]) == (None, None)


def test_the_audit_topic_and_its_copies_get_no_tier_status_row():
    # issue 60: the replicator's status about dc1's `_audit`, copied to the aggregate as `dc1._audit`, is no data topic.
    audit = {**partition("aggregate", "dc1", "kaudit-mirror", 0), "seen_topic": "_audit", "topic": "_audit"}
    audit.update(logical_topic="dc1._audit", partition_watermark=EPOCH, lag=5)
    rows = tier_status_rows([partition("lake", "aggregate", "kaudit-lake", 0), audit], CLUSTERS, NOW)
    assert [row["logical_topic"] for row in rows] == ["dc1.orders"]
    renamed = tier_status_rows([audit], CLUSTERS, NOW, audit_topic="_kaudit_audit")
    assert [row["logical_topic"] for row in renamed] == ["dc1._audit"]
