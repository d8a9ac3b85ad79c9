"""Transactional producers of confluent-kafka, kafka-python and aiokafka against a real broker:
init / commit / abort, send_offsets_to_transaction, fencing of a zombie, the coordinator's
timeout abort, and a broker killed in the middle of a transaction."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import EmbeddedBroker

BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(BROKER_CONFIG) as broker:
        yield broker


def new_topic(broker: EmbeddedBroker, partitions: int = 2) -> str:
    name = f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def read_all(broker: EmbeddedBroker, topic: str, partitions: int = 2,
             isolation: str = "read_uncommitted") -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 20
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            out.append(msg.value())
    finally:
        consumer.close()
    return sorted(out)


def end_offsets(broker: EmbeddedBroker, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offsets"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def test_confluent_kafka_commit_and_abort(txn_broker: EmbeddedBroker) -> None:
    topic = new_topic(txn_broker)
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap,
                         "transactional.id": f"ck-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"a{i}".encode(), partition=i % 2)
    producer.flush(30)  # the aborted data reaches the log
    producer.abort_transaction(30)
    # Each partition: 5 + 2 data records and two markers (offsets, never records to the app).
    assert end_offsets(txn_broker, topic) == [9, 9]
    assert read_all(txn_broker, topic) == sorted(
        [f"c{i}".encode() for i in range(10)] + [f"a{i}".encode() for i in range(4)])


def test_a_new_incarnation_fences_the_zombie(txn_broker: EmbeddedBroker) -> None:
    topic = new_topic(txn_broker)
    tid = f"zombie-{topic}"
    zombie = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"from the zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
    successor.init_transactions(30)  # aborts the zombie's open transaction first
    successor.begin_transaction()
    successor.produce(topic, b"from the successor", partition=1)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(30)
    assert failure.value.args[0].fatal()


def test_timed_out_transaction_is_aborted_by_the_coordinator(
        txn_broker: EmbeddedBroker) -> None:
    topic = new_topic(txn_broker)
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap,
                         "transactional.id": f"slow-{topic}", "transaction.timeout.ms": 1000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"too late", partition=0)
    producer.flush(30)
    time.sleep(2.5)  # past transaction.timeout.ms: the coordinator fences and aborts
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert end_offsets(txn_broker, topic) == [2, 0]  # the data and its abort marker


def test_send_offsets_to_transaction(txn_broker: EmbeddedBroker) -> None:
    source, sink = new_topic(txn_broker, 1), new_topic(txn_broker, 1)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(20):
        plain.produce(source, str(i).encode())
    plain.flush(30)
    group = f"ctp-{source}"
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap,
                         "transactional.id": f"ctp-{source}"})
    producer.init_transactions(30)

    def take(n: int) -> list[bytes]:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        return got

    def committed() -> int:
        return consumer.committed([TopicPartition(source, 0)], 10)[0].offset

    for commit, count in ((True, 10), (False, 5)):
        values = take(count)
        producer.begin_transaction()
        for value in values:
            producer.produce(sink, value)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
            assert committed() == 10
        else:
            producer.abort_transaction(30)
            assert committed() == 10  # the aborted offsets never became visible
    consumer.close()


def test_kafka_python_commit_and_abort(txn_broker: EmbeddedBroker) -> None:
    from kafka import KafkaProducer

    topic = new_topic(txn_broker)
    producer = KafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                             transactional_id=f"kp-{topic}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, f"k{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    assert end_offsets(txn_broker, topic) == [6, 4]
    assert b"k5" in read_all(txn_broker, topic)


def test_aiokafka_commit_abort_and_offsets(txn_broker: EmbeddedBroker) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = new_topic(txn_broker)

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                                    transactional_id=f"aio-{topic}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait(topic, f"x{i}".encode(), partition=i % 2)
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition(topic, 0): 3}, f"aio-group-{topic}")
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"dropped", partition=1)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(scenario())
    assert end_offsets(txn_broker, topic) == [3, 5]
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap,
                         "group.id": f"aio-group-{topic}"})
    try:
        [committed] = consumer.committed([TopicPartition(topic, 0)], 10)
    finally:
        consumer.close()
    assert committed.offset == 3


def test_broker_killed_mid_transaction_aborts_it_after_restart() -> None:
    with EmbeddedBroker(BROKER_CONFIG) as broker:
        topic = new_topic(broker)
        tid = f"crash-{topic}"
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                             "transaction.timeout.ms": 2000})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"open when the broker died", partition=0)
        producer.flush(30)
        broker.kill()
        broker.restart()
        successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
        successor.init_transactions(60)  # the open transaction is aborted first
        successor.begin_transaction()
        successor.produce(topic, b"after the restart", partition=0)
        successor.commit_transaction(30)
        # data, abort marker, data, commit marker
        assert end_offsets(broker, topic) == [4, 0]


def test_kip_664_introspection_with_kafka_python_admin(txn_broker: EmbeddedBroker) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTopicPartition

    topic = new_topic(txn_broker)
    tid = f"hanging-{topic}"
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=1)
    producer.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=txn_broker.bootstrap)
    try:
        listed = [t for ts in admin.list_transactions(state_filters=["Ongoing"]).values()
                  for t in ts if t.transactional_id == tid]
        assert len(listed) == 1 and listed[0].state.value == "Ongoing"
        assert not [t for ts in admin.list_transactions(state_filters=["CompleteAbort"]).values()
                    for t in ts if t.transactional_id == tid]
        described = admin.describe_transactions([tid])[tid]
        assert described.state.value == "Ongoing"
        assert described.topic_partitions == {KTopicPartition(topic, 1)}
        assert described.transaction_timeout_ms == 60_000
        states = admin.describe_producers([KTopicPartition(topic, 1),
                                           KTopicPartition(topic, 0)])
        [active] = states[KTopicPartition(topic, 1)].active_producers
        assert active.producer_id == described.producer_id
        assert active.current_transaction_start_offset == 0
        assert states[KTopicPartition(topic, 0)].active_producers == []
        producer.commit_transaction(30)  # answered at PrepareCommit; markers follow
        deadline = time.monotonic() + 10
        while (state := admin.describe_transactions([tid])[tid].state.value) != (
                "CompleteCommit") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state == "CompleteCommit"
    finally:
        admin.close()


def test_second_transaction_with_offsets_after_an_epoch_bump(txn_broker: EmbeddedBroker) -> None:
    """Transactional offset commits are the coordinator's own writes: no producer-sequence
    check applies to them, so a producer whose epoch was bumped (a restart) can commit
    offsets again (they are written at sequence -1, which a client batch could not be)."""
    source = new_topic(txn_broker, 1)
    tid = f"bump-{source}"
    group = f"bump-{source}"
    for epoch_round in range(3):  # each init bumps the epoch
        producer = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(source, b"v", partition=0)
        consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
        producer.send_offsets_to_transaction([TopicPartition(source, 0, epoch_round + 1)],
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == epoch_round + 1
        consumer.close()
