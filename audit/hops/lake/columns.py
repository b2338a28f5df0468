"""The audit contract's rules as Spark columns, for the lake job's micro-batches: they run on the executors.

`audit_time_columns` states `audit.contract.audit_time.audit_time`, `window_start_column`
`audit.contract.windows.window_start`, and `message_hash_column` and `digest_sum` the content digest of
`audit.contract.digest`; the table of cases in tests/contract_cases.py holds them to those.
"""

from __future__ import annotations

from decimal import Decimal

from audit.contract.audit_time import AUDIT_TIME_HEADER_MAX_DIGITS
from audit.contract.digest import KEY_NULL, VALUE_NULL
from audit.contract.record import AUDIT_TIME_HEADER, MAX_AUDIT_TIME_MS
from audit.contract.windows import MS_PER_MINUTE

SPARK_CREATE_TIME = 0  # the Kafka source's timestampType (Java's TimestampType ids): 1 is LogAppendTime
_UNSIGNED_SUM = "decimal(38,0)"  # the sum of over 5 * 10**18 hashes below 2**64 before it could overflow


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


def message_hash_column(key, value):
    """`audit.contract.digest.message_hash` of a row's key and value (BINARY columns, or strings as UTF-8) as
    a BIGINT column: Spark's own xxhash64 (seed 42, nulls skipped) over the two and the null flags."""
    from pyspark.sql import functions as F

    key, value = (F.col(c) if isinstance(c, str) else c for c in (key, value))
    flags = F.when(key.isNull(), KEY_NULL).otherwise(0) + F.when(value.isNull(), VALUE_NULL).otherwise(0)
    return F.xxhash64(key.cast("binary"), value.cast("binary"), flags.cast("int"))


def digest_sum(hashes):
    """The aggregate digest of a BIGINT column of message hashes (or of digests): their sum modulo 2**64 as a
    signed BIGINT, 0 for no rows. Summed as unsigned decimals, so ANSI mode sees no overflow."""
    from pyspark.sql import functions as F

    hashes = F.col(hashes) if isinstance(hashes, str) else hashes
    modulus = F.lit(Decimal(2**64)).cast(_UNSIGNED_SUM)
    unsigned = F.when(hashes < 0, hashes.cast(_UNSIGNED_SUM) + modulus).otherwise(hashes.cast(_UNSIGNED_SUM))
    total = F.pmod(F.coalesce(F.sum(unsigned), F.lit(0).cast(_UNSIGNED_SUM)), modulus)
    return F.when(total >= F.lit(Decimal(2**63)), total - modulus).otherwise(total).cast("bigint")
