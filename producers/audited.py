"""The audited producer: confluent-kafka's Producer, plus the producer tier's counts.

It keeps the wrapped producer's interface and behaviour and adds three things only:
- the audit time (`audit.contract.audit_time.send_audit_time`): the message timestamp (now, unless
  given) and, where the topic uses LogAppendTime (the broker replaces the timestamp there), the same
  value in the `kaudit-time` header. A topic's messages carry the header until an acknowledgement
  shows that the topic keeps CreateTime, and again from the first one that shows LogAppendTime: on
  CreateTime topics it is redundant, and librdkafka spends about as much CPU on a header as on the
  rest of a small message. A timestamp that is no usable audit time is sent as given; the message
  is counted at the time it was sent, which the header carries;
- counting on acknowledgement: only what the broker acknowledged counts, failures count as
  `send_failed`. With the native `_fastaudit` built, produce() itself is native (it calls librdkafka
  on confluent-kafka's own client) and a librdkafka interceptor counts each acknowledgement in C: no
  Python code and no Python object per message. Without it (or with `KAUDIT_PURE_PYTHON=1`), a
  Python delivery callback per message counts the same;
- emission: every `flush_interval_s` (checked inside produce/poll, no extra thread) and on
  flush/close, one count record per (topic, window) into the audit topic of the same cluster.

The wrapped producer always runs with acks=all and idempotence, so a count never claims a message
the cluster could still lose. An audit record whose delivery fails is sent again with the same
record id, which the reconciliation deduplicates.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, Producer
from prometheus_client import Counter

from audit.contract.audit_time import send_audit_time
from audit.contract.errors import KafkaClientError
from audit.contract.names import DEFAULT_AUDIT_TOPIC, PRODUCER_TIER
from audit.contract.record import (
    AUDIT_TIME_HEADER,
    MAX_AUDIT_TIME_MS,
    count_record,
    encode,
    new_instance_id,
    record_id,
)
from audit.contract.tally import LATENCY_FLOORS, Tally, WindowTally
from audit.contract.windows import DEFAULT_WINDOW_MINUTES

log = logging.getLogger(__name__)

DEFAULT_FLUSH_INTERVAL_S = 10.0
BUFFER_FULL_RETRIES = 50
BUFFER_FULL_WAIT_S = 0.1
# Topics a producer keeps a CreateTime flag and metric series for at most; beyond, those of the topic emitted
# least recently go: its next message carries the audit-time header again, its two counters start from 0.
MAX_TOPICS = 10_000
FORCED_CONFIG = {"acks": "all", "enable.idempotence": True}

# Updated per emission, not per message: the delivery callback stays cheap.
ACKED = Counter("kaudit_producer_messages_acked_total", "Messages the broker acknowledged", ["cluster", "topic"])
FAILED = Counter("kaudit_producer_send_failed_total", "Messages whose delivery failed", ["cluster", "topic"])
EMITTED = Counter("kaudit_producer_audit_records_total", "Audit records delivered", ["cluster"])

DeliveryCallback = Callable[[KafkaError | None, Any], None]
PURE_PYTHON_ENV = "KAUDIT_PURE_PYTHON"


def _native_module() -> Any:
    """The native produce path (`producers/_fastaudit.c`), or None when it is not built, cannot find
    confluent-kafka's librdkafka, or `KAUDIT_PURE_PYTHON=1`: the Python closures then count the same."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from producers import _fastaudit  # type: ignore[attr-defined]
    except ImportError:
        return None
    problem = _fastaudit.librdkafka_problem()
    if problem is not None:
        log.warning("native produce path off, counting in Python", extra={"reason": problem})
        return None
    _fastaudit.configure(LATENCY_FLOORS, AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS)
    return _fastaudit


native_module = _native_module()


def produce_error(code: int) -> Exception:
    """The exception confluent-kafka's produce() raises for a librdkafka error code."""
    error = KafkaError(code)
    if code == KafkaError._QUEUE_FULL:
        return BufferError(error.str())
    return KafkaException(KafkaError(code, f"Unable to produce message: {error.str()}"))


def with_plugin(config: Mapping[str, Any], library: str) -> dict[str, Any]:
    """`config` with `library` added to librdkafka's plugin.library.paths (';'-separated)."""
    paths = [path for path in str(config.get("plugin.library.paths") or "").split(";") if path]
    return {**config, "plugin.library.paths": ";".join([*paths, library] if library not in paths else paths)}


class AuditedProducer:
    """A confluent-kafka Producer that also counts what it delivered, per topic and window.

    Bounded however long the application runs: the tallies hold only the counts since the last emission, the
    audit records kept (`_unacked`, `_in_flight`) only those the audit topic has not acknowledged yet (one per
    topic and window per flush interval of an outage of it, none once it answers), and the topics remembered
    (`_topics`, `_create_time_topics` and the native path's own, the metric series) at most MAX_TOPICS, the
    least recently emitted out first."""

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
    ) -> None:
        self.cluster = cluster
        self.audit_topic = audit_topic
        self.flush_interval_s = flush_interval_s
        self.service = service
        self.host = host or socket.gethostname()
        self.instance_id = new_instance_id(service)
        self._config = {**(extra_config or {}), **config, **FORCED_CONFIG}
        self._producer: Producer | None = None
        self._create_lock = threading.Lock()
        self._emit_lock = threading.Lock()
        self._tally = Tally(window_minutes)
        self._create_time_topics: set[str] = set()  # the Python path's; the native one keeps its own
        self._topics: OrderedDict[str, None] = OrderedDict()  # topics emitted, least recently first
        self._native = native_module.Tally(window_minutes * 60_000) if native_module is not None else None
        self._sequence = itertools.count(1)
        # Audit records awaiting their ack, and those of them sent and not yet answered. A delivery report changes
        # both on whichever thread serves it, while emit() lists them on another: _acks_lock guards them.
        self._unacked: dict[str, bytes] = {}  # record id -> encoded audit record
        self._in_flight: set[str] = set()
        self._acks_lock = threading.Lock()
        self._next_emit = time.monotonic() + flush_interval_s
        self._closed = False
        if self._native is not None:
            self._bind_native()

    def _bind_native(self) -> None:
        """Produce through the native path: `self.produce` becomes the native one, on a client made now
        with the interceptor that counts acknowledgements."""
        self._config = with_plugin(self._config, native_module.__file__)
        native = self._native
        owner = weakref.ref(self)  # not self.emit: the Tally would keep this producer alive until a GC pass

        def emit_if_alive() -> None:
            audited = owner()
            if audited is not None:
                audited.emit()

        native.bind(
            self.producer,
            self._config.get("on_delivery"),
            emit_if_alive,
            produce_error,
            BUFFER_FULL_RETRIES,
            BUFFER_FULL_WAIT_S,
        )
        native.next_emit = self._next_emit
        self.produce = native.produce  # type: ignore[method-assign]

    # -- the wrapped producer ------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        """The confluent-kafka Producer, created on first use."""
        if self._producer is None:
            with self._create_lock:
                if self._producer is None:
                    self._producer = Producer(self._config)
        return self._producer

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: list[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Produce like confluent-kafka, stamping the audit time and counting the delivery."""
        audit_time_ms = send_audit_time(timestamp, time.time_ns() // 1_000_000)
        sent_timestamp = timestamp or audit_time_ms
        stamped = [*(headers.items() if isinstance(headers, Mapping) else headers)] if headers else []
        if topic not in self._create_time_topics or sent_timestamp != audit_time_ms:
            stamped.append((AUDIT_TIME_HEADER, b"%d" % audit_time_ms))
        delivered = self._delivery_closure(topic, audit_time_ms, on_delivery or callback)
        try:
            (self._producer or self.producer).produce(
                topic,
                value=value,
                key=key,
                partition=partition,
                on_delivery=delivered,
                timestamp=sent_timestamp,
                headers=stamped or None,
            )
        except BufferError:
            self._produce_with_retry(topic, value, key, partition, delivered, sent_timestamp, stamped or None)
        if time.monotonic() >= self._next_emit:
            self.emit()

    def _delivery_closure(
        self, topic: str, audit_time_ms: int, user_callback: DeliveryCallback | None
    ) -> DeliveryCallback:
        """The pure-Python delivery callback (when the native produce path is off)."""
        tally, create_time_topics = self._tally, self._create_time_topics

        # A closure per message, because a failed delivery report carries neither the timestamp
        # nor the headers, and a failure must still land in its message's window.
        def delivered(err: KafkaError | None, msg) -> None:
            if err is None:
                msg_key = msg.key()
                tally.add(
                    topic,
                    audit_time_ms,
                    len(msg) + (len(msg_key) if msg_key else 0),
                    partition=msg.partition(),
                    latency_ms=time.time_ns() // 1_000_000 - audit_time_ms,
                )
                if msg.timestamp()[0] == TIMESTAMP_CREATE_TIME:
                    create_time_topics.add(topic)
                else:
                    create_time_topics.discard(topic)
            else:
                tally.fail(topic, audit_time_ms)
            if user_callback is not None:
                user_callback(err, msg)

        return delivered

    def _produce_with_retry(self, topic, value, key, partition, delivered, timestamp, headers) -> None:
        producer = self.producer
        for attempt in range(BUFFER_FULL_RETRIES + 1):
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    on_delivery=delivered,
                    timestamp=timestamp,
                    headers=headers,
                )
                return
            except BufferError:
                # The local queue is full: serve delivery reports to make room, then try again.
                if attempt == BUFFER_FULL_RETRIES:
                    raise
                producer.poll(BUFFER_FULL_WAIT_S)

    def poll(self, timeout: float = 0) -> int:
        served = self.producer.poll(timeout)
        if time.monotonic() >= self._next_emit:
            self.emit()
        return served

    def flush(self, timeout: float = -1) -> int:
        """Deliver everything queued, emit the counts, deliver those; returns messages still queued."""
        producer = self.producer
        producer.flush(timeout) if timeout >= 0 else producer.flush()
        self.emit()
        return producer.flush(timeout) if timeout >= 0 else producer.flush()

    def close(self, timeout: float = 30.0) -> int:
        """Flush and emit for the last time; calling it again is harmless."""
        if self._closed or self._producer is None:
            self._closed = True
            return 0
        remaining = self.flush(timeout)
        self._closed = True
        if self._unacked:
            log.error(
                "audit records not delivered at close", extra={"cluster": self.cluster, "records": len(self._unacked)}
            )
        return remaining

    def __len__(self) -> int:
        return len(self.producer)

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else (list_topics, transactions, ...) goes to the wrapped producer unchanged.
        return getattr(self.producer, name)

    # -- emission ------------------------------------------------------------------------------

    def emit(self) -> int:
        """Turn the counts since the last emission into audit records and send them (plus retries)."""
        with self._emit_lock:
            self._next_emit = time.monotonic() + self.flush_interval_s
            if self._native is not None:
                self._native.next_emit = self._next_emit
            for (topic, window_start_ms), tally in sorted(self._drain().items()):
                rid = record_id(self.instance_id, next(self._sequence))
                record = count_record(
                    record_id=rid,
                    tier=PRODUCER_TIER,
                    cluster=self.cluster,
                    service=self.service,
                    host=self.host,
                    instance_id=self.instance_id,
                    topic=topic,
                    window_start_ms=window_start_ms,
                    window_minutes=self._tally.window_minutes,
                    count=tally.count,
                    bytes=tally.bytes,
                    send_failed=tally.send_failed,
                    latency_ms=tally.latency_ms(),
                    by_partition=dict(tally.by_partition) or None,
                )
                payload = encode(record)
                with self._acks_lock:
                    self._unacked[rid] = payload
                ACKED.labels(self.cluster, topic).inc(tally.count)
                FAILED.labels(self.cluster, topic).inc(tally.send_failed)
                self._emitted(topic)
            with self._acks_lock:
                pending = [(rid, payload) for rid, payload in self._unacked.items() if rid not in self._in_flight]
                self._in_flight.update(rid for rid, _payload in pending)
        for rid, payload in pending:
            self._send_audit_record(rid, payload)
        return len(pending)

    def _emitted(self, topic: str) -> None:
        """`topic` was just emitted: the most recently used of `_topics`; the least recently used beyond
        MAX_TOPICS is forgotten (an application that writes to ever new topics, for years)."""
        topics = self._topics
        topics[topic] = None
        topics.move_to_end(topic)
        while len(topics) > MAX_TOPICS:
            gone, _ = topics.popitem(last=False)
            self._create_time_topics.discard(gone)
            if self._native is not None:
                self._native.forget(gone)
            for metric in (ACKED, FAILED):
                try:
                    metric.remove(self.cluster, gone)
                except KeyError:  # another producer of this process for the same cluster removed it already
                    pass

    def _drain(self) -> dict[tuple[str, int], WindowTally]:
        """The deltas since the last drain, of the Python tally and the native one."""
        windows = self._tally.drain()
        if self._native is None:
            return windows
        for key, (count, size, failed, partitions, latencies) in self._native.drain().items():
            window = windows.setdefault(key, WindowTally())
            window.count += count
            window.bytes += size
            window.send_failed += failed
            for partition, n in (partitions or {}).items():
                window.by_partition[partition] = window.by_partition.get(partition, 0) + n
            for latency, n in latencies.items():
                window.latency_histogram[latency] = window.latency_histogram.get(latency, 0) + n
        return windows

    def _send_audit_record(self, rid: str, payload: bytes) -> None:
        def delivered(err: KafkaError | None, _msg) -> None:
            with self._acks_lock:
                self._in_flight.discard(rid)
                if err is None:
                    self._unacked.pop(rid, None)
            if err is None:
                EMITTED.labels(self.cluster).inc()
            else:
                # Kept in _unacked: the next emission sends it again under the same id.
                log.warning(
                    "audit record not delivered; will retry",
                    extra={"cluster": self.cluster, "topic": self.audit_topic, "record_id": rid, "error": err.str()},
                )

        try:
            self._produce_with_retry(self.audit_topic, payload, None, -1, delivered, 0, None)
        except BufferError as exc:
            raise KafkaClientError(f"audit record {rid}: producer queue full") from exc
