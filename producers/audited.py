"""The audited producer: confluent-kafka's Producer with kafka-audit's librdkafka plugin loaded.

Nothing is added to the send path: `produce` is confluent-kafka's own, and the plugin (native/plugin/),
configured through `plugin.library.paths` and the kaudit.* keys, counts each message in librdkafka once the
broker acknowledged it (or it failed for good: `send_failed`) and writes one count record per topic and
window into the audit topic of the same cluster every `flush_interval_s` (with the content digest of each
partition's keys and values, unless the topic matches `digest_exclude`), and once more when the client is
destroyed. What this class adds is the configuration, forced acks=all and idempotence (so a count never
claims a message the cluster could still lose), and `flush()`/`close()` that also hand over the counts so
far; any other librdkafka client is audited by the same two settings (audit/io/plugin.py).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Producer
from prometheus_client import Counter

from audit.contract.names import DEFAULT_AUDIT_TOPIC
from audit.contract.record import new_instance_id
from audit.contract.windows import DEFAULT_WINDOW_MINUTES
from audit.io import plugin

log = logging.getLogger(__name__)

DEFAULT_FLUSH_INTERVAL_S = plugin.DEFAULT_FLUSH_INTERVAL_MS / 1000
FORCED_CONFIG = {"acks": "all", "enable.idempotence": True}

# Updated when the application flushes, from the plugin's totals.
ACKED = Counter("kaudit_producer_messages_acked_total", "Messages the broker acknowledged", ["cluster"])
FAILED = Counter("kaudit_producer_send_failed_total", "Messages whose delivery failed for good", ["cluster"])


class AuditedProducer(Producer):
    """A confluent-kafka Producer whose deliveries the plugin counts, per topic, partition and window.

    Its memory does not grow with its age: the plugin holds the counts since its last emission only, and the
    audit records the audit topic has not taken yet (a bounded number)."""

    def __init__(
        self,
        *,
        config: Mapping[str, Any],
        cluster: str,
        audit_topic: str = DEFAULT_AUDIT_TOPIC,
        window_minutes: int = DEFAULT_WINDOW_MINUTES,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        service: str = "app",
        host: str | None = None,
        extra_config: Mapping[str, Any] | None = None,
        digest_exclude: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.audit_topic = audit_topic
        self.service = service
        self.host = host or socket.gethostname()
        self.instance_id = new_instance_id(service)
        self._closed = False
        self._reported = (0, 0)
        super().__init__(
            plugin.with_plugin(
                {**(extra_config or {}), **config, **FORCED_CONFIG},
                cluster=cluster,
                audit_topic=audit_topic,
                window_minutes=window_minutes,
                flush_interval_ms=max(10, round(flush_interval_s * 1000)),
                service=service,
                host=self.host,
                instance_id=self.instance_id,
                digest_exclude=digest_exclude,
            )
        )

    @property
    def producer(self) -> AuditedProducer:
        """Itself: the audited producer is the confluent-kafka Producer."""
        return self

    def emit(self, timeout_s: float = 30.0) -> int:
        """Write the counts so far into the audit topic and wait for it to take them: records left undelivered."""
        left = plugin.flush(self.instance_id, timeout_s)
        delivered, failed = plugin.totals(self.instance_id)
        ACKED.labels(self.cluster).inc(delivered - self._reported[0])
        FAILED.labels(self.cluster).inc(failed - self._reported[1])
        self._reported = (delivered, failed)
        return left

    def flush(self, timeout: float = -1) -> int:
        """Deliver everything queued, then the counts of it; returns the messages still queued."""
        remaining = super().flush(timeout) if timeout >= 0 else super().flush()
        left = self.emit(timeout if timeout >= 0 else 30.0)
        if left:
            log.error("audit records not delivered", extra={"cluster": self.cluster, "records": left})
        return remaining

    def close(self, timeout: float = 30.0) -> int:
        """Flush and emit for the last time; calling it again is harmless."""
        if self._closed:
            return 0
        self._closed = True
        return self.flush(timeout)

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
