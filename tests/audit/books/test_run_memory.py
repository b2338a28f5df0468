"""When a reconcile session may skip the judging: the rule of `RunMemory.is_quiet`, without Spark."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from audit.books.reconcile import RunMemory

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
