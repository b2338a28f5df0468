"""When a reconcile session may skip the judging (`RunMemory.is_quiet`) and when it runs next, without Spark."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from audit.books.run import RunMemory

NOW = 1_800_000_000_000


def test_a_new_memory_is_never_quiet():
    assert not RunMemory().is_quiet(0, NOW), "a new process judges once before it may skip"


@given(read=st.integers(1, 10**9), due=st.none() | st.integers(NOW - 10**6, NOW + 10**6))
def test_a_run_that_read_something_is_never_quiet(read, due):
    assert not RunMemory(judged=True, next_due_ms=due).is_quiet(read, NOW)


@given(due=st.integers(NOW - 10**9, NOW + 10**9))
def test_nothing_read_is_quiet_exactly_until_the_first_pending_window_turns_due(due):
    assert RunMemory(judged=True, next_due_ms=due).is_quiet(0, NOW) == (NOW < due)


def test_nothing_pending_and_nothing_read_is_quiet():
    assert RunMemory(judged=True, next_due_ms=None).is_quiet(0, NOW)


INTERVAL_S, DELAY_MS = 10.0, 6_000


@given(due=st.none() | st.integers(NOW - 10**7, NOW + 10**7))
def test_the_next_run_waits_the_interval_unless_a_window_turns_due_sooner(due):
    wait = RunMemory(judged=True, next_due_ms=due).seconds_to_next_run(INTERVAL_S, NOW, DELAY_MS)
    assert 0 <= wait <= INTERVAL_S
    if due is None or due + DELAY_MS >= NOW + INTERVAL_S * 1000:
        assert wait == INTERVAL_S
    else:  # starts one status delay after the window turns due, at once if that moment has passed
        assert wait == max(0.0, (due + DELAY_MS - NOW) / 1000)


def test_a_window_due_in_3_s_brings_the_next_run_to_9_s_and_a_memory_that_never_judged_waits_the_interval():
    assert RunMemory(judged=True, next_due_ms=NOW + 3_000).seconds_to_next_run(INTERVAL_S, NOW, DELAY_MS) == 9.0
    assert RunMemory(judged=False, next_due_ms=NOW + 3_000).seconds_to_next_run(INTERVAL_S, NOW, DELAY_MS) == INTERVAL_S
