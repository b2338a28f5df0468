"""The life of a transactional producer, for every hop that writes in Kafka transactions (the counter, the
exactly-once replicator).

`Transactions` holds the producer of one transactional id. A producer's init fences every earlier producer of
its id and aborts the transaction that one left open, so a producer that is lost (stuck in a call, or in a fatal
state) is never repaired: it is retired, and a new one with the same id takes over before the next transaction.
Every call is bounded in time (`bounded`), since librdkafka does not always return from them (#5511). What no
new producer cures is an id that another live producer holds (fenced) or that the client may not use: a new
producer would fence the other in turn, so that ends the hop with a `TransactionRefused` saying what to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from audit.contract.errors import KafkaClientError
from audit.io.clients import LATE_ANSWER_S

log = logging.getLogger(__name__)

# How many times in all a call of a transaction is made while librdkafka answers it with a retriable error.
# Such an answer (a request timed out, a coordinator loading or moving) means the same call may be repeated, and
# the repeat resumes where it stopped: a few tries ride out a coordinator that moves. Past them the owner's own
# recovery (the transaction done again, with a new producer if need be) does better than a call that keeps its
# loop from consuming and from stopping. An init is the exception: it is resumed at the next transaction.
RETRIABLE_ATTEMPTS = 3

# How long a coordinator lets a transaction stay open before it aborts it itself: well past the longest a hop
# keeps one open (its calls are bounded), and short enough that the transaction of an owner that died is not held
# long before read_committed readers (a restarted owner's init aborts it at once anyway).
TRANSACTION_TIMEOUT_MS = 60_000

# Another live producer with our transactional id.
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
# Errors no new producer with the same transactional id cures: fenced, or the client may not use the id.
REFUSED = FENCED | {
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def producer_config(transactional_id: str) -> dict[str, Any]:
    """What every transactional producer of ours runs with; its owner adds the cluster's config and its own."""
    return {
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "enable.idempotence": True,
        "acks": "all",
    }


class TransactionRefused(KafkaClientError):
    """The transactional id is held by another live producer, or the client may not use it."""


def bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """call(), but never waiting more than `timeout_s` for it to return.

    librdkafka waits on its own main thread in a transactional call, without a time limit in begin_transaction,
    and does not always answer one after a broker restart, despite its timeout (#5511: a coordinator cached after
    its broker was decommissioned). Past `timeout_s` this raises a KafkaException (_TIMED_OUT, fatal) naming
    `what`, so the caller replaces the producer; the stuck call stays behind in a daemon thread, which keeps the
    old producer referenced: destroying it would wait on the same thread."""
    done = threading.Event()
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=what, daemon=True).start()
    if not done.wait(timeout_s):
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"{what} did not return within {timeout_s:.0f} s", fatal=True)
        )
    if failure:
        raise failure[0]
    return outcome[0]


def is_stuck(error: KafkaError) -> bool:
    """The error `bounded` raises: the producer is stuck inside librdkafka and must be left alone."""
    return error.code() == KafkaError._TIMED_OUT and error.fatal()


def abort_written(producer: Producer, timeout_s: float) -> None:
    """Abort the open transaction once every message produced in it is acknowledged.

    librdkafka (#4849) may send the abort's EndTxn before the coordinator has handled the AddPartitionsToTxn of
    the transaction's first messages; the coordinator, seeing no transaction yet, refuses with INVALID_TXN_STATE,
    fatal. A message is acknowledged only once its partition is in the transaction, so after the flush the abort
    is safe; the acknowledged messages are aborted like the rest (a read_committed reader never sees them)."""
    producer.flush(timeout_s)
    producer.abort_transaction(timeout_s)


class Transactions:
    """The transactional producer of one transactional id, through its life.

    `start` makes the first one. A transaction is `begin`, messages produced on `producer`, `send_offsets` for a
    consumer's offsets, then `commit`; each returns False when the transaction failed, once it is settled:
    aborted, or its producer retired. `ready` (which `begin` asks) replaces a retired producer: False while the
    coordinator does not answer the new one's init, which the next transaction resumes on the same producer (a
    second producer's init would race the first one's, and whichever the coordinator answered last would fence
    the other)."""

    def __init__(
        self,
        new_producer: Callable[[], Producer],
        *,
        transactional_id: str,
        call_timeout_s: float,
        owner: str,
        log_fields: Mapping[str, Any] | None = None,
    ) -> None:
        self._new_producer = new_producer
        self.transactional_id = transactional_id
        self.call_timeout_s = call_timeout_s  # each call's own timeout; `bounded` allows LATE_ANSWER_S more
        self.owner = owner  # who holds the id, as errors name it: "counter dc1", "replicator dc1 -> aggregate"
        self._log_fields = {**(log_fields or {}), "transactional_id": transactional_id}
        self.producer: Producer | None = None
        self.in_transaction = False
        self._retired = False  # a new producer takes over before the next transaction
        self._initializing = False  # that new producer's init has not finished yet
        # Producers dropped in the middle of a call (stuck, or an init not finished): a late answer of theirs may
        # still fence the current producer, once each.
        self._left_behind = 0

    @property
    def active(self) -> Producer:
        """The producer to write the open transaction with."""
        if self.producer is None:
            raise KafkaClientError(f"{self.owner}: no transactional producer (not started, or lost)")
        return self.producer

    def start(self, timeout_s: float, *, address: str) -> None:
        """The first producer; its init, given `timeout_s`, fences every earlier one with the id and aborts what
        that one left open. A KafkaClientError naming `address` when no transaction coordinator answers."""
        self.producer = self._new_producer()
        try:
            self._call("init_transactions", lambda producer: producer.init_transactions(timeout_s), timeout_s, 1)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in REFUSED:
                raise self._refused(error) from exc
            raise KafkaClientError(
                f"{self.owner}: no transaction coordinator at {address} after {timeout_s:.0f} s ({error.str()}); "
                "is the cluster up and the address right?",
                code=error.code(),
            ) from exc

    def ready(self) -> bool:
        """A producer to begin with: at once unless the last one was retired, else once a new one's init is
        answered. False while it is not (the broker away, its coordinator loading): asked again next time."""
        if not self._retired:
            return True
        if self.producer is None or not self._initializing:
            if self.producer is not None:
                self.producer.purge()
            self.producer = self._new_producer()
            self._initializing = True
        try:
            self._call("init_transactions", lambda producer: producer.init_transactions(self.call_timeout_s), None, 1)
        except KafkaException as exc:
            error = exc.args[0]
            self._refuse_unless_left_behind(error)
            if is_stuck(error) or error.fatal():
                self._leave_behind()
            log.warning("transactional producer not ready yet", extra={**self._log_fields, "error": error.str()})
            return False
        self._retired = self._initializing = False
        log.info("transactional producer renewed", extra=self._log_fields)
        return True

    def retire(self) -> None:
        """Have a new producer take over before the next transaction: its init fences this one and settles
        whatever transaction of the id the coordinator still holds (one an outage interrupted, say)."""
        self.in_transaction = False
        self._retired = True

    def begin(self) -> bool:
        if not self.ready():
            return False
        self.in_transaction = True
        try:
            self._call("begin_transaction", lambda producer: producer.begin_transaction(), None, 1)
        except KafkaException as exc:
            self.fail(exc.args[0])
            return False
        return True

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> bool:
        """Add a consumer group's `offsets` to the open transaction: committed with it or not at all."""
        try:
            self._call(
                "send_offsets_to_transaction",
                lambda producer: producer.send_offsets_to_transaction(offsets, group_metadata, self.call_timeout_s),
            )
        except KafkaException as exc:
            self.fail(exc.args[0])
            return False
        return True

    def commit(self) -> bool:
        try:
            self._call("commit_transaction", lambda producer: producer.commit_transaction(self.call_timeout_s))
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort() and not error.fatal():
                self.fail(error)
            else:  # whether it committed is the coordinator's to say: a new producer's init completes or aborts it
                self._lose(error, "commit failed")
            return False
        self.in_transaction = False
        return True

    def fail(self, error: KafkaError) -> None:
        """Settle the open transaction after `error`, so nothing of it commits: aborted, or when the producer cannot
        go on (fatal, stuck, the abort refused), retired."""
        if error.fatal() or error.code() in REFUSED:
            self._lose(error, "transaction failed")
            return
        log.warning("transaction failed; aborted", extra={**self._log_fields, "error": error.str()})
        self.abort()

    def abort(self) -> None:
        """Abort the open transaction, if any; a producer that cannot is retired, its successor's init aborts it."""
        if not self.in_transaction:
            return
        self.in_transaction = False
        try:
            self._call("abort_transaction", lambda producer: producer.abort_transaction(self.call_timeout_s))
        except KafkaException as exc:
            self._lose(exc.args[0], "abort failed")

    def queued(self) -> int:
        """Messages produced and not yet delivered (serving the deliveries first); 0 without a usable producer."""
        if self.producer is None or self._retired:
            return 0
        self.producer.poll(0)
        return len(self.producer)

    def flush(self, timeout_s: float) -> None:
        if self.producer is not None and not self._retired:
            self.producer.flush(timeout_s)

    def _lose(self, error: KafkaError, what: str) -> None:
        log.warning(
            f"{what}; a new transactional producer takes over",
            extra={**self._log_fields, "error": error.str(), "code": error.code()},
        )
        self._refuse_unless_left_behind(error)
        if is_stuck(error):
            self._leave_behind()  # it stays with the thread that waits on it
        self.retire()

    def _refuse_unless_left_behind(self, error: KafkaError) -> None:
        """Raise TransactionRefused when no new producer cures `error`. A fence while a producer left behind may
        still be answered is that producer's late init: counted off, once each."""
        if error.code() in FENCED and self._left_behind:
            self._left_behind -= 1
            log.warning("fenced by a producer left behind; renewing", extra=self._log_fields)
        elif error.code() in REFUSED:
            raise self._refused(error)

    def _refused(self, error: KafkaError) -> TransactionRefused:
        if error.code() in FENCED:
            return TransactionRefused(
                f"{self.owner}: transactional id {self.transactional_id} was taken over by another instance "
                f"({error.str()}); give each instance its own --instance",
                code=error.code(),
            )
        return TransactionRefused(
            f"{self.owner}: transactional id {self.transactional_id}: {error.str()}", code=error.code()
        )

    def _leave_behind(self) -> None:
        """Drop the producer without waiting on it: it is stuck inside librdkafka (destroying it would wait too)
        or its init did not finish. The next one's init fences it."""
        self.producer, self._initializing = None, False
        self._left_behind += 1
        self.retire()

    def _call(
        self,
        what: str,
        call: Callable[[Producer], Any],
        timeout_s: float | None = None,
        attempts: int = RETRIABLE_ATTEMPTS,
    ) -> Any:
        """call(producer), bounded (its timeout plus LATE_ANSWER_S) and made again on a retriable error, up to
        `attempts` in all."""
        producer = self.producer
        if producer is None:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{what}: no transactional producer", fatal=True))
        limit_s = (self.call_timeout_s if timeout_s is None else timeout_s) + LATE_ANSWER_S
        for attempt in range(1, attempts + 1):
            try:
                return bounded(lambda: call(producer), limit_s, f"{what} ({self.transactional_id})")
            except KafkaException as exc:
                if attempt == attempts or not exc.args[0].retriable():
                    raise
                log.warning(f"{what}: retrying", extra={**self._log_fields, "error": exc.args[0].str()})
        raise AssertionError("unreachable: the last attempt returns or raises")
