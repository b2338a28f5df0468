"""What keeps a long-running hop right in its second year: the audit topic's own retention, checked at start,
and the metric series of topics that are gone, dropped.

The audit topic is the books' only input. The reconciliation reads it from the offsets it stored, the
replicator copies it to the next cluster, and after a rebuild of the books it is read again from its start:
every audit topic must keep its records for the books' lookback (`alerts.lookback_hours`: how far back final
windows are judged and alerted on) plus the longest outage of a reader to survive (`max_outage_hours`). A
record deleted before it was read is a count the books never see: a false loss. Its `cleanup.policy` must not
compact either: audit records are keyed by topic name, so compaction would keep one record per topic.

The check never stops a start: it logs one WARNING per topic whose settings fall short, naming what it found,
what is needed and the `kafka-configs.sh` command that fixes it, and sets `kaudit_audit_topic_retention_short`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client import Gauge

from audit.io.clients import topic_configs
from audit.io.offsets import read_ranges
from audit.settings.alerts import AlertSettings
from audit.settings.root import DEFAULT_MAX_OUTAGE_HOURS

if TYPE_CHECKING:
    from prometheus_client.metrics import MetricWrapperBase

    from audit.settings import Settings

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
# A record's share of its batch's header and of the transaction marker after it, rounded up: what a record
# costs on the broker's disk beyond its key, value and headers (retention.bytes counts the log's bytes).
RECORD_OVERHEAD_BYTES = 70
SAMPLE_RECORDS = 100  # the newest records read to measure their size, when retention.bytes is set

RETENTION_SHORT = Gauge(
    "kaudit_audit_topic_retention_short",
    "1 when an audit topic keeps its records shorter than the books need (retention.ms, retention.bytes) or "
    "compacts them (cleanup.policy); checked at start, see docs/operations.md",
    ["service", "cluster", "topic", "config"],
)
CHECKED = ("retention.ms", "retention.bytes", "cleanup.policy")


def needed_retention_ms(lookback_hours: float, max_outage_hours: float) -> int:
    """How long every audit topic must keep its records: the books' lookback plus the longest outage."""
    return math.ceil((lookback_hours + max_outage_hours) * HOUR_MS)


DEFAULT_AUDIT_RETENTION_MS = needed_retention_ms(
    AlertSettings.model_fields["lookback_hours"].default, DEFAULT_MAX_OUTAGE_HOURS
)


def audit_retention_ms(settings: Settings) -> int:
    """`needed_retention_ms` of the configuration: `alerts.lookback_hours` plus `max_outage_hours`."""
    return needed_retention_ms(settings.alerts.lookback_hours, settings.max_outage_hours)


def shortfalls(configs: Mapping[str, str], needed_ms: int, needed_bytes: int | None) -> dict[str, tuple[str, str]]:
    """Of a topic's settings (`configs`, as in force), those that keep records shorter than `needed_ms` (or
    `needed_bytes` per partition; None: not known), by name: (found, needed). -1 is no limit."""
    short: dict[str, tuple[str, str]] = {}
    policy = configs.get("cleanup.policy", "delete")
    if "compact" in policy.split(","):
        short["cleanup.policy"] = (policy, "delete")
    retention_ms = int(configs.get("retention.ms", "-1"))
    if 0 <= retention_ms < needed_ms:
        short["retention.ms"] = (str(retention_ms), str(needed_ms))
    retention_bytes = int(configs.get("retention.bytes", "-1"))
    if needed_bytes is not None and 0 <= retention_bytes < needed_bytes:
        short["retention.bytes"] = (str(retention_bytes), str(needed_bytes))
    return short


def fix_command(bootstrap: str, topic: str, short: Mapping[str, tuple[str, str]]) -> str:
    """The `kafka-configs.sh` command that gives `topic` what `short` says it needs."""
    changes = ",".join(f"{name}={needed}" for name, (_found, needed) in short.items())
    return (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics --entity-name {topic} "
        f"--add-config {changes}"
    )


def check_audit_retention(
    admin: AdminClient,
    config: Mapping[str, Any],
    *,
    service: str,
    cluster: str,
    topic: str,
    needed_ms: int,
    timeout_s: float,
    now_ms: int | None = None,
) -> dict[str, tuple[str, str]] | None:
    """Check one audit topic's retention against `needed_ms`: logs a WARNING when it falls short and sets
    `kaudit_audit_topic_retention_short`. Returns the shortfalls (`shortfalls`), or None when the topic
    could not be checked (not there yet, or the broker did not answer); never raises."""
    try:
        configs = topic_configs(admin, [topic], timeout_s=timeout_s).get(topic)
        if configs is None:
            log.info("audit topic retention not checked: no such topic yet", extra={"cluster": cluster, "topic": topic})
            return None
        needed_bytes = None
        if int(configs.get("retention.bytes", "-1")) >= 0:
            now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
            needed_bytes = bytes_needed(admin, config, topic, needed_ms, now_ms=now_ms, timeout_s=timeout_s)
        short = shortfalls(configs, needed_ms, needed_bytes)
    except Exception as exc:  # noqa: BLE001 - a check that cannot be made must not stop the service
        log.warning(
            "audit topic retention not checked",
            extra={"service": service, "cluster": cluster, "topic": topic, "error": str(exc)},
        )
        return None
    for name in CHECKED:
        RETENTION_SHORT.labels(service, cluster, topic, name).set(1 if name in short else 0)
    if short:
        log.warning(
            "audit topic keeps its records shorter than the books need: counts deleted before they are read "
            "are reported as losses",
            extra={
                "service": service,
                "cluster": cluster,
                "topic": topic,
                "found": " ".join(f"{name}={found}" for name, (found, _needed) in short.items()),
                "needed": " ".join(f"{name}={needed}" for name, (_found, needed) in short.items()),
                "needed_hours": round(needed_ms / HOUR_MS, 2),
                "fix": fix_command(str(config.get("bootstrap.servers", "<bootstrap>")), topic, short),
            },
        )
    return short


def bytes_needed(
    admin: AdminClient, config: Mapping[str, Any], topic: str, needed_ms: int, *, now_ms: int, timeout_s: float
) -> int | None:
    """What the busiest partition of `topic` writes in `needed_ms` at the rate of the last hour: its offsets
    in that hour times the size of its newest records (up to SAMPLE_RECORDS of them read, plus
    RECORD_OVERHEAD_BYTES each). None when the last hour wrote nothing: no rate to judge by."""
    metadata = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    partitions = [TopicPartition(topic, p) for p in (metadata.partitions if metadata is not None else ())]
    if not partitions:
        return None
    ends = _offsets(admin, partitions, OffsetSpec.latest(), timeout_s)
    hour_ago = _offsets(admin, partitions, OffsetSpec.for_timestamp(now_ms - HOUR_MS), timeout_s)
    written = {p: end - (hour_ago[p] if hour_ago.get(p, -1) >= 0 else end) for p, end in ends.items()}
    busiest = max(written, key=written.__getitem__, default=None)
    if busiest is None or written[busiest] <= 0:
        return None
    end = ends[busiest]
    sample = read_ranges(
        config,
        {(topic, busiest): (max(end - SAMPLE_RECORDS, end - written[busiest]), end)},
        stall_s=timeout_s,
        what=f"the newest records of {topic}[{busiest}]",
        to_eof=True,
    )
    if not sample:
        return None
    size = sum(_record_bytes(message) for message in sample) / len(sample)
    return math.ceil(written[busiest] * size * needed_ms / HOUR_MS)


def _offsets(admin: AdminClient, partitions: list[TopicPartition], spec: OffsetSpec, timeout_s: float) -> dict:
    """partition -> offset (-1: none at or after the time asked), in one ListOffsets request."""
    futures = admin.list_offsets(
        {tp: spec for tp in partitions}, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s
    )
    return {tp.partition: future.result(timeout_s).offset for tp, future in futures.items()}


def _record_bytes(message) -> int:
    headers = message.headers() or []
    return (
        len(message.value() or b"")
        + len(message.key() or b"")
        + sum(len(k) + len(v or b"") for k, v in headers)
        + RECORD_OVERHEAD_BYTES
    )


def drop_series(metric: MetricWrapperBase, **labels: str) -> int:
    """Remove every series of `metric` (a labelled Counter or Gauge) whose labels include `labels` (a topic's,
    once it is gone); returns how many. A counter starts again from 0 should the topic come back, a reset
    Prometheus' rate() takes in its stride."""
    found = set()
    for family in metric.collect():
        for sample in family.samples:
            if all(sample.labels.get(key) == value for key, value in labels.items()):
                # A Counter's or Gauge's sample carries exactly the series' labels, in their declared order.
                found.add(tuple(sample.labels.values()))
    for values in found:
        metric.remove(*values)
    return len(found)
