"""Kafka client helpers against a broker that is not there, or a client that never answers."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from audit.io.transactions import abort_written, bounded, is_stuck
from tests.waiting import wait_for


def test_the_admin_client_is_renewed_after_an_unanswered_query_at_most_once_per_interval():
    from confluent_kafka.admin import OffsetSpec

    from audit.io.clients import Admin

    nobody = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    eager = Admin(nobody, renew_every_s=0.0)
    first = eager.client
    assert eager.list_offsets([("t", 0)], OffsetSpec.latest(), timeout_s=0.5) == {}
    assert eager.client is not first, "an unanswered query renews the client"

    patient = Admin(nobody, renew_every_s=3600.0)
    first = patient.client
    for _ in range(2):
        assert patient.list_offsets([("t", 0)], OffsetSpec.latest(), timeout_s=0.5) == {}
    assert patient.client is first, "while the broker is away, not a new client per query"


@pytest.mark.kafka
def test_after_a_broker_restart_an_offsets_query_is_answered_at_once_despite_stale_leader_epochs(tmp_path):
    """The restarted broker refuses a query made with the leader epochs the client cached before it
    ("Leader epoch is older than broker epoch"). Unanswered, the counter's first flush after the return gets no
    end offset, postpones its commit and renews its producer: seconds more to recover. Such a query is asked
    again at once of a fresh client, whatever the renewal interval."""
    from confluent_kafka.admin import OffsetSpec

    from audit.io.clients import Admin, ensure_topics
    from audit.local.clusters import LocalClusters
    from tests.conftest import cache_dir
    from tests.waiting import wait_until

    cluster = LocalClusters(["solo"], state_dir=tmp_path / "clusters", cache_dir=cache_dir())
    cluster.up()
    try:
        config = {"bootstrap.servers": cluster["solo"].bootstrap_servers}
        ensure_topics(config, {"t": 3})
        partitions = [("t", p) for p in range(3)]
        admin = Admin(config, renew_every_s=3600.0)
        everything = dict.fromkeys(partitions, 0)

        def answered() -> bool:
            return admin.list_offsets(partitions, OffsetSpec.latest(), timeout_s=3) == everything

        assert wait_until(answered, 30, every_s=0.5) is not None, "a new topic's leaders are known"
        cluster["solo"].kill()
        assert admin.list_offsets(partitions, OffsetSpec.latest(), timeout_s=3) == {}  # queried while away
        cluster["solo"].start()
        assert wait_until(answered, 20, every_s=0.5) is not None, "the stale leader epochs were refused for ever"
    finally:
        cluster.down()


def test_committed_offsets_are_asked_again_until_the_timeout_then_the_error_names_what_was_asked(caplog):
    import time

    import pytest
    from confluent_kafka import Consumer, TopicPartition

    from audit.contract.errors import KafkaClientError
    from audit.io.offsets import committed_offsets

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0})
    began = time.monotonic()
    try:
        with pytest.raises(KafkaClientError, match="did not answer committed offsets for 2 partitions in 2 s"):
            committed_offsets(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)], timeout_s=2, attempt_s=0.5)
    finally:
        consumer.close()
    assert 1.9 <= time.monotonic() - began < 5
    asked_again = [r for r in caplog.records if r.getMessage() == "committed offsets not answered; asking again"]
    assert len(asked_again) >= 2, "each unanswered attempt is followed by a fresh request"


class Closing:
    """A consumer whose close() has begun: librdkafka fails every request at once with _DESTROY."""

    def __init__(self) -> None:
        self.asked = 0

    def committed(self, partitions, timeout):
        self.asked += 1
        raise KafkaException(KafkaError(KafkaError._DESTROY))


def test_a_consumer_being_closed_gets_no_committed_offsets_at_once_and_no_error():
    """An assignment served during close() asks for offsets it will never use: answered at once with none, not
    after the whole timeout (30 s) and an error that fails a counter run to caught up."""
    import time

    from confluent_kafka import TopicPartition

    from audit.io.offsets import committed_offsets

    consumer = Closing()
    began = time.monotonic()
    assert committed_offsets(consumer, [TopicPartition("t", 0)], timeout_s=30, attempt_s=5) == []  # type: ignore[arg-type]
    assert consumer.asked == 1 and time.monotonic() - began < 1


class Stuck:
    def __init__(self) -> None:
        self.release = threading.Event()

    def begin_transaction(self) -> None:
        self.release.wait()


class Refusing:
    def begin_transaction(self) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "not ready"))


class Fine:
    began = 0

    def begin_transaction(self) -> None:
        self.began += 1


def test_a_call_that_never_returns_raises_a_fatal_timeout_in_time():
    stuck = Stuck()
    began = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        bounded(stuck.begin_transaction, 0.3, "begin_transaction")
    stuck.release.set()
    assert time.monotonic() - began < 2
    error = raised.value.args[0]
    assert error.code() == KafkaError._TIMED_OUT and error.fatal() and is_stuck(error)
    assert "did not return within" in error.str()


def test_the_producers_own_error_passes_through_and_a_normal_call_returns():
    with pytest.raises(KafkaException, match="not ready"):
        bounded(Refusing().begin_transaction, 5, "begin_transaction")
    fine = Fine()
    assert bounded(fine.begin_transaction, 5, "begin_transaction") is None
    assert fine.began == 1


def test_an_answer_without_an_offset_is_left_out_not_taken_as_an_end_offset():
    """librdkafka answered a killed broker's partitions with no error and offset -1001 (under load, in the
    restart test above); as an end offset that would make any group look caught up."""
    import concurrent.futures

    from confluent_kafka.admin import OffsetSpec

    from audit.io.clients import list_offsets

    class Answered:
        def __init__(self, offset):
            self.offset = offset

    class Admin:
        def list_offsets(self, requests, **_options):
            answers = {}
            for tp, offset in zip(requests, (7, -1001), strict=True):
                answers[tp] = concurrent.futures.Future()
                answers[tp].set_result(Answered(offset))
            return answers

    assert list_offsets(Admin(), [("t", 0), ("t", 1)], OffsetSpec.latest()) == {("t", 0): 7}


@pytest.mark.kafka
def test_offsets_held_by_an_open_transaction_are_named_as_such_not_as_an_absent_coordinator(
    local_clusters, topic_factory, unique_name
):
    """A transaction that sent offsets of the group and never completes (a hanging one, after a broker
    restart dropped its markers) keeps a read_committed consumer's committed() unanswered: the error says
    so and how to find it; once the transaction ends the same call is answered."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from audit.contract.errors import KafkaClientError
    from audit.io.offsets import committed_offsets

    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic, group = topic_factory("dc1"), unique_name("g")
    config = {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    member = Consumer(config)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx")})
    reader = Consumer(config)
    partitions = [TopicPartition(topic, 0)]
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"x")
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], member.consumer_group_metadata(), 30)
        with pytest.raises(KafkaClientError, match=f"offsets of group {group} .* held by a transaction") as raised:
            committed_offsets(reader, partitions, timeout_s=3, attempt_s=1, config=config)
        assert "find-hanging" in str(raised.value) and bootstrap in str(raised.value)
        abort_written(producer, 30)
        assert committed_offsets(reader, partitions, timeout_s=30, config=config)[0].offset < 0  # nothing committed
    finally:
        for consumer in (member, reader):
            consumer.close()


@pytest.mark.kafka
def test_an_abort_waits_for_its_messages_so_they_reach_the_log_aborted_and_no_reader_sees_them(
    local_clusters, topic_factory, unique_name
):
    """`abort_written` aborts only once the coordinator holds the transaction's partitions (librdkafka
    #4849: an abort sent before that is refused, fatally). The messages, held back by a long linger,
    are written and then aborted: each partition ends with them and an abort marker, and a
    read_committed reader gets none of them."""
    from confluent_kafka import Consumer, Producer

    from audit.io.clients import watermarks

    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx"), "linger.ms": 10_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for sequence in range(10):
        producer.produce(topic, b"aborted %d" % sequence, partition=sequence % 2)
    abort_written(producer, 30)

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("g"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        # messages + abort marker. The coordinator writes the markers after it answered the abort: until then a
        # read_committed reader's end of a partition is the transaction's first offset (0).
        def both_end_with_their_marker() -> bool:
            return [watermarks(reader, topic, p)[1] for p in (0, 1)] == [5 + 1, 5 + 1]

        wait_for(both_end_with_their_marker, "each partition to end with its 5 messages and the abort marker", 30, 0.2)
        reader.subscribe([topic])
        ends, read = set(), []
        deadline = time.monotonic() + 30
        while len(ends) < 2 and time.monotonic() < deadline:
            message = reader.poll(1)
            if message is None:
                continue
            if message.error() and message.error().code() == KafkaError._PARTITION_EOF:
                ends.add(message.partition())
            elif not message.error():
                read.append(message.value())
        assert ends == {0, 1} and read == []
    finally:
        reader.close()


@pytest.mark.kafka
def test_a_range_read_gets_its_committed_messages_ends_at_the_last_stable_offset_and_names_a_stall(
    local_clusters, topic_factory, unique_name
):
    """What the books' small runs read (`read_ranges`): plain and committed messages of [start, end); aborted ones
    and transaction markers passed over, up to an end at the last stable offset, before a transaction still open;
    a range that never fills raises an error naming it instead of hanging."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from audit.contract.errors import KafkaClientError
    from audit.io.clients import list_offsets
    from audit.io.offsets import read_ranges

    bootstrap = local_clusters["dc1"].bootstrap_servers
    topic = topic_factory("dc1", partitions=2)
    plain = Producer({"bootstrap.servers": bootstrap})
    for sequence in range(3):
        plain.produce(topic, b"plain %d" % sequence, partition=0)
    plain.flush(30)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx")})
    transactional.init_transactions(30)
    for outcome in ("committed", "aborted", "open"):
        transactional.begin_transaction()
        for sequence in range(2):
            transactional.produce(topic, b"%s %d" % (outcome.encode(), sequence), partition=0)
        if outcome == "committed":
            transactional.commit_transaction(30)
        elif outcome == "aborted":
            abort_written(transactional, 30)
    transactional.flush(30)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    stable_end = list_offsets(admin, [(topic, 0)], OffsetSpec.latest())[(topic, 0)]
    assert stable_end == 3 + 3 + 3  # plain, committed + marker, aborted + marker; the open transaction after it
    config = {"bootstrap.servers": bootstrap}

    def values(ranges, stall_s: float = 15):
        return [m.value() for m in read_ranges(config, ranges, stall_s=stall_s, what="the test topic")]

    began = time.monotonic()
    assert values({(topic, 0): (1, stable_end), (topic, 1): (0, 0)}) == [
        b"plain 1",
        b"plain 2",
        b"committed 0",
        b"committed 1",
    ]
    assert values({(topic, 0): (0, 2)}) == [b"plain 0", b"plain 1"]
    assert time.monotonic() - began < 10, "the ends are found, not waited out"
    with pytest.raises(KafkaClientError, match=rf"the test topic: no message for 2 s before the end of {topic}\[0\]"):
        values({(topic, 0): (0, stable_end + 5)}, stall_s=2)
    # To its end as it stands (`to_eof`, as read_audit_topic reads): the open transaction's end is not waited for.
    began = time.monotonic()
    whole = read_ranges(config, {(topic, 0): (0, stable_end + 5)}, stall_s=15, what="the test topic", to_eof=True)
    assert [m.value() for m in whole] == [b"plain 0", b"plain 1", b"plain 2", b"committed 0", b"committed 1"]
    assert time.monotonic() - began < 10
    abort_written(transactional, 30)


class _AwayThenBack:
    """A client whose broker answers its first `failures` metadata requests with `error`."""

    def __init__(self, failures: int, error) -> None:
        self.failures, self.error, self.asked = failures, error, 0

    def list_topics(self, timeout: float):
        from confluent_kafka import KafkaException

        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(self.error)
        return "metadata"


def test_a_call_is_made_again_while_the_broker_is_away_and_a_refusal_is_raised_at_once():
    from confluent_kafka import KafkaError, KafkaException

    from audit.io.clients import retried

    back = _AwayThenBack(2, KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
    assert retried(lambda: back.list_topics(1.0), timeout_s=10) == "metadata" and back.asked == 3
    refused = _AwayThenBack(1, KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied"))
    with pytest.raises(KafkaException):
        retried(lambda: refused.list_topics(1.0), timeout_s=10)
    assert refused.asked == 1
    away = _AwayThenBack(10**6, KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
    with pytest.raises(KafkaException):
        retried(lambda: away.list_topics(1.0), timeout_s=1.5)
