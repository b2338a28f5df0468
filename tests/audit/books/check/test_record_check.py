"""The record checker without Spark: the contract first, then the deployment's expectation suite."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from audit.books.check.python_checker import CHECKED_COLUMNS, RecordChecker
from audit.contract.record import PartitionStatus, count_record, encode, status_record

NOW = 1_700_000_000_000
WINDOW = 1_699_999_800_000  # aligned to 10 minutes
CHECKER = RecordChecker(
    tiers=("producer", "dc1", "aggregate", "lake"),
    clusters=("dc1", "aggregate"),
    window_minutes=10,
    naming="prefix",
    now_ms=NOW,
)


def good(**overrides) -> bytes:
    fields = dict(
        record_id="c-1:1",
        tier="aggregate",
        cluster="aggregate",
        topic="dc1.orders",
        window_start_ms=WINDOW,
        count=5,
        by_partition={0: 2, 1: 3},
        emitted_at_ms=NOW,
    )
    fields.update(overrides)
    return encode(count_record(**fields))


def patched(**changes) -> bytes:
    data = json.loads(good())
    data.update(changes)
    return json.dumps(data).encode()


def check(*values) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "read_from_cluster": "dc1",
            "read_from_topic": "_audit",
            "read_from_partition": 0,
            "read_from_offset": range(len(values)),
            "value": list(values),
        }
    )
    return CHECKER.check(frame)


def test_a_valid_record_keeps_its_fields_and_gets_its_logical_topic():
    out = check(good()).iloc[0]
    assert list(check(good()).columns) == list(CHECKED_COLUMNS)
    assert pd.isna(out["reason"])
    assert (out["origin_cluster"], out["topic"], out["logical_topic"], out["seen_topic"]) == (
        "dc1",
        "orders",
        "dc1.orders",
        "dc1.orders",
    )
    assert json.loads(out["by_partition_json"]) == {"0": 2, "1": 3} and out["count"] == 5


def test_status_records_carry_lag_and_partitions():
    record = status_record(
        record_id="m-1:1",
        tier="aggregate",
        cluster="dc1",
        topic="orders",
        emitted_at_ms=NOW,
        partitions=[PartitionStatus(0, 10, 15, 5, NOW - 1000)],
        watermark_ms=NOW - 1000,
    )
    out = check(encode(record)).iloc[0]
    assert pd.isna(out["reason"]) and out["lag"] == 5 and out["watermark_ms"] == NOW - 1000
    assert json.loads(out["partitions_json"])[0]["end_offset"] == 15


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"not json", "record: not JSON"),
        (b"\xff\xfe", "record: not UTF-8"),
        (patched(count=-3), "count: -3 is negative"),
        (patched(window_start="2023-11-14T22:03:00Z"), "window_start: 2023-11-14T22:03:00Z is not aligned"),
        (json.dumps({"schema_version": 1, "kind": "count"}).encode(), "record_id: missing"),
        (patched(count=10**30), "count: 1000000000000000000000000000000 is over the limit"),
        (patched(tier="moon"), "tier: 'moon' fails expect_column_values_to_be_in_set"),
        (patched(cluster="dc9"), "cluster: 'dc9' fails expect_column_values_to_be_in_set"),
        (
            patched(window_minutes=5, window_start="2023-11-14T22:05:00Z"),
            "window_minutes: 5 fails expect_column_values_to_be_in_set",
        ),
        (
            patched(window_start="2999-01-01T00:00:00Z"),
            "window_start_ms: 32472144000000 fails expect_column_values_to_be_between",
        ),
        (
            patched(window_start="1971-01-01T00:00:00Z"),
            "window_start_ms: 31536000000 fails expect_column_values_to_be_between",
        ),
    ],
)
def test_each_kind_of_bad_record_is_rejected_with_a_reason_and_the_rest_pass(value, reason):
    out = check(good(record_id="ok-1:1"), value, good(record_id="ok-1:2"))
    assert out["reason"].iloc[0] is None or pd.isna(out["reason"].iloc[0])
    assert out["reason"].iloc[1].startswith(reason), out["reason"].iloc[1]
    assert out["raw"].iloc[1] == value.decode("utf-8", errors="replace") and out["raw_bytes"].iloc[1] == len(value)
    assert pd.isna(out["reason"].iloc[2]) and out["record_id"].iloc[2] == "ok-1:2"
    assert out["read_from_offset"].tolist() == [0, 1, 2]


def test_a_digest_is_carried_and_one_that_does_not_fit_by_partition_is_rejected_naming_it():
    digests = {0: -(2**63), 1: 2**63 - 1}
    out = check(
        good(digest_by_partition=digests),
        patched(digest_by_partition={"0": 1}),
        patched(digest_by_partition={"0": 1, "1": 2, "5": 3}),
        patched(digest_by_partition={"0": 2**63, "1": 2}),
        patched(digest_by_partition={"0": 1.5, "1": 2}),
        good(record_id="v1:1", schema_version=1),
    )
    assert pd.isna(out["reason"].iloc[0]) and json.loads(out["digest_by_partition_json"].iloc[0]) == {
        "0": -(2**63),
        "1": 2**63 - 1,
    }
    for reason in out["reason"].iloc[1:5]:
        assert reason.startswith("digest_by_partition"), reason
    assert pd.isna(out["reason"].iloc[5]) and pd.isna(out["digest_by_partition_json"].iloc[5])


def test_aborted_and_unknown_are_carried_and_a_wrong_type_is_rejected_naming_it():
    out = check(
        good(aborted=600, unknown=True),
        good(),
        patched(aborted=-1),
        patched(aborted="600"),
        patched(aborted=True),
        patched(unknown=1),
        patched(unknown="true"),
    )
    assert pd.isna(out["reason"].iloc[0]) and (out["aborted"].iloc[0], out["unknown"].iloc[0]) == (600, True)
    assert pd.isna(out["reason"].iloc[1]) and (out["aborted"].iloc[1], out["unknown"].iloc[1]) == (0, False)
    for name, reason in zip(["aborted"] * 3 + ["unknown"] * 2, out["reason"].iloc[2:], strict=True):
        assert reason.startswith(f"{name}: "), reason


def test_a_status_whose_lags_sum_past_int64_is_rejected_not_a_crash():
    partitions = [PartitionStatus(p, 0, 2**63 - 1, 2**63 - 1) for p in (0, 1)]
    value = encode(status_record(record_id="m-1:9", tier="dc1", cluster="dc1", topic="orders", partitions=partitions))
    out = check(good(), value)
    assert pd.isna(out["reason"].iloc[0])
    assert out["reason"].iloc[1] == (
        f"partitions: the lags sum to {2 * (2**63 - 1)}, over the largest Kafka offset {2**63 - 1}"
    )


def test_the_suite_can_be_imported_in_the_background_while_the_process_waits_for_spark():
    """`kaudit reconcile` imports great_expectations (5-7 s) while its JVM starts: in a fresh interpreter the
    thread leaves the module imported, and the checker's suite is then built from it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from audit.books.check.python_checker import import_expectations_early\n"
        "assert 'great_expectations' not in sys.modules, 'imported before it was asked for'\n"
        "import_expectations_early().join(120)\n"
        "assert 'great_expectations' in sys.modules\n"
        "from tests.audit.books.check.test_record_check import CHECKER\n"
        "print(len(CHECKER.expectations()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "6"
