"""Waiting in tests for something real (a broker, a commit, a count) to happen, with a bound."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout_s: float, every_s: float = 0.25) -> float | None:
    """Seconds until `condition()` held, or None if it did not within `timeout_s`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if condition():
            return time.monotonic() - began
        time.sleep(every_s)
    return None


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 60, every_s: float = 0.1) -> None:
    """`wait_until`, failing the test with `what` when it does not happen in time."""
    assert wait_until(condition, timeout_s, every_s) is not None, f"timed out waiting for {what}"
