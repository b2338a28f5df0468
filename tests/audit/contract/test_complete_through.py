"""Complete-through watermarks from a sequence of window verdicts: a table of cases, plus properties."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.complete_through import advanced, watermark_frame, watermark_of

T0 = pd.Timestamp("2026-11-23T10:00Z")
SIZE = pd.Timedelta(minutes=10)
STATUSES = ("complete", "incomplete", "over", "mismatch", "lagging", "pending")


def windows(*verdicts: tuple[int, str, bool]) -> pd.DataFrame:
    """(window index from T0, status, final) per window, in the order given."""
    return pd.DataFrame(
        [
            {"window_start": T0 + i * SIZE, "window_end": T0 + (i + 1) * SIZE, "status": status, "final": final}
            for i, status, final in verdicts
        ],
        columns=["window_start", "window_end", "status", "final"],
    )


def end_of(index: int) -> pd.Timestamp:
    return T0 + (index + 1) * SIZE


@pytest.mark.parametrize(
    "verdicts, through, first_open",
    [
        pytest.param([(0, "complete", True), (1, "complete", True)], end_of(1), None, id="all closed"),
        pytest.param(
            [(0, "complete", True), (1, "incomplete", True), (2, "complete", True)],
            end_of(0),
            (1, "incomplete"),
            id="a loss stops it, later complete windows do not count",
        ),
        pytest.param(
            [(0, "complete", True), (1, "complete", False)], end_of(0), (1, "complete"), id="complete but not final"
        ),
        pytest.param([(0, "over", True), (1, "complete", True)], None, (0, "over"), id="duplicates are not complete"),
        pytest.param(
            [(0, "complete", True), (1, "mismatch", True), (2, "complete", True)],
            end_of(0),
            (1, "mismatch"),
            id="content that differs is not complete",
        ),
        pytest.param([(0, "complete", True), (3, "lagging", False)], end_of(0), (3, "lagging"), id="gap then lag"),
        pytest.param(
            [(5, "pending", False), (2, "complete", True), (0, "complete", True)],
            end_of(2),
            (5, "pending"),
            id="any order, quiet windows skipped",
        ),
        pytest.param([], None, None, id="no windows"),
    ],
)
def test_watermark_cases(verdicts, through, first_open):
    mark = watermark_of(windows(*verdicts))
    assert mark.complete_through == through
    if first_open is None:
        assert (mark.first_open_window, mark.first_open_status) == (None, None)
    else:
        assert (mark.first_open_window, mark.first_open_status) == (T0 + first_open[0] * SIZE, first_open[1])


verdict_lists = st.lists(st.tuples(st.sampled_from(STATUSES), st.booleans()), min_size=1, max_size=30).map(
    lambda pairs: [(i, status, final) for i, (status, final) in enumerate(pairs)]
)


@given(verdict_lists, st.randoms(use_true_random=False))
def test_every_window_before_the_watermark_is_closed_and_the_first_open_one_is_not(verdicts, rng):
    shuffled = list(verdicts)
    rng.shuffle(shuffled)
    mark = watermark_of(windows(*shuffled))
    for index, status, final in verdicts:
        if mark.complete_through is not None and end_of(index) <= mark.complete_through:
            assert status == "complete" and final
    if mark.first_open_window is None:
        assert all(status == "complete" and final for _, status, final in verdicts)
        assert mark.complete_through == end_of(len(verdicts) - 1)
    else:
        index = int((mark.first_open_window - T0) / SIZE)
        assert not (verdicts[index][1] == "complete" and verdicts[index][2])
        assert mark.first_open_status == verdicts[index][1]
        assert mark.complete_through == (end_of(index - 1) if index else None), "it stops right before the problem"


@given(verdict_lists)
def test_closing_the_first_open_window_never_moves_the_watermark_back(verdicts):
    before = watermark_of(windows(*verdicts))
    if before.first_open_window is None:
        return
    index = int((before.first_open_window - T0) / SIZE)
    closed = [(i, "complete", True) if i == index else (i, s, f) for i, s, f in verdicts]
    after = watermark_of(windows(*closed))
    assert after.complete_through is not None and after.complete_through > (before.complete_through or T0)


def test_the_frame_form_keeps_the_key_and_gives_one_row():
    frame = windows((0, "complete", True), (1, "lagging", False)).assign(
        origin_cluster="dc1", topic="orders", logical_topic="dc1.orders", tier="lake"
    )
    [row] = watermark_frame(frame).to_dict("records")
    assert row == {
        "origin_cluster": "dc1",
        "topic": "orders",
        "logical_topic": "dc1.orders",
        "tier": "lake",
        "complete_through": end_of(0),
        "first_open_window": T0 + SIZE,
        "first_open_status": "lagging",
    }


def advance(before: list, verdicts: list):
    """`advanced` from the watermark of `before` by `verdicts`, and `watermark_of` once they replace theirs."""
    stored = watermark_of(windows(*before))
    judged = {index for index, _, _ in verdicts}
    after = [verdict for verdict in before if verdict[0] not in judged] + verdicts
    return advanced(stored, windows(*verdicts).to_dict("records")), watermark_of(windows(*after))


@pytest.mark.parametrize(
    "before, verdicts",
    [
        pytest.param(
            [(0, "complete", True), (1, "pending", False)], [(1, "lagging", False)], id="the first open turns"
        ),
        pytest.param(
            [(0, "complete", True), (1, "incomplete", True)], [(0, "complete", True)], id="a closed one again"
        ),
        pytest.param([(0, "complete", True)], [(2, "pending", False)], id="a new open one after all closed"),
        pytest.param([(0, "complete", True)], [(1, "complete", True)], id="a new closed one after all closed"),
        pytest.param(
            [(0, "complete", True), (3, "pending", False)], [(1, "complete", True)], id="a gap before the open one"
        ),
        pytest.param([(1, "pending", False)], [(0, "complete", True), (2, "over", True)], id="around the open one"),
    ],
)
def test_the_watermark_advances_from_the_stored_one_where_the_judged_windows_decide_it(before, verdicts):
    moved, expected = advance(before, verdicts)
    assert moved == expected


@pytest.mark.parametrize(
    "before, verdicts",
    [
        pytest.param(
            [(0, "complete", True), (1, "pending", False), (2, "incomplete", True)],
            [(1, "complete", True)],
            id="the first open one closed: the next is not judged",
        ),
        pytest.param(
            [(0, "complete", True), (1, "complete", True), (2, "pending", False)],
            [(0, "over", True)],
            id="a closed one opened: the ones before it are not judged",
        ),
        pytest.param([(0, "complete", True), (1, "complete", True)], [(0, "over", True)], id="all closed, one opened"),
    ],
)
def test_the_watermark_is_left_to_the_table_where_windows_not_judged_decide_it(before, verdicts):
    moved, _ = advance(before, verdicts)
    assert moved is None


@given(verdict_lists, st.lists(st.tuples(st.integers(0, 40), st.sampled_from(STATUSES), st.booleans()), max_size=8))
def test_an_advanced_watermark_is_the_one_of_all_windows(before, judged):
    verdicts = list({index: (index, status, final) for index, status, final in judged}.values())
    moved, expected = advance(before, verdicts)
    assert moved is None or moved == expected
