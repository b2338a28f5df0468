"""The pipeline run by `kaudit demo` and the end-to-end tests: produce, count, read the books back.

Today it covers the producer and cluster tiers of the regional clusters; the replicator, lake and
reconciliation stages join it as they are built.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field

from audit.audit_log import counts_by_window, read_audit_topic
from audit.clients import client_config, ensure_topics
from audit.counter import ClusterCounter, CounterOptions
from producers.loadgen import Progress, audited_producer, generate

DEMO_TOPICS = ("orders", "clicks", "payments")
DEMO_PARTITIONS = 6


@dataclass
class TierTotals:
    """Per tier, per (topic, window): the count the audit topic says."""

    counts: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def by_topic(self, tier: str) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for (topic, _window), count in self.counts.get(tier, {}).items():
            totals[topic] += count
        return dict(totals)


@dataclass
class Summary:
    regional: list[str]  # the clusters producers write to; each is also the name of its tier
    totals: TierTotals

    @property
    def exact(self) -> bool:
        """Every regional cluster counted exactly what its producers had acknowledged, window by window."""
        producer = self.totals.counts.get("producer", {})
        return all(
            {key: n for key, n in self.totals.counts.get(cluster, {}).items() if key[0].startswith(f"{cluster}.")}
            == {key: n for key, n in producer.items() if key[0].startswith(f"{cluster}.")}
            for cluster in self.regional
        )

    def table(self) -> str:
        tiers = ["producer", *self.regional]
        topics = sorted({topic for tier in tiers for topic in self.totals.by_topic(tier)})
        lines = [f"{'topic':<20}" + "".join(f"{tier:>12}" for tier in tiers) + f"{'windows':>9}"]
        for topic in topics:
            windows = {w for (t, w) in self.totals.counts.get("producer", {}) if t == topic}
            lines.append(f"{topic:<20}" + "".join(f"{self.totals.by_topic(tier).get(topic, 0):>12,}" for tier in tiers)
                         + f"{len(windows):>9}")
        lines.append("every cluster tier equals the producer tier, window by window" if self.exact
                     else "MISMATCH between producer and cluster counts")
        return "\n".join(lines)


def audit_regional_traffic(settings, *, messages: int, backfill_hours: float, seed: int = 0) -> Summary:
    """Backfill audited traffic into each regional cluster, count it there, and read both tiers back."""
    regional = [cluster.name for cluster in settings.clusters][:-1] or [settings.clusters[0].name]
    totals = TierTotals()
    for index, cluster in enumerate(regional):
        config = client_config(settings, cluster)
        topics = [f"{cluster}.{topic}" for topic in DEMO_TOPICS]
        ensure_topics(config, {topic: DEMO_PARTITIONS for topic in topics} | {settings.audit_topic: 1})
        with audited_producer(settings, cluster, service="kaudit-demo") as producer:
            generate(producer, topics, count=messages, backfill_hours=backfill_hours, seed=seed + index,
                     window_minutes=settings.window_minutes, progress=Progress(f"produce {cluster}", messages))
        options = CounterOptions(cluster=cluster, audit_topic=settings.audit_topic, window_minutes=settings.window_minutes,
                                 flush_interval_s=1.0, topic_refresh_s=5.0)
        stats = ClusterCounter(config, options, settings.topics.matches).run(until_caught_up=True, max_seconds=300)
        print(f"count {cluster}: {stats.counted:,} messages, {stats.flushes} transactions", file=sys.stderr)
        records, _rejects = read_audit_topic(config, settings.audit_topic)
        for tier in ("producer", cluster):
            merged = totals.counts.setdefault(tier, {})
            merged.update(counts_by_window(records, tier))
    return Summary(regional, totals)
