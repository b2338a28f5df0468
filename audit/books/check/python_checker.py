"""Checking audit-topic messages: the contract's own validation, then an expectation suite.

`RecordChecker.check` turns a pandas frame of raw audit-topic messages into one row per message:
the record's fields when it is valid, else a `reason` that names what is wrong. It holds no Spark
or Kafka client, so the reconciliation runs it on its executors (`mapInPandas`) and the tests call
it directly.

Two layers, because they know different things:
- the contract (`audit.contract.record.parse`) knows what any audit record must look like;
- the Great Expectations suite knows this deployment: the configured tiers and clusters, the window
  size, and how far in the future a window may plausibly start.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import pandas as pd

from audit.contract.naming import naming_policy
from audit.contract.record import MAX_COUNT, MAX_OFFSET, AuditRecord, Kind, parse
from audit.contract.tables import PARTITION_STATUS_TYPE

if TYPE_CHECKING:
    from audit.settings import Settings


log = logging.getLogger(__name__)

RAW_TEXT_LIMIT = 10_000
FUTURE_SLACK_MS = 24 * 3600 * 1000  # a window may start at most a day after the check runs
CLOCK_COLUMNS = frozenset({"window_start_ms"})  # the columns whose expectations depend on `now_ms`
EARLIEST_WINDOW_MS = 946_684_800_000  # 2000-01-01: anything older is a broken clock, not a late message

# Output of `check`, in order, as Spark DDL (nested fields travel as JSON text, parsed by Spark).
CHECKED_DDL = ", ".join(
    [
        "read_from_cluster STRING",
        "read_from_topic STRING",
        "read_from_partition INT",
        "read_from_offset BIGINT",
        "reason STRING",
        "raw STRING",
        "raw_bytes BIGINT",
        "record_id STRING",
        "kind STRING",
        "tier STRING",
        "cluster STRING",
        "service STRING",
        "host STRING",
        "instance_id STRING",
        "seen_topic STRING",
        "origin_cluster STRING",
        "topic STRING",
        "logical_topic STRING",
        "window_start_ms BIGINT",
        "window_minutes INT",
        "count BIGINT",
        "bytes BIGINT",
        "send_failed BIGINT",
        "no_timestamp BIGINT",
        "aborted BIGINT",
        "unknown BOOLEAN",
        "by_partition_json STRING",
        "digest_by_partition_json STRING",
        "latency_p50_ms DOUBLE",
        "latency_p95_ms DOUBLE",
        "latency_p99_ms DOUBLE",
        "latency_max_ms DOUBLE",
        "emitted_at_ms BIGINT",
        "watermark_ms BIGINT",
        "lag BIGINT",
        "stalled BOOLEAN",
        "partitions_json STRING",
        "retention_gaps_json STRING",
    ]
)
CHECKED_COLUMNS = tuple(part.split()[0] for part in CHECKED_DDL.split(", "))
# The nested fields the tables hold typed: CHECKED_DDL's JSON text column -> (typed column, type). The Python
# checker writes the text and `check_messages` parses it; the native check yields them typed (no text to write
# and read back: a million records spend 2-4 s on that).
TYPED_NESTED = {
    "by_partition_json": ("by_partition", "MAP<INT,BIGINT>"),
    "digest_by_partition_json": ("digest_by_partition", "MAP<INT,BIGINT>"),
    "partitions_json": ("partitions", PARTITION_STATUS_TYPE),
}
# The (column, type) of the rows `check_messages` yields, before its times and dates: CHECKED_DDL with the nested
# fields typed.
TYPED_CHECKED = tuple(
    TYPED_NESTED.get(name, (name, kind)) for name, kind in (part.split() for part in CHECKED_DDL.split(", "))
)
# Nullable pandas types, so missing numbers stay null on their way into Spark instead of turning floats.
_PANDAS_TYPES = {
    part.split()[0]: {"BIGINT": "Int64", "INT": "Int32", "DOUBLE": "Float64", "BOOLEAN": "boolean", "STRING": "object"}[
        part.split()[1]
    ]
    for part in CHECKED_DDL.split(", ")
}
SOURCE_COLUMNS = ("read_from_cluster", "read_from_topic", "read_from_partition", "read_from_offset", "value")


@dataclass(frozen=True)
class RecordChecker:
    """What this deployment accepts; picklable, so Spark ships it to its executors."""

    tiers: tuple[str, ...]
    clusters: tuple[str, ...]
    window_minutes: int
    naming: str
    now_ms: int

    @classmethod
    def from_settings(cls, settings: Settings, now_ms: int) -> RecordChecker:
        return cls(
            tuple(settings.tiers), tuple(settings.cluster_names), settings.window_minutes, settings.naming, now_ms
        )

    # -- the whole check ------------------------------------------------------------------------

    def check(self, frame: pd.DataFrame, *, nested_as_text: bool = True) -> pd.DataFrame:
        """One output row (CHECKED_COLUMNS) per input row (SOURCE_COLUMNS).

        `nested_as_text`: TYPED_NESTED's columns as their JSON text (CHECKED_DDL, for Spark); False leaves them
        the Python values the text is written from (a partition map keyed by number, a list of partition
        statuses as dicts), for a caller that types them itself and would only parse the text back."""
        rows = [self._contract_row(source) for source in frame[list(SOURCE_COLUMNS)].itertuples(index=False)]
        out = pd.DataFrame(rows, columns=list(CHECKED_COLUMNS))
        for name, kind in _PANDAS_TYPES.items():
            out[name] = out[name].astype(kind)
        for name in TYPED_NESTED:  # a row without the field holds NaN here
            values = [value if isinstance(value, dict | list) else None for value in out[name]]
            out[name] = [None if value is None else json.dumps(value) for value in values] if nested_as_text else values
        passed_contract = out["reason"].isna()
        self._apply_expectations(out)
        values = frame["value"].tolist()
        for row in out.index[passed_contract & out["reason"].notna()]:  # refused by an expectation
            out.at[row, "raw"] = _text(values[row])
            out.at[row, "raw_bytes"] = len(values[row])
        return out

    def check_batches(self, frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """`mapInPandas` form of `check`."""
        for frame in frames:
            yield self.check(frame)

    # -- layer 1: the contract -------------------------------------------------------------------

    def _contract_row(self, source) -> dict:
        cluster, audit_topic, partition, offset, value = source
        row = {
            "read_from_cluster": cluster,
            "read_from_topic": audit_topic,
            "read_from_partition": partition,
            "read_from_offset": offset,
        }
        record, reason = parse(value)
        if record is not None and reason is None:
            reason = _sum_reason(record)
        if record is None or reason is not None:
            row.update(
                reason=reason,
                raw=_text(value),
                raw_bytes=len(value) if value is not None else 0,
                record_id=_claimed_id(value),
            )
            return row
        row.update(self._fields(record))
        return row

    @cached_property
    def _naming(self):
        return naming_policy(self.naming, self.clusters)

    def _fields(self, record: AuditRecord) -> dict:
        origin = self._naming.origin(record.cluster, record.topic)
        fields = {
            "record_id": record.record_id,
            "kind": str(record.kind),
            "tier": record.tier,
            "cluster": record.cluster,
            "service": record.service,
            "host": record.host,
            "instance_id": record.instance_id,
            "seen_topic": record.topic,
            "origin_cluster": origin.cluster,
            "topic": origin.topic,
            "logical_topic": f"{origin.cluster}.{origin.topic}",
            "window_start_ms": record.window_start_ms,
            "window_minutes": record.window_minutes,
            "emitted_at_ms": record.emitted_at_ms,
        }
        if record.kind == Kind.COUNT:
            fields.update(
                count=record.count, bytes=record.bytes, send_failed=record.send_failed, no_timestamp=record.no_timestamp
            )
            fields.update(aborted=record.aborted, unknown=record.unknown)
            if record.by_partition is not None:
                fields["by_partition_json"] = dict(record.by_partition)
            if record.digest_by_partition is not None:
                fields["digest_by_partition_json"] = dict(record.digest_by_partition)
            if record.latency_ms is not None:
                latency = record.latency_ms
                fields.update(
                    latency_p50_ms=latency.p50,
                    latency_p95_ms=latency.p95,
                    latency_p99_ms=latency.p99,
                    latency_max_ms=latency.max,
                )
        else:
            fields.update(
                watermark_ms=record.watermark_ms, stalled=record.stalled, lag=sum(p.lag for p in record.partitions)
            )
            fields["partitions_json"] = [
                {
                    "partition": p.partition,
                    "position": p.position,
                    "end_offset": p.end_offset,
                    "lag": p.lag,
                    "last_audit_time_ms": p.last_audit_time_ms,
                }
                for p in record.partitions
            ]
            if record.retention_gaps:
                fields["retention_gaps_json"] = json.dumps([vars(g) for g in record.retention_gaps])
        return fields

    # -- layer 2: the deployment's expectations ----------------------------------------------------

    def expectations(self) -> list:
        """The Great Expectations suite's expectations, each about one column."""
        import great_expectations as gx

        latest_window = self.now_ms + FUTURE_SLACK_MS
        return [
            gx.expectations.ExpectColumnValuesToBeInSet(column="tier", value_set=list(self.tiers)),
            gx.expectations.ExpectColumnValuesToBeInSet(column="cluster", value_set=list(self.clusters)),
            gx.expectations.ExpectColumnValuesToBeInSet(column="window_minutes", value_set=[self.window_minutes]),
            gx.expectations.ExpectColumnValuesToBeBetween(
                column="window_start_ms", min_value=EARLIEST_WINDOW_MS, max_value=latest_window
            ),
            gx.expectations.ExpectColumnValuesToBeBetween(column="count", min_value=0, max_value=MAX_COUNT),
            gx.expectations.ExpectColumnValuesToBeBetween(column="lag", min_value=0, max_value=MAX_COUNT),
        ]

    def configured_expectations(self) -> list:
        """The expectations that follow from the settings alone, the same in every run of a deployment (the
        native check builds their conditions once per session)."""
        return [e for e in self.expectations() if e.column not in CLOCK_COLUMNS]

    def clock_expectations(self) -> list:
        """The expectations that move with the run's clock (`now_ms`)."""
        return [e for e in self.expectations() if e.column in CLOCK_COLUMNS]

    def _apply_expectations(self, out: pd.DataFrame) -> None:
        """Validate the rows the contract accepted; set `reason` on every row an expectation refuses."""
        valid = out["reason"].isna()
        if not valid.any():
            return
        candidates = out.loc[valid, ["tier", "cluster", "window_minutes", "window_start_ms", "count", "lag"]].copy()
        candidates["row"] = candidates.index
        for result in _validate(candidates, self.expectations()):
            if result.success:
                continue
            config = result.expectation_config
            column = config.kwargs["column"]
            for hit in result.result.get("unexpected_index_list") or []:
                row = hit["row"]
                if pd.isna(out.at[row, "reason"]):
                    out.at[row, "reason"] = (
                        f"{column}: {_describe(hit[column])} fails {config.type} ({_bounds(config.kwargs)})"
                    )


def import_expectations_early() -> threading.Thread:
    """Import great_expectations in a daemon thread. The import alone takes 5-7 s of this machine's Python;
    a process that is about to wait for something else (a new Spark session's JVM, some seconds) calls this
    first, and the first run's check finds the suite's classes imported instead of waiting for them."""

    def run() -> None:
        import great_expectations  # noqa: F401  (imported for its side effect: the module cache)

    thread = threading.Thread(target=run, name="import-great-expectations", daemon=True)
    thread.start()
    return thread


_CONTEXT = None


def _validate(frame: pd.DataFrame, expectations: list):
    """Run `expectations` over `frame` with an in-memory Great Expectations context (one per process)."""
    global _CONTEXT
    import great_expectations as gx

    if _CONTEXT is None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
        source = context.data_sources.add_pandas("audit_records")
        _CONTEXT = source.add_dataframe_asset("checked").add_batch_definition_whole_dataframe("batch")
    suite = gx.ExpectationSuite(name="audit_record_deployment")
    for expectation in expectations:
        suite.add_expectation(expectation)
    batch = _CONTEXT.get_batch(batch_parameters={"dataframe": frame})
    report = batch.validate(
        suite, result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["row"]}
    )
    return report.results


def _bounds(kwargs: dict) -> str:
    if "value_set" in kwargs:
        return f"expected one of {list(kwargs['value_set'])}"
    low, high = (
        int(kwargs[k]) if isinstance(kwargs.get(k), float) and kwargs[k].is_integer() else kwargs.get(k)
        for k in ("min_value", "max_value")
    )
    return f"expected between {low} and {high}"


def _describe(value) -> str:
    text = repr(value.item() if hasattr(value, "item") else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _sum_reason(record: AuditRecord) -> str | None:
    """Why a record the contract accepts cannot be stored: a status whose partitions' lags sum past int64."""
    lag = sum(p.lag for p in record.partitions)
    if lag > MAX_OFFSET:
        return f"partitions: the lags sum to {lag}, over the largest Kafka offset {MAX_OFFSET}"
    return None


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    return bytes(value[: RAW_TEXT_LIMIT * 4]).decode("utf-8", errors="replace")[:RAW_TEXT_LIMIT]


def _claimed_id(value: bytes | None) -> str | None:
    """The record_id a rejected message claims, when it is JSON with a string record_id."""
    try:
        claimed = json.loads(value).get("record_id")
    except Exception:  # not JSON, not an object: there is no id to report
        return None
    return claimed[:200] if isinstance(claimed, str) else None
