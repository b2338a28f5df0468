"""The Delta tables of kafka-audit: names, columns, keys and partitioning, declared once.

Spark jobs build their schemas from here, the UI and the alerts (which read with the `deltalake`
package, no JVM) build pyarrow schemas from here, and docs/tables.md documents the same list.
Every table lives under one root (`Settings.lake_path`, default `<state_dir>/lake`), one folder
each. Types are written in Spark SQL's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from audit.contract.arrow import arrow_schema, arrow_table, arrow_type  # noqa: F401 (re-exported: the tables' one import)
from audit.contract.watermark_points import POINT_DDL, REPORTER_KEY


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type: STRING, BIGINT, INT, DOUBLE, BOOLEAN, TIMESTAMP, DATE, BINARY, MAP<INT,BIGINT>, ...
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # the natural key every MERGE matches on
    partition_by: tuple[str, ...] = ()
    # The columns whose min and max Delta keeps per file: those the books' reads filter on. No other column
    # could skip a file (rows are written in window order, so a file holds every topic and tier of its windows);
    # empty: Delta's default, the first 32 columns.
    stats_columns: tuple[str, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def ddl(self) -> str:
        """`name TYPE, ...` for Spark's `StructType.fromDDL` / `createDataFrame(schema=...)`."""
        return ", ".join(f"`{c.name}` {c.type}" for c in self.columns)


def _c(name: str, type_: str, doc: str) -> Column:
    return Column(name, type_, doc)


# Columns that name a logical topic: the topic and cluster it was first written to, wherever it is seen.
LOGICAL_TOPIC = (
    _c("origin_cluster", "STRING", "cluster the topic was first written to (its producers' cluster)"),
    _c("topic", "STRING", "topic name at its origin cluster (`orders`, not `dc1.orders`)"),
    _c("logical_topic", "STRING", "`<origin_cluster>.<topic>`: the name prefix naming gives it downstream"),
)
WINDOW = (
    _c("window_start", "TIMESTAMP", "start of the window (UTC, aligned to window_minutes)"),
    _c("window_minutes", "INT", "window size in minutes"),
)
DATE = _c("date", "DATE", "UTC date of window_start (of emitted_at for status records): the partition column")
UPDATED_AT = _c("updated_at", "TIMESTAMP", "when the reconciliation last wrote this row")

PARTITION_STATUS_TYPE = (
    "ARRAY<STRUCT<partition: INT, position: BIGINT, end_offset: BIGINT, lag: BIGINT, last_audit_time: TIMESTAMP>>"
)

AUDIT_RECORDS = Table(
    name="audit_records",
    doc="Every valid audit record of every cluster's audit topic (and the lake's), once per record_id.",
    key=("record_id",),
    partition_by=("date",),
    stats_columns=("window_start", "kind"),
    columns=(
        _c("record_id", "STRING", "unique id: instance id + sequence; replicated or re-read copies share it"),
        _c("kind", "STRING", "`count` or `status`"),
        _c("tier", "STRING", "counting point: producer, a cluster name, or lake"),
        _c("cluster", "STRING", "cluster the record's counter read from, or the producer wrote to"),
        _c("service", "STRING", "service that wrote the record (kaudit-counter, kaudit-mirror, an app)"),
        _c("host", "STRING", "host of the writing instance"),
        _c("instance_id", "STRING", "writing instance; new at every process start"),
        _c("seen_topic", "STRING", "topic name as the record gives it, on `cluster`"),
        *LOGICAL_TOPIC,
        *WINDOW,
        _c("count", "BIGINT", "messages counted (count records)"),
        _c("bytes", "BIGINT", "key + value bytes counted"),
        _c("send_failed", "BIGINT", "messages the producer could not deliver (producer tier only)"),
        _c("no_timestamp", "BIGINT", "messages without a usable audit time, bucketed by arrival"),
        _c("by_partition", "MAP<INT,BIGINT>", "count per partition, when the writer reports it"),
        _c("latency_p50_ms", "DOUBLE", "median ms from audit time to being counted"),
        _c("latency_p95_ms", "DOUBLE", "p95 latency, ms"),
        _c("latency_p99_ms", "DOUBLE", "p99 latency, ms"),
        _c("latency_max_ms", "DOUBLE", "max latency, ms"),
        _c("emitted_at", "TIMESTAMP", "when the record was written"),
        _c("watermark", "TIMESTAMP", "status: time up to which this instance has seen everything"),
        _c("lag", "BIGINT", "status: messages behind, summed over its partitions"),
        _c("stalled", "BOOLEAN", "status: a replicator with lag and no progress"),
        _c("partitions", PARTITION_STATUS_TYPE, "status: position, end offset, lag, last audit time per partition"),
        _c("read_from_cluster", "STRING", "cluster whose audit topic this copy was read from"),
        _c("read_from_topic", "STRING", "audit topic it was read from (`_audit`, `dc1._audit`, ...)"),
        _c("ingested_at", "TIMESTAMP", "when the reconciliation first stored it"),
        DATE,
    ),
)

AUDIT_REJECTS = Table(
    name="audit_rejects",
    doc="Audit-topic messages that are not valid audit records, with the reason; nothing else is held up.",
    key=("read_from_cluster", "read_from_topic", "read_from_partition", "read_from_offset"),
    partition_by=("date",),
    columns=(
        _c("read_from_cluster", "STRING", "cluster whose audit topic held the message"),
        _c("read_from_topic", "STRING", "audit topic"),
        _c("read_from_partition", "INT", "partition"),
        _c("read_from_offset", "BIGINT", "offset"),
        _c("reason", "STRING", "what is wrong, naming the field (the contract's or the expectation suite's words)"),
        _c("record_id", "STRING", "the record_id it claims, when one could be read"),
        _c("raw", "STRING", "the message as text (invalid UTF-8 replaced), at most 10,000 characters"),
        _c("raw_bytes", "BIGINT", "size of the message in bytes"),
        _c("ingested_at", "TIMESTAMP", "when it was rejected"),
        _c("date", "DATE", "UTC date of ingested_at: the partition column"),
    ),
)

TIER_COUNTS = Table(
    name="tier_counts",
    doc="Per logical topic, window and tier: the deduplicated sums of its count records.",
    key=("origin_cluster", "topic", "window_start", "tier"),
    partition_by=("date",),
    stats_columns=("window_start",),
    columns=(
        *LOGICAL_TOPIC,
        *WINDOW,
        _c("tier", "STRING", "counting point"),
        _c("count", "BIGINT", "messages counted by the tier in the window"),
        _c("bytes", "BIGINT", "bytes counted"),
        _c("send_failed", "BIGINT", "producer send failures"),
        _c("no_timestamp", "BIGINT", "messages without a usable audit time"),
        _c("by_partition", "MAP<INT,BIGINT>", "count per partition; null unless every record reported it"),
        _c("records", "BIGINT", "count records summed"),
        _c("latency_p99_ms", "DOUBLE", "largest p99 latency among the records (an upper bound)"),
        _c("latency_max_ms", "DOUBLE", "largest latency"),
        UPDATED_AT,
        DATE,
    ),
)

TIER_STATUS = Table(
    name="tier_status",
    doc="Per tier and logical topic: how far the tier has seen everything (its watermark), lag, stalls.",
    key=("tier", "origin_cluster", "topic"),
    columns=(
        _c("tier", "STRING", "counting point"),
        *LOGICAL_TOPIC,
        _c(
            "watermark",
            "TIMESTAMP",
            "time up to which the tier has seen everything of the topic; a window is "
            "final for the tier once this passes window end + grace; the epoch until the tier's own counter (or the lake "
            "job) has reported on the topic, whatever the replicators into it say",
        ),
        _c("lag", "BIGINT", "messages behind, over every reporter and partition of the tier"),
        _c("stalled", "BOOLEAN", "a replicator into this tier reports a stall"),
        _c("reporters", "STRING", "who reported, e.g. `kaudit-counter@aggregate, kaudit-mirror@dc1`"),
        _c("last_status_at", "TIMESTAMP", "newest status record behind this row"),
        UPDATED_AT,
    ),
)

COMPLETENESS = Table(
    name="completeness",
    doc="Per logical topic, window and tier: observed against expected (the reference tier), and a status.",
    key=("origin_cluster", "topic", "window_start", "tier"),
    partition_by=("date",),
    stats_columns=("window_start", "status"),
    columns=(
        *LOGICAL_TOPIC,
        *WINDOW,
        _c("window_end", "TIMESTAMP", "end of the window"),
        _c("tier", "STRING", "counting point"),
        _c("tier_order", "INT", "position of the tier in the data flow (configured `tiers`)"),
        _c("reference_tier", "STRING", "tier whose count is expected: producer, else the origin cluster"),
        _c("expected", "BIGINT", "the reference tier's count"),
        _c("observed", "BIGINT", "this tier's count"),
        _c(
            "missing",
            "BIGINT",
            "messages short; per partition when every tier reports partitions, so a "
            "duplicate elsewhere cannot hide a loss",
        ),
        _c("duplicated", "BIGINT", "messages over (duplicates of an at-least-once hop), same rule"),
        _c("completeness_pct", "DOUBLE", "100 * observed / expected; null when nothing was expected"),
        _c("threshold_pct", "DOUBLE", "completeness below which the window is incomplete (per topic pattern)"),
        _c("status", "STRING", "complete | incomplete | over | lagging | pending"),
        _c("final", "BOOLEAN", "the tier's watermark has passed window end + grace"),
        _c("tier_watermark", "TIMESTAMP", "the tier's watermark when this row was computed"),
        _c("latency_p99_ms", "DOUBLE", "the tier's p99 latency in the window"),
        UPDATED_AT,
        DATE,
    ),
)

BRONZE = Table(
    name="bronze",
    doc="Every message of the aggregate cluster's audited topics, as the lake job landed it.",
    key=("topic", "partition", "offset"),
    partition_by=("topic", "date"),
    columns=(
        _c("topic", "STRING", "topic on the cluster the lake reads (e.g. `dc1.orders`)"),
        _c("partition", "INT", "partition"),
        _c("offset", "BIGINT", "offset"),
        _c("key", "BINARY", "message key"),
        _c("value", "BINARY", "message value"),
        _c("headers", "ARRAY<STRUCT<key: STRING, value: BINARY>>", "message headers, in order"),
        _c("timestamp", "TIMESTAMP", "Kafka timestamp"),
        _c("timestamp_type", "INT", "0 CreateTime, 1 LogAppendTime"),
        _c("audit_time", "TIMESTAMP", "the message's audit time (CreateTime, else the kaudit-time header)"),
        _c("window_start", "TIMESTAMP", "audit window of the message"),
        _c("batch_id", "BIGINT", "micro-batch that landed it"),
        _c("date", "DATE", "UTC date of window_start: a partition column"),
    ),
)

ALERTS = Table(
    name="alerts",
    doc="Every alert kaudit alert decided to send, one row each, with its delivery state: the log that "
    "keeps an alert from being sent twice and keeps it pending while SMTP is down.",
    key=("alert_id",),
    columns=(
        _c(
            "alert_id",
            "STRING",
            "sha256 of kind, origin_cluster, topic, window_start, tier and status (restated alerts: and "
            "the cause, which names the restatement): a rerun finds the same id and sends nothing new",
        ),
        _c("kind", "STRING", "loss | over | recovery | lag | drop | restated"),
        *LOGICAL_TOPIC,
        _c("window_start", "TIMESTAMP", "the window alerted on (lag: the window holding the tier's watermark)"),
        _c("tier", "STRING", "tier the alert is about"),
        _c(
            "status",
            "STRING",
            "the completeness status alerted on (lag alerts: lagging; drop alerts: drop; restated: the status after)",
        ),
        _c("expected", "BIGINT", "the reference tier's count (drop: its median at that time of day over the history)"),
        _c("observed", "BIGINT", "the tier's count"),
        _c("missing", "BIGINT", "messages short"),
        _c("duplicated", "BIGINT", "messages over"),
        _c("completeness_pct", "DOUBLE", "100 * observed / expected"),
        _c("cause", "STRING", "likely cause read from tier_status and tier_counts"),
        _c("recipients", "STRING", "comma-separated addresses, from the topic's route"),
        _c("subject", "STRING", "subject of the email that carried it"),
        _c(
            "state",
            "STRING",
            "pending (not delivered yet) | sent | failed (refused for good) | resolved "
            "(recovered before it could be sent)",
        ),
        _c("attempts", "INT", "SMTP attempts made"),
        _c("last_error", "STRING", "last SMTP error, if any"),
        _c("created_at", "TIMESTAMP", "when the alert was first recorded"),
        _c("sent_at", "TIMESTAMP", "when the email was accepted by the SMTP server"),
        _c("date", "DATE", "UTC date of window_start"),
    ),
)

RETENTION_GAPS = Table(
    name="retention_gaps",
    doc="Offsets Kafka deleted (retention, delete_records) before a tier read them: real loss for that tier, "
    "each as its reader reported it in its status records. The alerts name it as the likely cause of a "
    "window missing messages at that tier.",
    key=("tier", "cluster", "seen_topic", "partition", "from_offset", "to_offset"),
    columns=(
        _c("tier", "STRING", "tier that lost the offsets: the counter's cluster, a replicator's target"),
        _c("cluster", "STRING", "cluster the reader read from"),
        _c("seen_topic", "STRING", "topic as named on that cluster"),
        _c("partition", "INT", "partition"),
        *LOGICAL_TOPIC,
        _c("from_offset", "BIGINT", "first offset skipped (the reader's next offset when the gap began)"),
        _c("to_offset", "BIGINT", "the log start offset the reader resumed at (exclusive)"),
        _c("skipped", "BIGINT", "to_offset - from_offset: offsets lost (overlapping reports of one gap count once)"),
        _c("after_time", "TIMESTAMP", "audit time of the last message read before the gap (null: unknown)"),
        _c("before_time", "TIMESTAMP", "audit time of the first message read after it (null: none yet)"),
        _c("service", "STRING", "reporting service"),
        _c("record_id", "STRING", "the first status record that reported it"),
        _c("emitted_at", "TIMESTAMP", "when that record was written"),
    ),
)

CLUSTER_READS = Table(
    name="cluster_reads",
    doc="Per configured cluster: whether the last reconciliation could read its audit topic, and since when "
    "not. An unreachable cluster's tiers stop moving (their windows lag); this table says why.",
    key=("cluster",),
    columns=(
        _c("cluster", "STRING", "configured cluster"),
        _c("reachable", "BOOLEAN", "the last run read its audit topic"),
        _c("error", "STRING", "why not, when not (a broker that does not answer, a local cluster never started)"),
        _c("since", "TIMESTAMP", "the run that found it in this state (rows change only when the state does)"),
    ),
)

COMPLETENESS_WATERMARKS = Table(
    name="completeness_watermarks",
    doc="Per logical topic and tier: the time up to which every window is final and complete, and the first "
    "window after it that is not. Refreshed by every reconciliation run. Restrict a lake query to "
    "`window_start < complete_through` to read only windows the books have closed (see the pattern below).",
    key=("origin_cluster", "topic", "tier"),
    columns=(
        *LOGICAL_TOPIC,
        _c("tier", "STRING", "counting point (every tier but the topic's reference tier)"),
        _c(
            "complete_through",
            "TIMESTAMP",
            "end of the last window up to which every window of the topic is final and complete at this tier; "
            "null while its first window is not. Windows without traffic have no row and do not hold it back",
        ),
        _c(
            "first_open_window",
            "TIMESTAMP",
            "start of the first window after complete_through that is not final or not complete (null: none)",
        ),
        _c("first_open_status", "STRING", "that window's status: incomplete | over | lagging | pending"),
        _c("updated_at", "TIMESTAMP", "when a reconciliation run last changed this row"),
    ),
)

RESTATEMENTS = Table(
    name="restatements",
    doc="Append-only: every change to the verdict of a window that was already final (late counts, a replay, "
    "a counter's recount), with the verdict before and after and the audit records behind it.",
    key=("restatement_id",),
    partition_by=("date",),
    columns=(
        _c(
            "restatement_id",
            "STRING",
            "sha256 of the window, tier, the verdict before (and when it was written) and after: a rerun "
            "records a restatement once",
        ),
        *LOGICAL_TOPIC,
        *WINDOW,
        _c("tier", "STRING", "counting point"),
        _c("before_expected", "BIGINT", "the reference tier's count before"),
        _c("before_observed", "BIGINT", "this tier's count before"),
        _c("before_status", "STRING", "status before (final: complete, incomplete or over)"),
        _c("before_updated_at", "TIMESTAMP", "when the verdict before was written"),
        _c("after_expected", "BIGINT", "the reference tier's count after"),
        _c("after_observed", "BIGINT", "this tier's count after"),
        _c("after_status", "STRING", "status after"),
        _c("after_final", "BOOLEAN", "still final after (false: a tier's watermark went back)"),
        _c(
            "record_ids",
            "ARRAY<STRING>",
            "count records of this tier and the reference tier for the window read by the run that restated "
            "it: what the reconciliation knows of the cause (empty: only a watermark moved)",
        ),
        _c("restated_at", "TIMESTAMP", "when the reconciliation run recorded it"),
        _c("date", "DATE", "UTC date of window_start: the partition column"),
    ),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        AUDIT_RECORDS,
        AUDIT_REJECTS,
        TIER_COUNTS,
        TIER_STATUS,
        COMPLETENESS,
        BRONZE,
        ALERTS,
        CLUSTER_READS,
        RETENTION_GAPS,
        COMPLETENESS_WATERMARKS,
        RESTATEMENTS,
    )
}

# Bookkeeping of the reconciliation; names start with `_`, analysts need not look at them.
PARTITION_STATUS = Table(
    name="_partition_status",
    doc="The newest status of every (tier, cluster, topic, service, partition) reporter: what tier_status sums up.",
    key=REPORTER_KEY,
    columns=(
        _c("tier", "STRING", "tier the reporter speaks for"),
        _c("cluster", "STRING", "cluster the reporter reads"),
        _c("seen_topic", "STRING", "topic as named on that cluster"),
        _c("service", "STRING", "reporting service"),
        _c("partition", "INT", "partition"),
        *LOGICAL_TOPIC,
        _c("position", "BIGINT", "next offset the reporter will handle"),
        _c("end_offset", "BIGINT", "end of the partition when reported"),
        _c("lag", "BIGINT", "end_offset - position"),
        _c("last_audit_time", "TIMESTAMP", "audit time of the last message handled"),
        _c("partition_watermark", "TIMESTAMP", "emitted_at when lag is 0, else last_audit_time (epoch when unknown)"),
        _c("stalled", "BOOLEAN", "the reporter said it is stalled"),
        _c("emitted_at", "TIMESTAMP", "when the status was reported"),
        _c("record_id", "STRING", "the status record it came from"),
    ),
)

TIER_POINTS = Table(
    name="_tier_points",
    doc="Each tier's watermark at its newest status moments: what bounds the tier after it on a topic's path.",
    key=TIER_STATUS.key,  # one row per tier_status row
    columns=(
        *(c for c in TIER_STATUS.columns if c.name in TIER_STATUS.key),
        _c("points", f"ARRAY<{POINT_DDL}>", "audit/contract/watermark_points.py's points, oldest first"),
    ),
)

SOURCE_OFFSETS = Table(
    name="_reconcile_offsets",
    doc="Next offset of every audit-topic partition the reconciliation has read, per cluster.",
    key=("cluster", "topic", "partition"),
    columns=(
        _c("cluster", "STRING", "cluster"),
        _c("topic", "STRING", "audit topic on it"),
        _c("partition", "INT", "partition"),
        _c("next_offset", "BIGINT", "first offset not yet read"),
        UPDATED_AT,
    ),
)

INTERNAL_TABLES: dict[str, Table] = {t.name: t for t in (PARTITION_STATUS, TIER_POINTS, SOURCE_OFFSETS)}
EVERY_TABLE: dict[str, Table] = {**TABLES, **INTERNAL_TABLES}  # the declared ones and the internal ones


def table_path(lake_path: str | Path, name: str) -> str:
    """Where table `name` lives under the lake root (a local path or a URI such as s3a://...)."""
    if name not in EVERY_TABLE:
        raise KeyError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
    return f"{str(lake_path).rstrip('/')}/{name}"


# The analyst's pattern for lake queries, documented in docs/tables.md (and used by notebooks/).
COMPLETE_WINDOWS_SQL = """## Reading only complete windows

`completeness_watermarks.complete_through` is the end of the last window up to which every window of a
topic is final and complete at a tier. A query of the lake's `bronze` table restricted to the windows
before it reads only data the books have closed: no window still in flight, none with a known loss or
duplicates. With the default prefix naming the lake's topic is the logical topic (`dc1.orders`):

```sql
SELECT b.*
FROM bronze AS b
JOIN completeness_watermarks AS w
  ON w.logical_topic = b.topic AND w.tier = 'lake'
WHERE b.window_start < w.complete_through        -- windows are aligned: the whole window is before it
  AND b.date <= to_date(w.complete_through)      -- lets Delta skip the newer date partitions
```

A topic without a row, or with `complete_through` null, has no closed window yet: the inner join leaves
it out. `first_open_window` and `first_open_status` say what holds the watermark back. In Python,
`audit.books.complete_through.complete_through(spark, "dc1.orders", "lake")` returns the same time.
A window that changes after it was final (late counts, a replay, a recount) is recorded in
`restatements` and moves the watermark back if it is no longer complete."""


def markdown() -> str:
    """docs/tables.md: every table analysts read, its key, partitioning and columns."""
    lines = [
        "# The Delta tables",
        "",
        "Generated from `audit/contract/tables.py` by `python -m audit.contract.tables > docs/tables.md` (a test keeps the two equal).",
        "Every table lives under `lake_path` (default `<state_dir>/lake`), one folder each, and is written by",
        "MERGE on its key, so reruns change nothing (`tier_counts` and `completeness` by rewriting the windows a run",
        "touched, in window order: a query naming its windows reads only their files). Times are UTC. Read them with Spark SQL",
        '(``spark.read.format("delta").load(path)``) or without a JVM with the `deltalake` package. A missing table is',
        "created by the first job that needs it, with `deltalake` (Delta protocol 1/2, no deletion vectors).",
        "",
    ]
    for table in TABLES.values():
        lines += [
            f"## `{table.name}`",
            "",
            table.doc,
            "",
            f"Key: {', '.join(f'`{k}`' for k in table.key)}. "
            + (
                f"Partitioned by {', '.join(f'`{p}`' for p in table.partition_by)}."
                if table.partition_by
                else "Not partitioned."
            )
            + (
                f" Files keep min and max of {', '.join(f'`{c}`' for c in table.stats_columns)} only: a filter on"
                " them skips files, one on another column (`date` aside) reads every file of the partitions read"
                " (tables created before 2026-11-27 keep them for their first 32 columns)."
                if table.stats_columns
                else ""
            ),
            "",
            "| column | type | meaning |",
            "|---|---|---|",
        ]
        lines += [f"| `{c.name}` | {c.type.replace('|', '/')} | {c.doc.replace('|', '/')} |" for c in table.columns]
        lines.append("")
    lines += COMPLETE_WINDOWS_SQL.splitlines() + [""]
    from audit.contract import completeness

    rules = completeness.__doc__.split("The rules, in order (see docs/tables.md):")[1].strip()
    lines += [
        "## How `completeness.status` is decided",
        "",
        "From `audit/contract/completeness.py`, in order:",
        "",
        rules,
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
