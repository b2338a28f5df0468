"""The audit contract's rules as Spark columns, for the lake job's micro-batches: they run on the executors.

`audit_time_columns` states `audit.contract.audit_time.audit_time` and `window_start_column`
`audit.contract.windows.window_start`; the table of cases in tests/contract_cases.py holds both to them.
"""

from __future__ import annotations

from audit.contract.audit_time import AUDIT_TIME_HEADER_MAX_DIGITS
from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS
from audit.contract.windows import MS_PER_MINUTE

SPARK_CREATE_TIME = 0  # the Kafka source's timestampType (Java's TimestampType ids): 1 is LogAppendTime


def window_start_column(time_ms, window_minutes: int):
    """`audit.contract.windows.window_start` as a Spark column: floor division (pmod, as Python's %, where
    Spark's % truncates toward zero)."""
    from pyspark.sql import functions as F

    window_ms = F.lit(window_minutes * MS_PER_MINUTE)
    return time_ms - F.pmod(time_ms, window_ms)


def audit_time_columns(now_ms: int):
    """(audit time in ms, usable) of a Kafka source row: `audit.contract.audit_time.audit_time` as Spark
    columns, so it runs on the executors; `now_ms` is the counting time of the batch."""
    from pyspark.sql import functions as F

    def usable(time_ms):
        return (time_ms > 0) & (time_ms <= F.lit(MAX_AUDIT_TIME_MS))

    timestamp_ms = F.unix_millis("timestamp")
    headers = F.filter("headers", lambda h: h["key"] == F.lit(AUDIT_TIME_HEADER))
    last_header = F.when(F.size(headers) > 0, F.element_at(headers, -1)["value"].cast("string"))
    # \A and \z: Java's $ also matches before a final line break, which parse_audit_time_header refuses.
    digits = last_header.rlike(rf"\A[0-9]{{1,{AUDIT_TIME_HEADER_MAX_DIGITS}}}\z")
    header_number = F.when(digits, last_header.cast(f"decimal({AUDIT_TIME_HEADER_MAX_DIGITS},0)"))
    header_ms = F.when(usable(header_number), header_number.cast("bigint"))
    create_ms = F.when((F.col("timestampType") == SPARK_CREATE_TIME) & usable(timestamp_ms), timestamp_ms)
    usable_ms = F.coalesce(create_ms, header_ms)
    audit_ms = F.coalesce(usable_ms, F.when(usable(timestamp_ms), timestamp_ms), F.lit(now_ms))
    return audit_ms, usable_ms.isNotNull()


def with_audit_window(frame, window_minutes: int, now_ms: int):
    """Add audit_ms, audit_time, no_timestamp, window_start and date to a Kafka source frame."""
    from pyspark.sql import functions as F

    audit_ms, usable = audit_time_columns(now_ms)
    return (
        frame.withColumn("audit_ms", audit_ms)
        .withColumn("no_timestamp", ~usable)
        .withColumn("audit_time", F.timestamp_millis("audit_ms"))
        .withColumn("window_start", F.timestamp_millis(window_start_column(F.col("audit_ms"), window_minutes)))
        .withColumn("date", F.to_date("window_start"))
    )
