"""The Spark form of the completeness rules gives, row for row, what the contract's `classify` gives.

The reference is `classify` itself, run through `mapInPandas` over the same DataFrame (so both answers
cross the same pandas/Arrow/Spark conversions): the contract's table of cases, then 2,000 random rows
with partition maps, thresholds, missing watermarks and every position of now and the watermark
around window end + grace.
"""

from __future__ import annotations

import random

import pytest

from audit.books.judge.in_spark import JUDGED_COLUMNS
from audit.books.judge.verdicts import classified
from audit.contract.completeness import classify
from tests.audit.contract.test_completeness import CASES, DUE, GRACE, WINDOW_END

INPUT_DDL = (
    "case INT, expected BIGINT, observed BIGINT, expected_by_partition MAP<INT, BIGINT>, "
    "observed_by_partition MAP<INT, BIGINT>, window_end_ms BIGINT, tier_watermark_ms BIGINT, threshold_pct DOUBLE, "
    "expected_digest_by_partition MAP<INT, BIGINT>, observed_digest_by_partition MAP<INT, BIGINT>, now_ms BIGINT"
)
VERDICT = ("missing", "duplicated", "completeness_pct", "final", "status", "mismatched_partitions")


def case_rows() -> list[tuple]:
    rows = []
    for index, (_why, expected, observed, kwargs, *_answer) in enumerate(CASES):
        watermark = kwargs.get("watermark", DUE + 1)
        rows.append(
            (
                index,
                expected,
                observed,
                kwargs.get("exp_parts"),
                kwargs.get("obs_parts"),
                WINDOW_END,
                None if watermark != watermark else int(watermark),  # NaN: no watermark
                kwargs.get("threshold"),
                kwargs.get("exp_digests"),
                kwargs.get("obs_digests"),
                kwargs.get("now", DUE + 10_000),
            )
        )
    return rows


def random_rows(count: int, seed: int = 11, *, partitions: int = 6, most: int = 4) -> list[tuple]:
    """Rows whose partition maps hold up to `most` of `partitions` partitions."""
    rng = random.Random(seed)

    def parts():
        if rng.random() < 0.3:
            return None
        return {p: rng.choice([0, 1, 5, 10**6]) for p in rng.sample(range(partitions), rng.randint(0, most))}

    def digests(counts):
        """Of the same partitions as `counts` (unknown now and then): their digest if the same messages, or another."""
        if counts is None or rng.random() < 0.2:
            return None
        return {p: rng.choice([n, n, -n, 2**63 - 1, -(2**63)]) for p, n in counts.items()}

    rows = []
    for index in range(count):
        expected_parts, observed_parts = parts(), parts()
        if expected_parts is not None and rng.random() < 0.4:  # counts that balance, partition by partition
            observed_parts = dict(expected_parts)
        expected = sum(expected_parts.values()) if expected_parts is not None else rng.choice([0, 1, 7, 1000])
        observed = sum(observed_parts.values()) if observed_parts is not None else rng.choice([0, 1, 7, 999, 1000])
        moment = DUE + rng.choice([-(10**6), -1, 0, 1, 10**6])
        rows.append(
            (
                1000 + index,
                expected,
                observed,
                expected_parts,
                observed_parts,
                WINDOW_END,
                None if rng.random() < 0.2 else moment,
                rng.choice([None, 100.0, 99.5, 0.0, float("nan")]),
                digests(expected_parts),
                digests(observed_parts),
                DUE + rng.choice([-1, 0, 1]),
            )
        )
    return rows


def both_ways(spark, rows: list[tuple]) -> tuple[dict, dict]:
    """{case: verdict} from the Spark form and from `classify`, for rows sharing one `now`."""
    frame = spark.createDataFrame(rows, INPUT_DDL)
    answers: tuple[dict, dict] = ({}, {})
    for now in sorted({row[-1] for row in rows}):
        at_now = frame.where(frame.now_ms == now).drop("now_ms")
        ours = classified(at_now, now_ms=now, grace_ms=GRACE).select("case", *VERDICT)

        def reference(frames, now=now):
            for batch in frames:
                judged = classify(batch, now_ms=now, grace_ms=GRACE)
                yield judged[["case", *VERDICT]]

        ddl = "case INT, " + ", ".join(f"{name} {JUDGED_COLUMNS[name]}" for name in VERDICT)
        theirs = at_now.mapInPandas(reference, ddl)
        for answer, result in zip(answers, (ours, theirs), strict=True):
            answer.update({row.case: tuple(row)[1:] for row in result.collect()})
    return answers


def test_the_contract_cases_get_the_same_verdicts(spark):
    ours, theirs = both_ways(spark, case_rows())
    assert ours == theirs and len(ours) == len(CASES)
    assert [ours[i][4] for i in range(len(CASES))] == [case[4] for case in CASES]
    assert {ours[i][5] is not None for i in range(len(CASES))} == {True, False}


# The third: maps of at most one partition, of two, so both sides often hold one, the same or another.
@pytest.mark.parametrize(("seed", "partitions", "most"), [(11, 6, 4), (12, 6, 4), (13, 2, 1)])
def test_random_rows_get_the_same_verdicts(spark, seed, partitions, most):
    ours, theirs = both_ways(spark, random_rows(1000, seed, partitions=partitions, most=most))
    differing = {case: (ours[case], theirs[case]) for case in ours if ours[case] != theirs[case]}
    assert not differing and len(ours) == 1000, list(differing.items())[:5]
    statuses = {"complete", "incomplete", "over", "mismatch", "lagging", "pending"}
    assert {verdict[4] for verdict in ours.values()} == statuses
