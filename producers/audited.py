"""The audited producer: confluent-kafka's Producer with kafka-audit's librdkafka plugin loaded.

Nothing is added to the send path: `produce` is confluent-kafka's own, and the plugin (native/plugin/),
configured through `plugin.library.paths` and the kaudit.* keys, counts each message in librdkafka once the
broker acknowledged it (or it failed for good: `send_failed`) and writes one count record per topic and
window into the audit topic of the same cluster every `flush_interval_s` (with the content digest of each
partition's keys and values, unless the topic matches `digest_exclude`), and once more when the client is
destroyed. What this class adds is the configuration, forced acks=all and idempotence (so a count never
claims a message the cluster could still lose), `flush()`/`close()` that also hand over the counts so
far, and its transactions told to the plugin; any other librdkafka client is audited by the same two settings
(audit/io/plugin.py).

Transactions (a `transactional.id` in `config`): `begin_transaction`, `commit_transaction` and
`abort_transaction` tell the plugin, which keeps a transaction's acknowledged messages apart until it ends: a
commit counts them (count, bytes, partitions, digests, latency), an abort adds them to `aborted` of their topic and
window only, so a `read_committed` reader and the producer tier agree. A transaction still open when the client
is destroyed is counted as `unknown`. Any other client with a `transactional.id` (kcat, Go, .NET, a plain
confluent-kafka Producer with the plugin) tells the plugin nothing: an interceptor sees no commit or abort, so
every count record of it says `unknown: true`, and the books judge its windows against the origin cluster.

While the audit topic takes no records, the plugin makes none: it keeps merging the counts per topic, window
and partition, up to `max_entries` (topic, window) entries; past that the oldest windows are dropped, logged,
and written as `unknown` once the audit topic takes records again. `backlog()` says what is held and lost.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Producer
from prometheus_client import Counter, Gauge

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
HELD = Gauge("kaudit_producer_tally_entries", "(topic, window) entries the plugin holds, merged", ["cluster"])
UNDELIVERED = Gauge("kaudit_producer_records_undelivered", "Count records the audit topic has not taken", ["cluster"])
LOST = Counter(
    "kaudit_producer_lost_windows_total",
    "(topic, window) entries dropped at the bound, written as unknown",
    ["cluster"],
)


class AuditedProducer(Producer):
    """A confluent-kafka Producer whose deliveries the plugin counts, per topic, partition and window.

    Its memory does not grow with its age: the plugin holds the counts since its last emission only, and the
    audit records the audit topic has not taken yet; an outage of the audit topic holds at most `max_entries`."""

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
        max_entries: int = plugin.DEFAULT_MAX_ENTRIES,
        close_timeout_s: float = 30.0,
    ) -> None:
        self.cluster = cluster
        self.audit_topic = audit_topic
        self.service = service
        self.host = host or socket.gethostname()
        self.instance_id = new_instance_id(service)
        self._closed = False
        self._reported = (0, 0, 0)
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
                max_entries=max_entries,
                close_timeout_ms=round(close_timeout_s * 1000),
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
        backlog = plugin.backlog(self.instance_id)
        ACKED.labels(self.cluster).inc(delivered - self._reported[0])
        FAILED.labels(self.cluster).inc(failed - self._reported[1])
        LOST.labels(self.cluster).inc(backlog.lost_windows - self._reported[2])
        HELD.labels(self.cluster).set(backlog.entries)
        UNDELIVERED.labels(self.cluster).set(backlog.undelivered)
        self._reported = (delivered, failed, backlog.lost_windows)
        return left

    def backlog(self) -> plugin.Backlog:
        """What the plugin holds and lost: entries merged, records undelivered, windows dropped."""
        return plugin.backlog(self.instance_id)

    def flush(self, timeout: float = -1) -> int:
        """Deliver everything queued, then the counts of it, all within `timeout` (when given); returns the
        messages still queued."""
        began = time.monotonic()
        remaining = super().flush(timeout) if timeout >= 0 else super().flush()
        left = self.emit(max(0.0, timeout - (time.monotonic() - began)) if timeout >= 0 else 30.0)
        if left:
            log.error("audit records not delivered", extra={"cluster": self.cluster, "records": left})
        return remaining

    def begin_transaction(self) -> None:
        super().begin_transaction()
        plugin.transaction(self.instance_id, "begin")

    def commit_transaction(self, *args: Any) -> None:
        """Commit; once it returned (librdkafka flushed first: every message of it acknowledged), the plugin counts
        the transaction's messages. A commit that raises leaves them apart: an abort, or the client's end, settles."""
        super().commit_transaction(*args)
        plugin.transaction(self.instance_id, "commit")

    def abort_transaction(self, *args: Any) -> None:
        """Abort; once it returned, the transaction's acknowledged messages are counted as `aborted` only."""
        super().abort_transaction(*args)
        plugin.transaction(self.instance_id, "abort")

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
