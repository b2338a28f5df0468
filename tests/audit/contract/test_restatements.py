"""Restatements found from a window's verdict before and after a run: a table of cases, plus properties."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.restatements import RESTATEMENT_COLUMNS, restated, restatements

WINDOW = pd.Timestamp("2026-11-23T10:00Z")
WRITTEN = pd.Timestamp("2026-11-23T10:20Z")


def pair(before: tuple, after: tuple, *, final: bool = True, written: pd.Timestamp = WRITTEN, **key) -> dict:
    """before / after: (expected, observed, status); `final`: the verdict before was final."""
    row = dict(
        origin_cluster="dc1",
        topic="orders",
        logical_topic="dc1.orders",
        window_start=WINDOW,
        window_minutes=10,
        tier="lake",
        reference_tier="producer",
        before_final=final,
        before_updated_at=written,
        after_final=True,
    )
    row.update(key)
    for side, values in (("before", before), ("after", after)):
        row.update({f"{side}_expected": values[0], f"{side}_observed": values[1], f"{side}_status": values[2]})
    return row


@pytest.mark.parametrize(
    "before, after, final, expected",
    [
        ((100, 100, "complete"), (100, 100, "complete"), True, False),  # a rerun: nothing changed
        ((100, 97, "incomplete"), (100, 100, "complete"), True, True),  # late counts fill a loss
        ((100, 100, "complete"), (103, 100, "incomplete"), True, True),  # the producer's recount
        ((100, 100, "complete"), (100, 105, "over"), True, True),  # a replay
        ((100, 97, "incomplete"), (100, 98, "incomplete"), True, True),  # less short, same status
        ((100, 90, "lagging"), (100, 100, "complete"), False, False),  # was never final: that is lag, not a restatement
        ((100, None, "complete"), (100, None, "complete"), True, False),  # nulls compare equal
    ],
)
def test_a_final_verdict_that_changes_is_a_restatement(before, after, final, expected):
    frame = pd.DataFrame([pair(before, after, final=final)])
    assert restated(frame).tolist() == [expected]
    assert len(restatements(frame)) == int(expected)


def test_ids_are_stable_and_tell_apart_every_change_of_a_window():
    there = pair((100, 100, "complete"), (100, 97, "incomplete"))
    back = pair((100, 97, "incomplete"), (100, 100, "complete"), written=WRITTEN + pd.Timedelta(minutes=5))
    again = pair((100, 100, "complete"), (100, 97, "incomplete"), written=WRITTEN + pd.Timedelta(minutes=9))
    ids = restatements(pd.DataFrame([there, back, again]))["restatement_id"].tolist()
    assert len(set(ids)) == 3, "each flip of the same window is its own restatement"
    assert restatements(pd.DataFrame([there]))["restatement_id"].tolist() == ids[:1], "a rerun finds the same id"
    other_tier = restatements(pd.DataFrame([{**there, "tier": "aggregate"}]))["restatement_id"].iloc[0]
    assert other_tier not in ids
    assert list(restatements(pd.DataFrame([there])).columns) == list(RESTATEMENT_COLUMNS)


verdicts = st.tuples(
    st.integers(0, 5), st.integers(0, 5), st.sampled_from(["complete", "incomplete", "over", "lagging", "pending"])
)


@given(verdicts, verdicts, st.booleans())
def test_only_final_windows_whose_verdict_changed_are_restated(before, after, final):
    frame = pd.DataFrame([pair(before, after, final=final)])
    assert restated(frame).tolist() == [final and before != after]


def test_an_id_does_not_depend_on_the_other_rows_it_is_found_with():
    """A count column with a null in it is float in pandas; the id of a row beside it must not change."""
    alone = pair((100, 100, "complete"), (100, 97, "incomplete"))
    beside = pair((None, 5, "complete"), (7, 5, "incomplete"), topic="other")
    first = restatements(pd.DataFrame([alone]))["restatement_id"].iloc[0]
    assert restatements(pd.DataFrame([alone, beside]))["restatement_id"].iloc[0] == first


def test_ids_are_those_stored_by_earlier_versions():
    """A run after an upgrade must find the restatements stored before it under the same ids, or it stores them
    twice: microseconds, a float count column (a null beside), naive moments and a null count each keep their text."""
    rows = [
        pair((100, 100, "complete"), (100, 97, "incomplete")),
        pair(
            (None, 5, "complete"),
            (7, 5, "incomplete"),
            topic="other",
            written=WRITTEN + pd.Timedelta(microseconds=1234),
        ),
        pair(
            (100, 100, "complete"),
            (100, None, "incomplete"),
            window_start=pd.Timestamp("2026-11-23T23:50:00"),
            written=pd.Timestamp("2026-11-24T00:01:02.5"),
        ),
    ]
    assert restatements(pd.DataFrame(rows))["restatement_id"].tolist() == [
        "2280382a5e049c44131f01a2c24c7e45",  # as the row-by-row form (pandas' isoformat per row) stored it
        "dd74125a8ce875636667cb6cff36fdce",
        "cbec52ace33e70cf3947ac7119cb50f4",
    ]
