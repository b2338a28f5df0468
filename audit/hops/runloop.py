"""The run loop every Kafka hop shares: open, step until told to stop, finish, close.

A hop says how to take one step and whether it has caught up; the loop owns when to stop: a stop
request (SIGTERM, SIGINT, `stop()`), `max_seconds`, or, with `until_caught_up`, an idle step after
which the hop reports nothing left. The close runs whatever happened, so a failed step still leaves
the clients closed.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaException

from audit.io.clients import is_transient

log = logging.getLogger(__name__)


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
    armed_at = -STUCK_REARM_S
    # A call that never returns would otherwise leave no trace of where: the opening, a step, the last
    # commit and the closing are all watched. Each arming starts a watchdog thread, so it is renewed
    # every STUCK_REARM_S, not every step (a batch).
    faulthandler.dump_traceback_later(STUCK_STEP_S, repeat=True, file=sys.stderr)
    topics_known = False
    try:
        hop.open()
        while not stop.is_set():
            now = time.monotonic()
            if now - armed_at >= STUCK_REARM_S:
                faulthandler.dump_traceback_later(STUCK_STEP_S, repeat=True, file=sys.stderr)
                armed_at = now
            if now >= next_refresh:
                refreshed = _refresh(hop)
                topics_known = topics_known or refreshed
                next_refresh = now + (hop.topic_refresh_s if refreshed else REFRESH_RETRY_S)
            idle = hop.step()
            # Before its topics are known a hop has nothing assigned, which is not having caught up.
            if until_caught_up and idle and topics_known and hop.caught_up():
                break
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        faulthandler.dump_traceback_later(STUCK_STEP_S, repeat=True, file=sys.stderr)
        hop.finish()
    finally:
        try:
            hop.close()
        finally:
            faulthandler.cancel_dump_traceback_later()


def _refresh(hop: Hop) -> bool:
    """Refresh the hop's topics; False when a broker did not answer (down, restarting), which the next try
    may find back: a broker away during a hop's first refresh must not end the process."""
    try:
        hop.refresh_topics()
    except KafkaException as exc:
        if not is_transient(exc.args[0]):
            raise
        log.warning("topic refresh failed, retried", extra={"error": exc.args[0].str(), "retry_in_s": REFRESH_RETRY_S})
        return False
    return True


REFRESH_RETRY_S = 1.0
STUCK_STEP_S = 60.0  # no new step, or an opening or closing not done, for this long: every thread's stack is printed, and again each time
STUCK_REARM_S = 10.0  # so a step stuck 50-60 s is the shortest that prints


DEFAULT_STOP_GRACE_S = 10.0


def freeze_start_up() -> None:
    """For a service's process once started: a consume loop makes a Python object per message, so the collector
    runs often, and each run would walk every object the start-up left alive, which is never garbage."""
    gc.freeze()


def stop_on_signals(stop: Callable[[], None], *, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
    """SIGTERM and SIGINT call `stop`: the loop ends after its current step and a last `finish`.

    A step can be inside a broker call that waits for a broker that is not there; after `grace_s` the
    process exits anyway, as a crash would. Every service is built to survive a kill -9 at any moment
    (invariant 2), so this costs at most a recount or a few duplicates, and a stop never hangs. A
    second signal exits at once.

    Python runs a signal handler only when the main thread is between bytecodes, and a librdkafka call
    (consume, committed, list_topics, ...) does not return early for a signal: a handler would wait for
    the call's whole timeout. So the signal is taken from the interpreter's wakeup fd, which its C-level
    handler writes at once, by a thread of its own; the Python-level handler does nothing."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: None)
    threading.Thread(target=_watch_signals, args=(read_fd, stop, grace_s), name="stop-signals", daemon=True).start()


def _watch_signals(read_fd: int, stop: Callable[[], None], grace_s: float) -> None:
    stopping = False
    while True:
        signum = os.read(read_fd, 1)[0]
        if signum not in (signal.SIGTERM, signal.SIGINT):
            continue
        if stopping:
            log.warning("second stop signal: exiting now", extra={"signal": signum})
            os._exit(EXIT_FORCED)
        stopping = True
        log.info("stop signal: finishing the current step", extra={"signal": signum})
        stop()
        watchdog = threading.Timer(grace_s, _exit_late, args=(grace_s,))
        watchdog.daemon = True  # a clean stop ends the process without waiting for it
        watchdog.start()


EXIT_FORCED = 143  # 128 + SIGTERM, what a shell reports for a process ended by SIGTERM


def _exit_late(grace_s: float) -> None:
    log.warning("stopping took longer than the grace period: exiting as a crash would", extra={"grace_s": grace_s})
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)  # where the step was stuck
    logging.shutdown()
    os._exit(EXIT_FORCED)
