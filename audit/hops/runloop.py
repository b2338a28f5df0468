"""The run loop every Kafka hop shares: open, step until told to stop, finish, close.

A hop says how to take one step and whether it has caught up; the loop owns when to stop: a stop
request (SIGTERM, SIGINT, `stop()`), `max_seconds`, or, with `until_caught_up`, an idle step after
which the hop reports nothing left. The close runs whatever happened, so a failed step still leaves
the clients closed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Hop(Protocol):
    @property
    def topic_refresh_s(self) -> float: ...

    def open(self) -> None: ...

    def refresh_topics(self) -> None: ...

    def step(self) -> bool:
        """One batch; True when it found nothing to do (the moment to ask `caught_up`)."""
        ...

    def caught_up(self) -> bool: ...

    def finish(self) -> None:
        """Last work before closing, on a normal stop: flush, commit, a last status."""
        ...

    def close(self) -> None: ...


def run_hop(
    hop: Hop, stop: threading.Event, *, max_seconds: float | None = None, until_caught_up: bool = False
) -> None:
    started = time.monotonic()
    next_refresh = started
    try:
        hop.open()
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_refresh:
                hop.refresh_topics()
                next_refresh = now + hop.topic_refresh_s
            idle = hop.step()
            if until_caught_up and idle and hop.caught_up():
                break
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        hop.finish()
    finally:
        hop.close()


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call `stop`: the loop ends after its current step and a last `finish`."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop())
