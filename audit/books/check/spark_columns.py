"""The record check as Spark column expressions: the fast path for records written the canonical way.

`RecordChecker.check` (audit/books/check/python_checker.py) parses every message in Python; at a million
records a run that is most of its time. Here the JVM parses each message with `from_json` and accepts
it only when both of these hold:

1. the message is exactly what the contract's own encoder (`audit.contract.record.encode`) would
   write for the parsed fields, byte for byte (`to_json` of the parsed struct equals the message).
   Then Spark's lenient parsing cannot have read anything differently from Python's strict one: a
   string where a number belongs, a float for an integer, a key given twice, an unknown field, a
   non-ASCII escape or extra white space all make the two texts differ;
2. every rule of `audit.contract.record.validate` and every expectation of the deployment's suite
   (`RecordChecker.expectations`) holds, as a column condition.

Every other message goes to the Python checker, which gives the exact reason or accepts it, so the
result is the same row for row; the conditions here may be stricter than the contract, never looser.
`tests/audit/books/check/test_record_columns.py` holds both paths to that over valid and hostile records.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from audit.contract.names import CONTROL_CHARACTERS, NAME_PATTERN, TOPIC_PATTERN
from audit.contract.record import MAX_AUDIT_TIME_MS, MAX_COUNT, MAX_PARTITION, MAX_RECORD_BYTES, MAX_RECORD_ID_CHARS
from audit.contract.windows import DEFAULT_WINDOW_MINUTES, MINUTES_PER_DAY, MS_PER_MINUTE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from audit.books.check.python_checker import RecordChecker

FAST = "_fast"  # the column that says a row was checked here
_WITH_NULLS = {"ignoreNullFields": "false"}  # as `json.dumps` writes them

# Every field either kind may carry, as Spark parses them (times stay text until checked).
PARTITION_TYPE = "STRUCT<end_offset: BIGINT, lag: BIGINT, last_audit_time: STRING, partition: BIGINT, position: BIGINT>"
GAP_TYPE = "STRUCT<after_time: STRING, before_time: STRING, from_offset: BIGINT, partition: BIGINT, to_offset: BIGINT>"
PARSED_DDL = ", ".join(
    [
        "aborted BIGINT",
        "by_partition MAP<STRING, BIGINT>",
        "bytes BIGINT",
        "cluster STRING",
        "count BIGINT",
        "digest_by_partition MAP<STRING, BIGINT>",
        "emitted_at STRING",
        "host STRING",
        "instance_id STRING",
        "kind STRING",
        "latency_ms STRUCT<max: DOUBLE, p50: DOUBLE, p95: DOUBLE, p99: DOUBLE>",
        "no_timestamp BIGINT",
        f"partitions ARRAY<{PARTITION_TYPE}>",
        "record_id STRING",
        f"retention_gaps ARRAY<{GAP_TYPE}>",
        "schema_version BIGINT",
        "send_failed BIGINT",
        "service STRING",
        "stalled BOOLEAN",
        "tier STRING",
        "topic STRING",
        "unknown BOOLEAN",
        "watermark STRING",
        "window_minutes BIGINT",
        "window_start STRING",
    ]
)
# The keys `encode` writes, sorted as it sorts them; the optional ones only when the record has them.
_COMMON_KEYS = ("cluster", "emitted_at", "host", "instance_id", "kind", "record_id", "schema_version", "service")
_WINDOW_KEYS = ("tier", "topic", "window_minutes", "window_start")
COUNT_KEYS = tuple(sorted((*_COMMON_KEYS, *_WINDOW_KEYS, "bytes", "count", "no_timestamp", "send_failed")))
COUNT_OPTIONAL = ("by_partition", "digest_by_partition", "latency_ms")
STATUS_KEYS = tuple(sorted((*_COMMON_KEYS, *_WINDOW_KEYS, "partitions", "stalled", "watermark")))
STATUS_OPTIONAL = ("retention_gaps",)

MAX_MAP_ENTRIES = 1000  # by_partition sums stay far from int64 overflow; bigger maps take the Python path
_PARTITION_KEY = r"\A(0|[1-9][0-9]{0,9})\z"  # a partition number as str(int) writes it
_SECONDS = r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\z"
_MILLIS = r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\z"


def _java(pattern) -> str:
    """A Python regex of the contract in Java's syntax: `\\Z` (the very end in Python) is `\\z` in Java."""
    return pattern.pattern.replace(r"\Z", r"\z")


def checked_natively(messages: DataFrame, checker: RecordChecker) -> DataFrame:
    """`messages` (SOURCE_COLUMNS) as the checker's rows (TYPED_CHECKED), plus `_fast`: True where the
    row was checked here (its `value` is then null); where it is False, the row holds only its source and must
    be checked in Python."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = messages.withColumn("p", F.from_json(text, PARSED_DDL)).withColumn("_text", text)
    projection = _projection(messages.sparkSession, replace(checker, now_ms=0))
    fast = F.coalesce(projection.accepted & _expectations_hold(checker.clock_expectations()), F.lit(False))
    # The message itself is kept only where Python must check it: a million checked ones would hold 350 MB.
    value = F.when(~F.col(FAST), F.col("value")).alias("value")
    return parsed.select("*", *projection.fields).withColumn(FAST, fast).select(*projection.out, value, FAST)


@dataclass(frozen=True)
class _Projection:
    fields: list  # the checker's output columns, named (`_fields`)
    accepted: Column  # every rule but the clock's expectations (`_accepted`)
    out: list  # TYPED_CHECKED's columns as it types them, from `fields` and FAST


# Per session, per clock-free checker: building the columns takes thousands of calls into the JVM (about
# 1.5 s a run), while what they say changes only with the settings; the clock's expectations are added per run.
_PROJECTIONS: WeakKeyDictionary = WeakKeyDictionary()


def _projection(session, checker: RecordChecker) -> _Projection:
    built = _PROJECTIONS.setdefault(session, {})
    if checker not in built:
        built[checker] = _projection_of(checker)
    return built[checker]


def _projection_of(checker: RecordChecker) -> _Projection:
    from pyspark.sql import functions as F

    from audit.books.check.python_checker import TYPED_CHECKED

    fields = _fields(F.col("p"), checker)
    # Only an accepted row's fields are kept (and cast): a refused one may hold values no cast takes.
    out = [
        (F.col(name) if name.startswith("read_from") else F.when(F.col(FAST), F.col(name) if name in fields else None))
        .cast(kind)
        .alias(name)
        for name, kind in TYPED_CHECKED
    ]
    return _Projection(
        fields=[column.alias(name) for name, column in fields.items()], accepted=_accepted(checker), out=out
    )


# -- the checker's fields ------------------------------------------------------------------------


def _fields(p: Column, checker: RecordChecker) -> dict[str, Column]:
    """The checker's output columns for an accepted record, as `RecordChecker._fields` computes them."""
    from pyspark.sql import functions as F

    is_count, is_status = p["kind"] == "count", p["kind"] == "status"
    origin_cluster, origin_topic = _origin(p["cluster"], p["topic"], checker)
    partitions = F.transform(
        p["partitions"],
        lambda q: F.struct(
            *(q[name].alias(name) for name in ("partition", "position", "end_offset", "lag")),
            F.timestamp_millis(_time_ms(q["last_audit_time"], _MILLIS)).alias("last_audit_time"),
        ),
    )
    gaps = _with_times(p["retention_gaps"], ("partition", "from_offset", "to_offset"), ("after_time", "before_time"))
    latency = {f"latency_{key}_ms": F.when(is_count, p["latency_ms"][key]) for key in ("p50", "p95", "p99", "max")}
    return {
        "record_id": p["record_id"],
        "kind": p["kind"],
        "tier": p["tier"],
        "cluster": p["cluster"],
        "service": F.coalesce(p["service"], F.lit("")),
        "host": F.coalesce(p["host"], F.lit("")),
        "instance_id": F.coalesce(p["instance_id"], F.lit("")),
        "seen_topic": p["topic"],
        "origin_cluster": origin_cluster,
        "topic": origin_topic,
        "logical_topic": F.concat_ws(".", origin_cluster, origin_topic),
        "window_start_ms": _time_ms(p["window_start"], _SECONDS),
        "window_minutes": F.coalesce(p["window_minutes"], F.lit(DEFAULT_WINDOW_MINUTES)),
        "count": F.when(is_count, p["count"]),
        **{name: F.when(is_count, F.coalesce(p[name], F.lit(0))) for name in ("bytes", "send_failed", "no_timestamp")},
        "aborted": F.when(is_count, F.coalesce(p["aborted"], F.lit(0))),
        "unknown": F.when(is_count, F.coalesce(p["unknown"], F.lit(False))),
        "by_partition": F.when(is_count, p["by_partition"]),  # its keys become INT as an accepted row's are cast
        "digest_by_partition": F.when(is_count, p["digest_by_partition"]),
        **latency,
        "emitted_at_ms": _time_ms(p["emitted_at"], _MILLIS),
        "watermark_ms": F.when(is_status, _time_ms(p["watermark"], _MILLIS)),
        "lag": F.when(
            is_status, F.aggregate(p["partitions"], F.lit(0).cast("bigint"), lambda s, q: F.try_add(s, q["lag"]))
        ),
        "stalled": F.when(is_status, F.coalesce(p["stalled"], F.lit(False))),
        "partitions": F.when(is_status, partitions),
        "retention_gaps_json": F.when(is_status & (F.size(p["retention_gaps"]) > 0), F.to_json(gaps, _WITH_NULLS)),
    }


def _with_times(items: Column, numbers: tuple[str, ...], times: tuple[str, ...]) -> Column:
    """Each struct of `items` with its `numbers` as they are and its `times` as `<time>_ms` (epoch ms)."""
    from pyspark.sql import functions as F

    return F.transform(
        items,
        lambda item: F.struct(
            *(item[name].alias(name) for name in numbers),
            *(_time_ms(item[name], _MILLIS).alias(f"{name}_ms") for name in times),
        ),
    )


def _origin(cluster: Column, topic: Column, checker: RecordChecker) -> tuple[Column, Column]:
    """`checker`'s naming policy's origin (audit/contract/naming.py): with prefix naming, every leading
    `<known cluster>.` that leaves a name behind is stripped, and the last one stripped is the origin."""
    from pyspark.sql import functions as F

    if checker.naming != "prefix":
        return cluster, topic
    known = "|".join(f"\\Q{name}\\E" for name in checker.clusters)
    prefixes = F.regexp_extract(topic, rf"\A((?:(?:{known})\.(?=.))*)", 1)
    last = F.regexp_extract(prefixes, r"([^.]+)\.\z", 1)
    return F.when(last == "", cluster).otherwise(last), F.substring(topic, F.length(prefixes) + 1, F.lit(1 << 30))


def _time_ms(text: Column, pattern: str) -> Column:
    """Epoch ms of an ISO-8601 UTC time written as `encode` writes it; null for anything else."""
    from pyspark.sql import functions as F

    # Once the pattern holds, Spark's own cast reads the text as a pattern-driven parser would (an impossible
    # date or time is null either way) in a fraction of its time.
    return F.when(text.rlike(pattern), F.unix_millis(text.try_cast("timestamp")))


# -- acceptance ----------------------------------------------------------------------------------


def _accepted(checker: RecordChecker) -> Column:
    """True when the row is canonical and passes every rule but the clock's expectations (`checked_natively`
    adds those); null or False sends it to Python."""
    from pyspark.sql import functions as F

    p = F.col("p")
    return (
        F.col("value").isNotNull()
        & (F.octet_length("value") <= MAX_RECORD_BYTES)
        & F.is_valid_utf8(F.col("value"))
        & (F.col("_text") == _canonical(p))
        & (p["schema_version"] >= 1)
        & _identity_holds(p)
        & _window_holds(p["window_start"], F.col("window_start_ms"), F.col("window_minutes"), p["kind"])
        & F.when(p["kind"] == "count", _counts_hold(p)).otherwise(_status_holds(p))
        & _expectations_hold(checker.configured_expectations())
    )


def _canonical(p: Column) -> Column:
    """The text `encode` writes for the parsed fields (keys sorted, no spaces, nulls written out)."""
    from pyspark.sql import functions as F

    def text(keys) -> Column:
        return F.to_json(F.struct(*(p[key].alias(key) for key in sorted(keys))), _WITH_NULLS)

    def with_optional(keys: tuple[str, ...], optional: tuple[str, ...]) -> Column:
        """The text for whichever of the `optional` keys the record has (one branch per combination)."""
        texts = None
        for present in product((True, False), repeat=len(optional)):
            has = F.lit(True)
            for key, given in zip(optional, present, strict=True):
                has = has & (p[key].isNotNull() if given else p[key].isNull())
            written = text((*keys, *(key for key, given in zip(optional, present, strict=True) if given)))
            texts = F.when(has, written) if texts is None else texts.when(has, written)
        return texts

    count, status = with_optional(COUNT_KEYS, COUNT_OPTIONAL), with_optional(STATUS_KEYS, STATUS_OPTIONAL)
    return F.when(p["kind"] == "count", _with_set_flags(p, count)).when(p["kind"] == "status", status)


def _with_set_flags(p: Column, text: Column) -> Column:
    """A count record's `text` with the keys `encode` writes only when set: `aborted` when above 0 (the first of
    the sorted keys), `unknown` when true (between `topic` and `window_minutes`). Spliced in, not one more
    doubling of `with_optional`'s branches; a quote inside a string value is escaped, so `,"window_minutes":`
    is only ever the key's own."""
    from pyspark.sql import functions as F

    aborted = F.concat(F.lit('{"aborted":'), p["aborted"].cast("string"), F.lit(","), F.substring(text, 2, 1 << 30))
    text = F.when(p["aborted"] > 0, aborted).otherwise(text)
    unknown = F.replace(text, F.lit(',"window_minutes":'), F.lit(',"unknown":true,"window_minutes":'))
    return F.when(p["unknown"], unknown).otherwise(text)


def _in_range(value: Column, low: int, high: int) -> Column:
    return value.isNotNull() & (value >= low) & (value <= high)


def _identity_holds(p: Column) -> Column:
    from pyspark.sql import functions as F

    record_id = p["record_id"]
    return (
        (F.char_length(record_id) >= 1)
        & (F.char_length(record_id) <= MAX_RECORD_ID_CHARS)
        & ~record_id.rlike(CONTROL_CHARACTERS.pattern)
        & p["tier"].rlike(_java(NAME_PATTERN))
        & p["cluster"].rlike(_java(NAME_PATTERN))
        & p["topic"].rlike(_java(TOPIC_PATTERN))
        & ~p["topic"].isin(".", "..")
        & _in_range(F.col("emitted_at_ms"), 0, MAX_AUDIT_TIME_MS)
    )


def _window_holds(start_text: Column, start_ms: Column, minutes: Column, kind: Column) -> Column:
    """A valid window size and an aligned start (a status record may have none). Spark's ANSI mode
    raises on a division by zero or an overflow, so each step is guarded by the one before."""
    from pyspark.sql import functions as F

    size_ok = F.when((minutes >= 1) & (minutes <= MINUTES_PER_DAY), F.lit(MINUTES_PER_DAY) % minutes == 0).otherwise(
        False
    )
    aligned = F.when(size_ok, start_ms % (minutes * MS_PER_MINUTE) == 0).otherwise(False)
    start_ok = _in_range(start_ms, 0, MAX_AUDIT_TIME_MS) & aligned
    return size_ok & F.when(kind == "count", start_ok).otherwise(start_text.isNull() | start_ok)


def _counts_hold(p: Column) -> Column:
    from pyspark.sql import functions as F

    optional_amounts = ("bytes", "send_failed", "no_timestamp", "aborted")
    amounts = [p["count"], *(F.coalesce(p[name], F.lit(0)) for name in optional_amounts)]
    ok = p["count"].isNotNull()
    for amount in amounts:
        ok = ok & _in_range(amount, 0, MAX_COUNT)
    by_partition, latency = p["by_partition"], p["latency_ms"]
    keys, counts = F.map_keys(by_partition), F.map_values(by_partition)

    def key_ok(k: Column) -> Column:
        return k.rlike(_PARTITION_KEY) & (k.try_cast("bigint") <= MAX_PARTITION)

    # A map of one partition (a one-partition topic's, every record's in the bench) is checked without lambdas:
    # Spark evaluates those row by row outside its generated code, reading each element through a new copy of
    # the session's settings.
    only_key, only_count = F.get(keys, 0), F.get(counts, 0)
    one_ok = key_ok(only_key) & _in_range(only_count, 0, MAX_COUNT) & (only_count == p["count"])
    many_ok = (
        (F.size(by_partition) <= MAX_MAP_ENTRIES)
        & (F.size(F.array_distinct(keys)) == F.size(keys))  # from_json keeps a key given twice
        & F.forall(keys, key_ok)
        & F.forall(counts, lambda c: _in_range(c, 0, MAX_COUNT))
        & (F.aggregate(counts, F.lit(0).cast("bigint"), lambda s, c: F.try_add(s, c)) == p["count"])
    )
    partitions_ok = F.when(F.size(by_partition) == 1, one_ok).otherwise(many_ok)
    digests, digest_keys = p["digest_by_partition"], F.map_keys(p["digest_by_partition"])
    one_digest_ok = (F.size(digests) == 1) & (F.get(digest_keys, 0) == only_key)
    one_digest_ok = one_digest_ok & F.get(F.map_values(digests), 0).isNotNull()
    many_digests_ok = (F.array_sort(digest_keys) == F.array_sort(keys)) & F.forall(
        F.map_values(digests), lambda d: d.isNotNull()
    )
    # by_partition's partitions exactly (a key given twice makes the sorted keys differ), each a BIGINT
    digests_ok = by_partition.isNotNull() & F.when(F.size(by_partition) == 1, one_digest_ok).otherwise(many_digests_ok)
    values = [latency[key] for key in ("p50", "p95", "p99", "max")]
    latency_ok = F.lit(True)
    for value in values:  # Spark takes the strings "NaN" and "Infinity" for doubles, and NaN >= 0 holds in Spark
        latency_ok = latency_ok & value.isNotNull() & ~F.isnan(value) & (value >= 0) & (value < float("inf"))
    latency_ok = latency_ok & (values[0] <= values[1]) & (values[1] <= values[2]) & (values[2] <= values[3])
    return (
        ok
        & (by_partition.isNull() | partitions_ok)
        & (digests.isNull() | digests_ok)
        & (latency.isNull() | latency_ok)
        & (p["partitions"].isNull())
        & (p["retention_gaps"].isNull())
    )


def _time_ok(text: Column) -> Column:
    """An optional time: absent, or readable and in range."""
    return text.isNull() | _in_range(_time_ms(text, _MILLIS), 0, MAX_AUDIT_TIME_MS)


def _status_holds(p: Column) -> Column:
    from pyspark.sql import functions as F

    def partition_ok(q: Column) -> Column:
        numbers = [q[name] for name in ("partition", "position", "end_offset", "lag")]
        ok = q.isNotNull()
        for number in numbers:
            ok = ok & number.isNotNull() & (number >= 0)
        return (
            ok
            & (q["partition"] <= MAX_PARTITION)
            & (q["lag"] == F.try_subtract(q["end_offset"], q["position"]))
            & _time_ok(q["last_audit_time"])
        )

    def gap_ok(g: Column) -> Column:
        return (
            g.isNotNull()
            & _in_range(g["partition"], 0, MAX_PARTITION)
            & (g["from_offset"] >= 0)
            & g["to_offset"].isNotNull()
            & (g["from_offset"] < g["to_offset"])
            & _time_ok(g["after_time"])
            & _time_ok(g["before_time"])
        )

    return (
        p["partitions"].isNotNull()
        & F.forall(p["partitions"], partition_ok)
        & F.col("lag").isNotNull()  # the `lag` field: null when the partitions' lags sum past int64
        & _time_ok(p["watermark"])
        & (p["retention_gaps"].isNull() | F.forall(p["retention_gaps"], gap_ok))
        & p["by_partition"].isNull()
        & p["digest_by_partition"].isNull()
        & p["latency_ms"].isNull()
    )


def _expectations_hold(expectations: list) -> Column:
    """Expectations of the deployment's suite, each as the condition on its column (a null passes, as in
    Great Expectations); an expectation kind this does not know fails loudly, not silently."""
    from pyspark.sql import functions as F

    ok = F.lit(True)
    for expectation in expectations:
        column = F.col(expectation.column)
        kind = type(expectation).__name__
        if kind == "ExpectColumnValuesToBeInSet":
            holds = column.isin(list(expectation.value_set))
        elif kind == "ExpectColumnValuesToBeBetween":
            holds = (column >= expectation.min_value) & (column <= expectation.max_value)
        else:
            raise NotImplementedError(f"no column form for the expectation {kind}: add one in {__name__}")
        ok = ok & (column.isNull() | holds)
    return ok
