"""The audit record: the contract between every part of kafka-audit (see docs/architecture.md).

One JSON object per (counter instance, topic, window) delta (`kind: count`), or per (instance,
topic) position report (`kind: status`). Unknown fields are ignored, so newer writers can add
fields; `parse` never raises, whatever bytes it is handed, and says why it refused a record.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from audit.contract.errors import RecordError
from audit.contract.json_fields import InvalidField, field_value, short_repr, time_field, unique_keys
from audit.contract.names import CONTROL_CHARACTERS, NAME_PATTERN, is_topic_name
from audit.contract.retention import RetentionGap
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, is_aligned, to_datetime, to_ms, validate_window_minutes

SCHEMA_VERSION = 2  # 2: count records may carry digest_by_partition; readers accept any >= 1
AUDIT_TIME_HEADER = "kaudit-time"  # ASCII decimal epoch ms, set by the audited producer
PROVENANCE_HEADER = "kaudit-path"  # comma-separated clusters a message has been in
MAX_COUNT = 10**15
MAX_RECORD_BYTES = 1_000_000
MAX_RECORD_ID_CHARS = 200
MAX_AUDIT_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_PARTITION = 2**31 - 1  # Kafka partitions are int32
MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64
DIGEST_RANGE = range(-(2**63), 2**63)  # a digest is a signed 64-bit integer (audit.contract.digest)
COUNT_FIELDS = ("count", "bytes", "send_failed", "no_timestamp")


class Kind(StrEnum):
    COUNT = "count"
    STATUS = "status"


@dataclass(frozen=True)
class Latency:
    """Milliseconds from a message's audit time to the moment it was counted."""

    p50: float
    p95: float
    p99: float
    max: float


@dataclass(frozen=True)
class PartitionStatus:
    """Where a tier instance stands on one partition."""

    partition: int
    position: int
    end_offset: int
    lag: int
    last_audit_time_ms: int | None = None


@dataclass(frozen=True, kw_only=True)
class AuditRecord:
    schema_version: int = SCHEMA_VERSION
    record_id: str
    kind: Kind
    tier: str
    cluster: str
    service: str = ""
    host: str = ""
    instance_id: str = ""
    topic: str
    window_start_ms: int | None = None
    window_minutes: int = DEFAULT_WINDOW_MINUTES
    count: int = 0
    bytes: int = 0
    send_failed: int = 0
    no_timestamp: int = 0
    by_partition: Mapping[int, int] | None = None
    # The content digest (audit.contract.digest) of each partition's messages counted here: only when every
    # one of them was hashed, with by_partition's partitions.
    digest_by_partition: Mapping[int, int] | None = None
    latency_ms: Latency | None = None
    # Producer tier: messages the broker acknowledged in transactions the producer then aborted. In no other
    # count: a read_committed reader never sees them. Written only when not 0.
    aborted: int = 0
    # True when this instance cannot vouch for its counts of this window: part of them was dropped, or they hold
    # messages of transactions whose outcome it did not see. The books then judge the window against the origin
    # cluster, never against these counts (docs/architecture.md). Written only when true.
    unknown: bool = False
    emitted_at_ms: int
    partitions: tuple[PartitionStatus, ...] = field(default_factory=tuple)
    watermark_ms: int | None = None
    stalled: bool = False  # status of a replicator: lag with no progress for its stall timeout
    retention_gaps: tuple[RetentionGap, ...] = ()  # status: offsets deleted before this tier read them


# -- construction -------------------------------------------------------------------------------


def new_instance_id(service: str) -> str:
    """A counting instance's id: the service plus random hex, new for every process start.

    Record ids are `<instance_id>:<sequence>`, so a restarted process can never reuse an id of its
    predecessor, while a retried emission within one process keeps its id.
    """
    return f"{service}-{uuid.uuid4().hex[:12]}"


def record_id(instance_id: str, sequence: int) -> str:
    return f"{instance_id}:{sequence}"


def now_ms() -> int:
    return to_ms(datetime.now(UTC))


def _latency(value: Latency | Mapping[str, float] | None) -> Latency | None:
    if value is None or isinstance(value, Latency):
        return value
    return Latency(**{key: float(value[key]) for key in ("p50", "p95", "p99", "max")})


def count_record(*, latency_ms: Latency | Mapping[str, float] | None = None, **fields: Any) -> AuditRecord:
    """A `count` record; `emitted_at_ms` defaults to now."""
    fields.setdefault("emitted_at_ms", now_ms())
    return AuditRecord(kind=Kind.COUNT, latency_ms=_latency(latency_ms), **fields)


def status_record(**fields: Any) -> AuditRecord:
    """A `status` record; `emitted_at_ms` defaults to now."""
    fields.setdefault("emitted_at_ms", now_ms())
    fields["partitions"] = tuple(fields.get("partitions", ()))
    fields["retention_gaps"] = tuple(fields.get("retention_gaps", ()))
    return AuditRecord(kind=Kind.STATUS, **fields)


# -- JSON ---------------------------------------------------------------------------------------


def iso(ms: int | None, *, millis: bool = True) -> str | None:
    if ms is None:
        return None
    moment = to_datetime(ms)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{ms % 1000:03d}Z" if millis else f"{text}Z"


def to_json(record: AuditRecord) -> dict[str, Any]:
    """The wire form as a plain dict."""
    data: dict[str, Any] = {
        "schema_version": record.schema_version,
        "record_id": record.record_id,
        "kind": str(record.kind),
        "tier": record.tier,
        "cluster": record.cluster,
        "service": record.service,
        "host": record.host,
        "instance_id": record.instance_id,
        "topic": record.topic,
        "window_start": iso(record.window_start_ms, millis=False),
        "window_minutes": record.window_minutes,
        "emitted_at": iso(record.emitted_at_ms),
    }
    if record.kind == Kind.COUNT:
        data.update({name: getattr(record, name) for name in COUNT_FIELDS})
        if record.by_partition is not None:
            data["by_partition"] = {str(p): c for p, c in sorted(record.by_partition.items())}
        if record.digest_by_partition is not None:
            data["digest_by_partition"] = {str(p): d for p, d in sorted(record.digest_by_partition.items())}
        if record.latency_ms is not None:
            data["latency_ms"] = vars(record.latency_ms).copy()
        if record.aborted:  # only then: records without transactions stay as they were
            data["aborted"] = record.aborted
        if record.unknown:
            data["unknown"] = True
    else:
        data["partitions"] = [
            {
                "partition": p.partition,
                "position": p.position,
                "end_offset": p.end_offset,
                "lag": p.lag,
                "last_audit_time": iso(p.last_audit_time_ms),
            }
            for p in record.partitions
        ]
        data["watermark"] = iso(record.watermark_ms)
        data["stalled"] = record.stalled
        if record.retention_gaps:  # only then: older readers and records stay as they were
            data["retention_gaps"] = [
                {
                    "partition": g.partition,
                    "from_offset": g.from_offset,
                    "to_offset": g.to_offset,
                    "after_time": iso(g.after_time_ms),
                    "before_time": iso(g.before_time_ms),
                }
                for g in record.retention_gaps
            ]
    return data


def encode(record: AuditRecord) -> bytes:
    """Compact UTF-8 JSON with sorted keys."""
    return json.dumps(to_json(record), sort_keys=True, separators=(",", ":")).encode()


def _from_json(data: Any) -> AuditRecord:
    if not isinstance(data, dict):
        raise InvalidField(f"record: a JSON {type(data).__name__} is not an object")
    version = field_value(data, "schema_version", int)
    if version < 1:
        raise InvalidField(f"schema_version: {version} is not a known version")
    kind_text = field_value(data, "kind", str)
    if kind_text not in {k.value for k in Kind}:
        raise InvalidField(f"kind: {short_repr(kind_text)} is not one of count, status")
    kind = Kind(kind_text)
    fields: dict[str, Any] = {
        "schema_version": version,
        "record_id": field_value(data, "record_id", str),
        "kind": kind,
        "tier": field_value(data, "tier", str),
        "cluster": field_value(data, "cluster", str),
        "service": field_value(data, "service", str, required=False, default=""),
        "host": field_value(data, "host", str, required=False, default=""),
        "instance_id": field_value(data, "instance_id", str, required=False, default=""),
        "topic": field_value(data, "topic", str),
        "window_start_ms": time_field(data, "window_start", required=kind == Kind.COUNT),
        "window_minutes": field_value(data, "window_minutes", int, required=False, default=DEFAULT_WINDOW_MINUTES),
        "emitted_at_ms": time_field(data, "emitted_at"),
    }
    if kind == Kind.COUNT:
        fields["count"] = field_value(data, "count", int)
        for name in COUNT_FIELDS[1:]:
            fields[name] = field_value(data, name, int, required=False, default=0)
        fields["by_partition"] = _by_partition(data, "by_partition")
        fields["digest_by_partition"] = _by_partition(data, "digest_by_partition")
        fields["latency_ms"] = _latency_from_json(data)
        fields["aborted"] = field_value(data, "aborted", int, required=False, default=0)
        fields["unknown"] = field_value(data, "unknown", bool, required=False, default=False)
    else:
        fields["partitions"] = tuple(
            _partition_status(item, index) for index, item in enumerate(field_value(data, "partitions", list))
        )
        fields["watermark_ms"] = time_field(data, "watermark", required=False)
        fields["stalled"] = field_value(data, "stalled", bool, required=False, default=False)
        fields["retention_gaps"] = tuple(
            _retention_gap(item, index)
            for index, item in enumerate(field_value(data, "retention_gaps", list, required=False, default=[]))
        )
    return AuditRecord(**fields)


def _by_partition(data: Mapping[str, Any], name: str) -> dict[int, int] | None:
    """The object `name` of integers by partition number (a decimal string), or None when it is missing."""
    raw = field_value(data, name, dict, required=False)
    if raw is None:
        return None
    result = {}
    for key in raw:
        if not (isinstance(key, str) and key.isdigit() and key.isascii()):
            raise InvalidField(f"{name}: key {short_repr(key)} is not a partition number")
        if len(key) > len(str(MAX_PARTITION)) or int(key) > MAX_PARTITION:
            raise InvalidField(f"{name}: key {short_repr(key)} is over the largest partition number {MAX_PARTITION}")
        try:
            result[int(key)] = field_value(raw, key, int)
        except InvalidField as exc:
            raise InvalidField(f"{name}.{exc}") from None
    return result


def _latency_from_json(data: Mapping[str, Any]) -> Latency | None:
    raw = field_value(data, "latency_ms", dict, required=False)
    if raw is None:
        return None
    values = {}
    for key in ("p50", "p95", "p99", "max"):
        value = field_value(raw, key, (int, float))
        try:
            values[key] = float(value)
        except OverflowError:
            raise InvalidField(f"latency_ms.{key}: {short_repr(value)} is too large") from None
    return Latency(**values)


def _partition_status(item: Any, index: int) -> PartitionStatus:
    if not isinstance(item, dict):
        raise InvalidField(f"partitions[{index}]: {short_repr(item)} is not an object")
    try:
        return PartitionStatus(
            partition=field_value(item, "partition", int),
            position=field_value(item, "position", int),
            end_offset=field_value(item, "end_offset", int),
            lag=field_value(item, "lag", int),
            last_audit_time_ms=time_field(item, "last_audit_time", required=False),
        )
    except InvalidField as exc:
        raise InvalidField(f"partitions[{index}].{exc}") from None


def _retention_gap(item: Any, index: int) -> RetentionGap:
    if not isinstance(item, dict):
        raise InvalidField(f"retention_gaps[{index}]: {short_repr(item)} is not an object")
    try:
        return RetentionGap(
            partition=field_value(item, "partition", int),
            from_offset=field_value(item, "from_offset", int),
            to_offset=field_value(item, "to_offset", int),
            after_time_ms=time_field(item, "after_time", required=False),
            before_time_ms=time_field(item, "before_time", required=False),
        )
    except InvalidField as exc:
        raise InvalidField(f"retention_gaps[{index}].{exc}") from None


# -- validation ---------------------------------------------------------------------------------


def validate(record: AuditRecord) -> str | None:
    """The first thing wrong with `record` (naming the field), or None when it follows the contract."""
    checks = (_check_identity, _check_window, _check_counts, _check_digest, _check_latency, _check_status)
    for check in checks:
        reason = check(record)
        if reason:
            return reason
    return None


def _check_identity(record: AuditRecord) -> str | None:
    if not record.record_id or len(record.record_id) > MAX_RECORD_ID_CHARS:
        return f"record_id: must have 1 to {MAX_RECORD_ID_CHARS} characters"
    if CONTROL_CHARACTERS.search(record.record_id):
        return f"record_id: {short_repr(record.record_id)} contains a control character"
    for name in ("tier", "cluster"):
        value = getattr(record, name)
        if not NAME_PATTERN.match(value):
            return f"{name}: {short_repr(value)} is not a name (letters, digits, '.', '_', '-'; at most 64)"
    if not is_topic_name(record.topic):
        return f"topic: {short_repr(record.topic)} is not a legal Kafka topic name"
    if not 0 <= record.emitted_at_ms <= MAX_AUDIT_TIME_MS:
        return f"emitted_at: {record.emitted_at_ms} ms is out of range"
    return None


def _check_window(record: AuditRecord) -> str | None:
    reason = validate_window_minutes(record.window_minutes)
    if reason:
        return f"window_minutes: {reason}"
    start = record.window_start_ms
    if start is None:
        return "window_start: missing" if record.kind == Kind.COUNT else None
    if not 0 <= start <= MAX_AUDIT_TIME_MS:
        return f"window_start: {start} ms is out of range"
    if not is_aligned(start, record.window_minutes):
        return f"window_start: {iso(start, millis=False)} is not aligned to {record.window_minutes}-minute windows"
    return None


def _check_counts(record: AuditRecord) -> str | None:
    for name in (*COUNT_FIELDS, "aborted"):
        reason = _check_amount(name, getattr(record, name))
        if reason:
            return reason
    if record.by_partition is not None:
        for partition, count in record.by_partition.items():
            if partition < 0:
                return f"by_partition: partition {partition} is negative"
            reason = _check_amount(f"by_partition[{partition}]", count)
            if reason:
                return reason
        total = sum(record.by_partition.values())
        if total != record.count:
            return f"by_partition: sums to {total}, but count is {record.count}"
    return None


def _check_digest(record: AuditRecord) -> str | None:
    digests = record.digest_by_partition
    if digests is None:
        return None
    if record.kind != Kind.COUNT:
        return "digest_by_partition: only a count record carries one"
    if record.by_partition is None:
        return "digest_by_partition: present without by_partition"
    if set(digests) != set(record.by_partition):
        return (
            f"digest_by_partition: partitions {sorted(digests)[:10]} are not by_partition's "
            f"{sorted(record.by_partition)[:10]}"
        )
    for partition, digest in digests.items():
        if digest not in DIGEST_RANGE:
            return f"digest_by_partition[{partition}]: {digest} is not a signed 64-bit integer"
    return None


def _check_amount(name: str, value: int) -> str | None:
    if value < 0:
        return f"{name}: {value} is negative"
    if value > MAX_COUNT:
        return f"{name}: {value} is over the limit of {MAX_COUNT}"
    return None


def _check_latency(record: AuditRecord) -> str | None:
    latency = record.latency_ms
    if latency is None:
        return None
    values = (latency.p50, latency.p95, latency.p99, latency.max)
    if not all(math.isfinite(v) and v >= 0 for v in values):
        return f"latency_ms: {values} must be finite and non-negative"
    if not latency.p50 <= latency.p95 <= latency.p99 <= latency.max:
        return f"latency_ms: p50 {latency.p50} <= p95 {latency.p95} <= p99 {latency.p99} <= max {latency.max} does not hold"
    return None


def _check_status(record: AuditRecord) -> str | None:
    if record.kind != Kind.STATUS:
        return None
    for index, p in enumerate(record.partitions):
        where = f"partitions[{index}]"
        if min(p.partition, p.position, p.end_offset, p.lag) < 0:
            return f"{where}: partition, position, end_offset and lag must not be negative"
        if p.partition > MAX_PARTITION:
            return f"{where}.partition: {p.partition} is over the largest partition number {MAX_PARTITION}"
        for name in ("position", "end_offset", "lag"):
            if getattr(p, name) > MAX_OFFSET:
                return f"{where}.{name}: {getattr(p, name)} is over the largest Kafka offset {MAX_OFFSET}"
        if p.lag != p.end_offset - p.position:
            return f"{where}: lag {p.lag} is not end_offset {p.end_offset} - position {p.position}"
        if p.last_audit_time_ms is not None and not 0 <= p.last_audit_time_ms <= MAX_AUDIT_TIME_MS:
            return f"{where}.last_audit_time: out of range"
    if record.watermark_ms is not None and not 0 <= record.watermark_ms <= MAX_AUDIT_TIME_MS:
        return "watermark: out of range"
    for index, g in enumerate(record.retention_gaps):
        where = f"retention_gaps[{index}]"
        if not (0 <= g.partition <= MAX_PARTITION and 0 <= g.from_offset < g.to_offset <= MAX_OFFSET):
            return f"{where}: needs 0 <= partition <= {MAX_PARTITION} and 0 <= from_offset < to_offset <= {MAX_OFFSET}"
        times = (g.after_time_ms, g.before_time_ms)
        if any(t is not None and not 0 <= t <= MAX_AUDIT_TIME_MS for t in times):
            return f"{where}: after_time or before_time out of range"
    return None


# -- reading ------------------------------------------------------------------------------------


def parse(data: bytes | str | None) -> tuple[AuditRecord | None, str | None]:
    """(record, None) for a valid record, else (None, reason). Never raises."""
    try:
        if data is None:
            return None, "record: empty message"
        if len(data) > MAX_RECORD_BYTES:
            return None, f"record: {len(data)} bytes is over the {MAX_RECORD_BYTES}-byte limit"
        if isinstance(data, bytes):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                return None, f"record: not UTF-8 ({exc.reason} at byte {exc.start})"
        try:
            raw = json.loads(data, object_pairs_hook=unique_keys)
        except (ValueError, RecursionError) as exc:
            return None, f"record: not JSON ({str(exc)[:80]})"
        record = _from_json(raw)
        reason = validate(record)
        return (None, reason) if reason else (record, None)
    except InvalidField as exc:
        return None, str(exc)
    except Exception as exc:  # the contract: a bad record is a reason, never a crash
        return None, f"record: unreadable ({type(exc).__name__}: {str(exc)[:80]})"


def decode(data: bytes | str) -> AuditRecord:
    """The record in `data`, or RecordError with the reason."""
    record, reason = parse(data)
    if record is None:
        raise RecordError(reason)
    return record
