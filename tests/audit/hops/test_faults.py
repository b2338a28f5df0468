"""The fault hooks as pure objects: exactly N, only the chosen window, a pause in time."""

from __future__ import annotations

import pytest

from audit.contract.errors import ConfigError
from audit.hops.faults import DropFault, PauseFault

WINDOW = 1_700_000_400_000  # aligned to 10 minutes


def test_drop_exactly_n_of_matching_topics_only():
    fault = DropFault("^orders$", count=3)
    decisions = [fault.should_drop(topic) for topic in ["orders", "clicks", "orders", "orders", "orders", "orders"]]
    assert decisions == [True, False, True, True, False, False]


def test_drop_only_inside_the_chosen_window():
    fault = DropFault("orders", count=2, windows_ms=(WINDOW,))
    times = [WINDOW - 1, WINDOW, WINDOW + 599_999, WINDOW + 600_000, WINDOW + 10]
    assert [fault.should_drop("orders", t) for t in times] == [False, True, True, False, False]
    assert "window" in fault.describe()


def test_drop_count_applies_to_each_chosen_window():
    later = WINDOW + 1_200_000  # a window apart: the one between is not chosen
    fault = DropFault("orders", count=2, windows_ms=(WINDOW, later))
    times = [WINDOW, later, WINDOW + 600_000, WINDOW + 1, later + 5, WINDOW + 2, later + 9, later + 599_999]
    assert [fault.should_drop("orders", t) for t in times] == [True, True, False, True, True, False, False, False]
    assert fault.dropped == 4
    assert "each of 2 windows" in fault.describe()


def test_pause_covers_its_interval_only():
    fault = PauseFault(after_s=5, for_s=10)
    assert [fault.paused(t) for t in (100.0, 104.9, 105.0, 114.9, 115.0)] == [False, False, True, True, False]


def test_a_pause_ended_early_stays_ended():
    fault = PauseFault(after_s=0, for_s=100)
    assert fault.paused(10.0) and fault.paused(20.0)
    fault.end()
    assert not fault.paused(21.0) and not fault.paused(50.0)


@pytest.mark.parametrize("kwargs", [{"count": -1}, {"fraction": 2.0}, {"count": 1, "fraction": 0.5}, {}])
def test_bad_drop_settings_are_refused(kwargs):
    with pytest.raises(ConfigError, match="drop fault"):
        DropFault("x", **kwargs)
