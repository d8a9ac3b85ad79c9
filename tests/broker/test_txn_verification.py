"""A transactional Produce the transaction coordinator cannot vouch for (KIP-890 verification)
is answered as Kafka 4.4 answers it, so producers fail fast instead of retrying a
NOT_ENOUGH_REPLICAS until their delivery timeout.

Measured against a real Kafka 4.4 broker (one KRaft node, raw Produce v9 / v10 / v11 of one
transactional batch, 2026-12-06; the same requests as below):

=============================================  ===========================  =====================
case                                           v9 / v10                     v11
=============================================  ===========================  =====================
no ``__transaction_state`` yet (none answers)  NOT_ENOUGH_REPLICAS          same
a transactional id the coordinator lacks       INVALID_PRODUCER_ID_MAPPING  same
a known id, another producer id                INVALID_PRODUCER_ID_MAPPING  same
a known id, an older epoch                     INVALID_PRODUCER_EPOCH       same
a partition not in the transaction             INVALID_TXN_STATE            TRANSACTION_ABORTABLE
the partition added (AddPartitionsToTxn)       NONE                         NONE
=============================================  ===========================  =====================

Before this change strom answered INVALID_TXN_STATE at v11 too, and INVALID_TXN_STATE (not
retriable) while the transaction was being completed, where Kafka's coordinator answers
CONCURRENT_TRANSACTIONS and the producer gets the retriable NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from strom.broker.handlers.produce_checks import verification_error
from strom.common.errors import ErrorCode
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.compat.helpers import create_topic

E: Any = ErrorCode
TOPIC = "verified"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"transaction.state.log.num.partitions": 3,
                                "offsets.topic.num.partitions": 3}) as b:
        create_topic(b.bootstrap, TOPIC, 3)
        yield b


def batch(producer_id: int, epoch: int, sequence: int = 0) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                           base_sequence=sequence, transactional=True)
    builder.append(int(time.time() * 1000), None, b"v")
    return builder.build()


def produce(client: RawClient, tid: str, records: dict[int, bytes], version: int) -> list[int]:
    resp = client.call(ApiKey.PRODUCE, version, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": p, "records": r} for p, r in records.items()]}]})
    return [int(p.error_code) for t in resp.responses for p in t.partition_responses]


def init(client: RawClient, tid: str) -> tuple[int, int]:
    for _ in range(100):  # the first lookup creates __transaction_state; its shard loads
        found = client.call(ApiKey.FIND_COORDINATOR, 2, {"key": tid, "key_type": 1})
        if found.error_code == 0:
            answer = client.call(ApiKey.INIT_PRODUCER_ID, 2, {
                "transactional_id": tid, "transaction_timeout_ms": 60000})
            if answer.error_code == 0:
                return int(answer.producer_id), int(answer.producer_epoch)
        time.sleep(0.1)
    raise AssertionError(f"no producer id for {tid}")


def add(client: RawClient, tid: str, producer: tuple[int, int], partition: int) -> int:
    resp = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}]})
    return int(resp.results_by_topic_v3_and_below[0].results_by_partition[0]
               .partition_error_code)


def test_each_unverifiable_batch_gets_kafkas_answer_at_each_version(
        broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    # nobody to ask yet: the retriable answer (Kafka's too)
    assert produce(client, "ghost", {0: batch(424242, 0)}, 9) == [E.NOT_ENOUGH_REPLICAS]
    pid, epoch = init(client, "known")
    for version in (9, 10, 11):
        not_added = E.TRANSACTION_ABORTABLE if version >= 11 else E.INVALID_TXN_STATE
        assert produce(client, "ghost", {0: batch(424242, 0)}, version) == [
            E.INVALID_PRODUCER_ID_MAPPING], version
        assert produce(client, "known", {0: batch(pid + 1000, epoch)}, version) == [
            E.INVALID_PRODUCER_ID_MAPPING], version
        assert produce(client, "known", {0: batch(pid, epoch)}, version) == [not_added]
    bumped = init(client, "known")
    assert bumped == (pid, epoch + 1)
    assert produce(client, "known", {0: batch(pid, epoch)}, 11) == [E.INVALID_PRODUCER_EPOCH]
    assert add(client, "known", bumped, 1) == 0  # Ongoing, with partition 1 only
    for version in (9, 11):
        expected = E.TRANSACTION_ABORTABLE if version >= 11 else E.INVALID_TXN_STATE
        assert produce(client, "known", {0: batch(*bumped)}, version) == [expected]
    assert produce(client, "known", {1: batch(*bumped)}, 11) == [0]
    client.close()


@pytest.mark.parametrize(("answer", "version", "produced"), [
    ("NONE", 9, "NONE"),
    ("INVALID_PRODUCER_ID_MAPPING", 9, "INVALID_PRODUCER_ID_MAPPING"),
    ("PRODUCER_FENCED", 11, "INVALID_PRODUCER_EPOCH"),
    ("TRANSACTION_ABORTABLE", 10, "INVALID_TXN_STATE"),
    ("TRANSACTION_ABORTABLE", 11, "TRANSACTION_ABORTABLE"),
    ("INVALID_TXN_STATE", 11, "INVALID_TXN_STATE"),
    ("CONCURRENT_TRANSACTIONS", 11, "NOT_ENOUGH_REPLICAS"),
    ("COORDINATOR_LOAD_IN_PROGRESS", 9, "NOT_ENOUGH_REPLICAS"),
    ("COORDINATOR_NOT_AVAILABLE", 9, "NOT_ENOUGH_REPLICAS"),
    ("NOT_COORDINATOR", 9, "NOT_ENOUGH_REPLICAS"),
    ("NETWORK_EXCEPTION", 9, "NOT_ENOUGH_REPLICAS"),
])
def test_the_coordinators_answer_as_a_producer_gets_it(answer: str, version: int,
                                                       produced: str) -> None:
    """Kafka 4.4's AddPartitionsToTxnManager and ReplicaManager.handleProduceAppend: the
    coordinator's verification answer (CONCURRENT_TRANSACTIONS while a transaction is being
    completed, which a single broker completes too fast to catch on the wire) becomes the
    Produce error."""
    error = verification_error(getattr(E, answer), version)
    assert (error.name if error is not None else "NONE") == produced


def test_one_request_one_producer(broker: EmbeddedBroker) -> None:
    """Transactional batches of two producer ids (or epochs) in one request: every
    partition INVALID_PRODUCER_ID_MAPPING, nothing appended (Kafka's handleProduceAppend)."""
    client = RawClient(broker.bootstrap)
    one, two = init(client, "one"), init(client, "two")
    assert add(client, "one", one, 0) == 0 and add(client, "two", two, 1) == 0
    assert produce(client, "one", {0: batch(*one), 1: batch(*two)}, 9) == [
        E.INVALID_PRODUCER_ID_MAPPING] * 2
    assert produce(client, "one", {0: batch(*one)}, 9) == [0]  # alone: appended
    client.close()


def test_a_fenced_zombie_fails_fast_with_a_real_client(broker: EmbeddedBroker) -> None:
    """confluent-kafka: producer A writes in a transaction; B takes over its transactional id
    (A's transaction is aborted and its epoch bumped); A writes again to the same partition
    — no AddPartitionsToTxn, so the leader asks the coordinator, which does not know A's
    epoch. A's delivery fails at once (INVALID_PRODUCER_EPOCH: librdkafka's fencing), not
    after retrying until message.timeout.ms."""
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": "zombie",
              "message.timeout.ms": 60000, "acks": "all"}
    zombie = Producer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"before", partition=2)
    assert zombie.flush(30) == 0
    Producer(config).init_transactions(30)  # fences the zombie, aborts its transaction
    reports: list[Any] = []
    started = time.monotonic()
    zombie.produce(TOPIC, b"after", partition=2,
                   on_delivery=lambda err, _msg: reports.append(err))
    while not reports and time.monotonic() - started < 60:
        try:
            zombie.poll(0.1)
        except KafkaException as exc:  # librdkafka raises its fatal error from poll()
            reports.append(exc.args[0])
    elapsed = time.monotonic() - started
    assert reports and reports[0] is not None, reports
    assert reports[0].fatal() and "old epoch" in reports[0].str(), reports[0]
    assert elapsed < 15, f"the zombie's write was retried for {elapsed:.1f} s"
