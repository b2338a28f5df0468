"""The shared run loop: stop requests end it after the current step; a step stuck in a call that never
returns still exits within the grace period after SIGTERM (invariant 8)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from audit.hops.runloop import EXIT_FORCED, run_hop

STUCK_SERVICE = """
import threading, time, sys
from confluent_kafka import Consumer, TopicPartition
from audit.hops.runloop import stop_on_signals
stop = threading.Event()
stop_on_signals(stop.set, grace_s=float(sys.argv[1]))
nobody = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0})
print("ready", flush=True)
while not stop.is_set():
    if sys.argv[2] == "stuck":  # a sleep that never ends: Python's sleep returns to run a handler
        time.sleep(3600)
    elif sys.argv[2] == "broker-call":  # a librdkafka call waits its whole timeout, signal or not
        nobody.committed([TopicPartition("t", 0)], timeout=120)
    else:
        time.sleep(0.05)
"""


def run_until_ready(mode: str, grace_s: float) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", STUCK_SERVICE, str(grace_s), mode], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    return process


@pytest.mark.parametrize("mode", ["stuck", "broker-call"])
def test_a_step_stuck_in_a_call_still_exits_within_the_grace_after_sigterm(mode):
    process = run_until_ready(mode, grace_s=1.0)
    time.sleep(0.5)  # into the call: a signal before it would find the loop free and stop it cleanly
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == EXIT_FORCED
    assert time.monotonic() - began < 3


def test_a_loop_that_is_free_stops_cleanly_with_exit_0_and_without_waiting_for_the_grace():
    process = run_until_ready("free", grace_s=30.0)
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    assert time.monotonic() - began < 3, "the watchdog thread must not keep a cleanly stopped process alive"


class CountingHop:
    topic_refresh_s = 0.05

    def __init__(self, idle_after: int) -> None:
        self.calls: list[str] = []
        self.steps = 0
        self.idle_after = idle_after

    def open(self) -> None:
        self.calls.append("open")

    def refresh_topics(self) -> None:
        self.calls.append("refresh")

    def step(self) -> bool:
        self.steps += 1
        time.sleep(0.01)
        return self.steps >= self.idle_after

    def caught_up(self) -> bool:
        return True

    def finish(self) -> None:
        self.calls.append("finish")

    def close(self) -> None:
        self.calls.append("close")


def test_until_caught_up_stops_at_the_first_idle_step_and_finishes_then_closes():
    hop = CountingHop(idle_after=5)
    run_hop(hop, threading.Event(), until_caught_up=True)
    assert hop.steps == 5 and hop.calls[0] == "open" and hop.calls[-2:] == ["finish", "close"]


def test_a_stop_request_ends_the_loop_and_a_failing_step_still_closes():
    hop = CountingHop(idle_after=10**9)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    run_hop(hop, stop)
    assert hop.calls[-2:] == ["finish", "close"] and hop.calls.count("refresh") >= 2

    class Failing(CountingHop):
        def step(self) -> bool:
            raise RuntimeError("broker gone")

    failing = Failing(idle_after=1)
    try:
        run_hop(failing, threading.Event())
    except RuntimeError:
        pass
    assert failing.calls[-1] == "close" and "finish" not in failing.calls


STUCK_HOP = """
import threading, time, sys
from audit.hops import runloop
runloop.STUCK_STEP_S = 0.5

class Hop:
    topic_refresh_s = 1.0
    def open(self): pass
    def refresh_topics(self): pass
    def step(self): return True
    def caught_up(self): return True
    def finish(self): pass
    def close(self): pass

def hangs(self): time.sleep(1.5)
setattr(Hop, sys.argv[1], hangs)
runloop.run_hop(Hop(), threading.Event(), until_caught_up=True)
"""


@pytest.mark.parametrize("where", ["open", "finish", "close"])
def test_a_hop_stuck_opening_finishing_or_closing_prints_every_stack(where):
    """Not only a step: a call that never returns in the opening, the last commit or the closing
    (a consumer's close waiting on its group) would otherwise leave a process hanging without a trace."""
    done = subprocess.run([sys.executable, "-c", STUCK_HOP, where], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "Thread" in done.stderr and "in hangs" in done.stderr, done.stderr


class RefreshFailsFirst(CountingHop):
    """A hop whose broker is away for its first `failures` topic refreshes."""

    topic_refresh_s = 60.0

    def __init__(self, failures: int, error: KafkaError) -> None:
        super().__init__(idle_after=0)
        self.failures, self.error = failures, error

    def refresh_topics(self) -> None:
        self.calls.append("refresh")
        if self.calls.count("refresh") <= self.failures:
            raise KafkaException(self.error)


def test_a_refresh_a_broker_does_not_answer_is_tried_again_and_no_run_is_caught_up_before_it_succeeds():
    """A source broker killed while the replicator lists its topics does not end the process: the refresh is
    tried again, and the run is not caught up before one succeeds."""
    from audit.hops import runloop

    hop = RefreshFailsFirst(2, KafkaError(KafkaError._TRANSPORT, "Failed while waiting for response from broker"))
    began = time.monotonic()
    run_hop(hop, threading.Event(), until_caught_up=True)
    assert hop.calls.count("refresh") == 3 and hop.calls[-2:] == ["finish", "close"]
    assert hop.steps > 1, "idle steps before the topics were known did not end the run"
    assert time.monotonic() - began < 2 * runloop.REFRESH_RETRY_S + 1


@pytest.mark.parametrize(
    "error",
    [KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"), KafkaError(KafkaError._TRANSPORT, "x", fatal=True)],
)
def test_a_refresh_refused_for_good_still_ends_the_run(error):
    hop = RefreshFailsFirst(1, error)
    with pytest.raises(KafkaException):
        run_hop(hop, threading.Event(), until_caught_up=True)
    assert hop.calls[-1] == "close"
