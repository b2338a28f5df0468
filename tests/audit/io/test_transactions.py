"""The transactional producer's life (`audit.io.transactions.Transactions`) with producers that fail on cue: what
is retried, when a new producer takes over, and when the id is refused. The same life on real brokers is tested
through the counter (tests/audit/hops/test_counter.py) and the exactly-once replicator (test_exactly_once.py)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from audit.contract.errors import KafkaClientError
from audit.io import transactions
from audit.io.transactions import RETRIABLE_ATTEMPTS, TransactionRefused, Transactions

HANG = "hang"  # a call that never returns


class ScriptedProducer:
    """Answers each transactional call with the next error scripted for it (HANG: never), else succeeds."""

    def __init__(self, script: dict[str, list]) -> None:
        self.script = {call: list(errors) for call, errors in script.items()}
        self.calls: list[str] = []
        self.released = threading.Event()

    def _answer(self, call: str) -> None:
        self.calls.append(call)
        errors = self.script.get(call)
        if errors:
            error = errors.pop(0)
            if error is HANG:
                self.released.wait()
                return
            raise KafkaException(error)

    def init_transactions(self, timeout_s: float) -> None:
        self._answer("init_transactions")

    def begin_transaction(self) -> None:
        self._answer("begin_transaction")

    def send_offsets_to_transaction(self, offsets, group, timeout_s: float) -> None:
        self._answer("send_offsets_to_transaction")

    def commit_transaction(self, timeout_s: float) -> None:
        self._answer("commit_transaction")

    def abort_transaction(self, timeout_s: float) -> None:
        self._answer("abort_transaction")

    def purge(self) -> None:
        self.calls.append("purge")


def fenced() -> KafkaError:
    return KafkaError(KafkaError.PRODUCER_FENCED, "fenced by a newer epoch", fatal=True)


def timed_out() -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "request timed out", retriable=True)


@pytest.fixture(autouse=True)
def quick_late_answers(monkeypatch):
    monkeypatch.setattr(transactions, "LATE_ANSWER_S", 0.2)


def life(*scripts: dict[str, list]) -> tuple[Transactions, list[ScriptedProducer]]:
    """A started Transactions whose n-th producer follows scripts[n] (no script: all succeed)."""
    made: list[ScriptedProducer] = []

    def new_producer() -> ScriptedProducer:
        made.append(ScriptedProducer(scripts[len(made)] if len(made) < len(scripts) else {}))
        return made[-1]

    held = Transactions(new_producer, transactional_id="tx-1", call_timeout_s=0.1, owner="counter dc1")
    held.start(1.0, address="127.0.0.1:9092")
    return held, made


def test_a_transaction_is_begun_given_offsets_and_committed_on_one_producer():
    held, made = life()
    assert held.begin() and held.send_offsets([], "group") and held.commit()
    assert not held.in_transaction
    assert made[0].calls == [
        "init_transactions",
        "begin_transaction",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]


def test_a_retriable_commit_is_made_again_up_to_the_limit_then_a_new_producer_settles_it():
    held, made = life({"commit_transaction": [timed_out()] * (RETRIABLE_ATTEMPTS - 1)})
    assert held.begin() and held.commit(), "retried within the limit"
    assert made[0].calls.count("commit_transaction") == RETRIABLE_ATTEMPTS

    held, made = life({"commit_transaction": [timed_out()] * RETRIABLE_ATTEMPTS})
    assert held.begin() and not held.commit()
    assert made[0].calls.count("commit_transaction") == RETRIABLE_ATTEMPTS and "abort_transaction" not in made[0].calls
    assert held.begin(), "the next transaction is begun on a new producer"
    assert len(made) == 2 and made[1].calls == ["init_transactions", "begin_transaction"]


def test_a_failure_that_requires_an_abort_is_aborted_on_the_same_producer():
    abortable = KafkaError(KafkaError._STATE, "abort needed", txn_requires_abort=True)
    held, made = life({"send_offsets_to_transaction": [abortable]})
    assert held.begin() and not held.send_offsets([], "group")
    assert made[0].calls[-1] == "abort_transaction" and not held.in_transaction
    assert held.begin() and len(made) == 1


def test_an_abort_that_fails_costs_the_producer():
    refused = KafkaError(KafkaError._STATE, "abort needed", txn_requires_abort=True)
    held, made = life({"commit_transaction": [refused], "abort_transaction": [KafkaError(KafkaError._STATE, "no")]})
    assert held.begin() and not held.commit()
    assert held.begin() and len(made) == 2 and "purge" in made[0].calls


def test_a_fence_by_another_producer_is_refused_and_no_new_producer_fences_it_back():
    held, made = life({"commit_transaction": [fenced()]})
    assert held.begin()
    with pytest.raises(
        TransactionRefused, match="counter dc1: transactional id tx-1 was taken over by another instance"
    ):
        held.commit()
    assert len(made) == 1


def test_a_producer_left_stuck_may_fence_its_successor_once():
    """A call that never returns leaves its producer behind; that producer's late answer may fence the next one:
    renewed once for it, and a fence beyond that is another instance."""
    held, made = life(
        {"begin_transaction": [HANG]}, {"commit_transaction": [fenced()]}, {"commit_transaction": [fenced()]}
    )
    try:
        assert not held.begin() and held.producer is None, "the stuck producer is left to its thread"
        assert held.begin() and not held.commit(), "fenced by the one left behind: renewed"
        assert held.begin() and len(made) == 3
        with pytest.raises(TransactionRefused):
            held.commit()
    finally:
        made[0].released.set()


def test_a_renewal_whose_init_times_out_is_resumed_on_the_same_producer():
    held, made = life({}, {"init_transactions": [timed_out()]})
    held.retire()
    assert not held.ready(), "the coordinator did not answer the new producer's init"
    assert held.ready() and len(made) == 2, "resumed on the same producer, not raced by a third"
    assert made[1].calls == ["init_transactions", "init_transactions"]


def test_a_first_init_not_answered_names_the_address():
    def new_producer() -> ScriptedProducer:
        return ScriptedProducer({"init_transactions": [timed_out()]})

    held = Transactions(new_producer, transactional_id="tx-1", call_timeout_s=0.1, owner="counter dc1")
    with pytest.raises(KafkaClientError, match="counter dc1: no transaction coordinator at 127.0.0.1:9 after 1 s"):
        held.start(1.0, address="127.0.0.1:9")
