"""`kaudit produce --transactional`: traffic the way Kafka Streams and Flink exactly-once write it.

A plain producer with a `transactional.id` (no audit records: it stands for a client kafka-audit
did not write) sends transactions of `transaction_size` messages round-robin over the topics,
and aborts every `abort_every`-th one, so the topics hold commit markers, abort markers and aborted
batches. A `read_committed` reader sees only the committed messages; that is what every tier must
count. It keeps going through broker restarts: a transaction the broker refuses is aborted (its
messages count as aborted), a fenced or fatal producer is replaced by a new one with the same id.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

from audit.io.transactions import abort_written

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_S = 30.0


@dataclass
class TransactionStats:
    committed: int = 0  # messages in transactions that committed
    aborted: int = 0  # messages in transactions aborted, on purpose or after an error
    transactions: int = 0
    errors: int = 0
    seconds: float = 0.0


class TransactionalLoad:
    def __init__(self, config: dict, *, transactional_id: str) -> None:
        self.config = {**config, "transactional.id": transactional_id, "linger.ms": 5}
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer(self.config)
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
        return producer

    def run(
        self,
        topics: list[str],
        *,
        count: int | None,
        rate: float | None,
        duration_s: float | None,
        transaction_size: int = 20,
        abort_every: int = 4,
        size: int = 100,
        seed: int = 0,
    ) -> TransactionStats:
        rng = random.Random(seed)
        payload = bytes(rng.randrange(256) for _ in range(size))
        stats = TransactionStats()
        began = time.monotonic()
        sent = 0
        while (count is None or sent < count) and (duration_s is None or time.monotonic() - began < duration_s):
            if rate and sent / rate > time.monotonic() - began:
                time.sleep(min(sent / rate - (time.monotonic() - began), 0.1))
                continue
            messages = transaction_size if count is None else min(transaction_size, count - sent)
            commit = abort_every <= 0 or (stats.transactions + 1) % abort_every != 0
            done = self._transaction(topics, sent, messages, payload, commit, stats)
            stats.transactions += 1
            if done and commit:
                stats.committed += messages
            else:
                stats.aborted += messages
            sent += messages
        stats.seconds = time.monotonic() - began
        return stats

    def _transaction(self, topics, first: int, messages: int, payload: bytes, commit: bool, stats) -> bool:
        """One transaction; True when it ended as asked (committed or aborted), False when an error aborted it."""
        try:
            self.producer.begin_transaction()
            for i in range(first, first + messages):
                self.producer.produce(topics[i % len(topics)], key=b"t%d" % (i % 1000), value=payload)
            if commit:
                self._commit()
            else:
                abort_written(self.producer, TRANSACTION_TIMEOUT_S)
            return True
        except KafkaException as exc:
            stats.errors += 1
            log.warning("transaction failed; aborting it", extra={"error": exc.args[0].str()})
            self._recover(exc)
            return False

    def _commit(self, attempts: int = 3) -> None:
        """A retriable commit error (a coordinator moving) may hide a commit that landed: ask again."""
        for attempt in range(attempts):
            try:
                self.producer.commit_transaction(TRANSACTION_TIMEOUT_S)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or error.txn_requires_abort() or attempt == attempts - 1:
                    raise

    def _recover(self, exc: KafkaException) -> None:
        error = exc.args[0]
        if not error.fatal():
            try:
                self.producer.abort_transaction(TRANSACTION_TIMEOUT_S)
                return
            except KafkaException as again:
                log.warning("abort failed; new producer", extra={"error": again.args[0].str()})
        # Fatal (fenced, or a coordinator that lost our state): a new producer with the same id
        # fences the old one and aborts whatever it left open.
        while True:
            try:
                self.producer = self._new_producer()
                return
            except KafkaException as again:
                log.warning("init_transactions failed; retrying", extra={"error": again.args[0].str()})
                time.sleep(1.0)

    def close(self) -> None:
        self.producer.flush(TRANSACTION_TIMEOUT_S)
