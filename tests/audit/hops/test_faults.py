"""The fault hooks as pure objects: exactly N, only the chosen window, one byte of one message, a pause in time."""

from __future__ import annotations

import pytest

from audit.contract.digest import digest_of
from audit.contract.errors import ConfigError
from audit.contract.windows import window_end
from audit.hops.faults import DropFault, FlipFault, PauseFault

WINDOW = 1_700_000_400_000  # aligned to 10 minutes


def test_drop_exactly_n_of_matching_topics_only():
    fault = DropFault("^orders$", count=3)
    decisions = [fault.should_drop(topic) for topic in ["orders", "clicks", "orders", "orders", "orders", "orders"]]
    assert decisions == [True, False, True, True, False, False]


def test_drop_only_inside_the_chosen_window():
    fault = DropFault("orders", count=2, windows_ms=(WINDOW,))
    times = [WINDOW - 1, WINDOW, window_end(WINDOW) - 1, window_end(WINDOW), WINDOW + 10]
    assert [fault.should_drop("orders", t) for t in times] == [False, True, True, False, False]
    assert "window" in fault.describe()


def test_drop_count_applies_to_each_chosen_window():
    later = WINDOW + 1_200_000  # a window apart: the one between is not chosen
    fault = DropFault("orders", count=2, windows_ms=(WINDOW, later))
    times = [WINDOW, later, window_end(WINDOW), WINDOW + 1, later + 5, WINDOW + 2, later + 9, window_end(later) - 1]
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


def test_a_flip_changes_one_byte_of_the_first_chosen_message_and_drops_nothing():
    fault = FlipFault("^orders$", partition=1, window_ms=WINDOW)
    messages = [
        ("clicks", 1, WINDOW, b"abc"),  # another topic
        ("orders", 0, WINDOW, b"abc"),  # another partition
        ("orders", 1, WINDOW - 1, b"abc"),  # the window before
        ("orders", 1, WINDOW + 5, None),  # a tombstone has no byte to flip
        ("orders", 1, WINDOW + 5, b""),
        ("orders", 1, WINDOW + 6, b"abc"),  # the chosen one
        ("orders", 1, WINDOW + 7, b"abc"),  # one message only
    ]
    copies = [fault.changed_value(topic, partition, at, value) for topic, partition, at, value in messages]
    assert copies == [b"abc", b"abc", b"abc", None, b"", bytes([ord("a") ^ 0xFF]) + b"bc", b"abc"]
    assert not any(fault.should_drop(topic, at) for topic, _partition, at, _value in messages)
    assert (fault.flipped, fault.flipped_at) == (1, ("orders", 1, WINDOW + 6))
    assert digest_of([(None, copies[5])]) != digest_of([(None, b"abc")])
    assert "flip byte 0 of one message of partition 1 in the window" in fault.describe()


def test_a_flip_of_the_last_byte_and_a_drop_fault_copies_unchanged():
    fault = FlipFault("orders", byte_index=-1)
    assert fault.changed_value("orders", 0, 0, b"a") == bytes([ord("a") ^ 0xFF])
    assert DropFault("orders", count=1).changed_value("orders", 0, 0, b"a") == b"a"


@pytest.mark.parametrize("kwargs", [{"topics": "("}, {"topics": "x", "partition": -1}])
def test_bad_flip_settings_are_refused(kwargs):
    with pytest.raises(ConfigError, match="flip fault"):
        FlipFault(**kwargs)
