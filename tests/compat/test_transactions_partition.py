"""Transactions seen by real consumers: librdkafka's transactional producer commits and
aborts (two producers interleaved in the same partitions, plain records in between); the
read_committed consumers of confluent-kafka, kafka-python, aiokafka and kcat see exactly the
committed records, read_uncommitted ones everything, and control records reach none of them.
Also: ListOffsets by isolation level, and a kill -9 with an aborted transaction in the log."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_to_end, create_topic

PARTITIONS = 2


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, prefix: str, count: int = 6) -> list[bytes]:
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % PARTITIONS)
    return values


def write_transactions(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Committed and aborted transactions of two producers, interleaved; returns the values
    a read_committed reader must see (in no particular order) and the aborted ones."""
    one = txn_producer(bootstrap, f"{topic}-one")
    two = txn_producer(bootstrap, f"{topic}-two")
    plain = Producer({"bootstrap.servers": bootstrap})
    committed: list[bytes] = []
    aborted: list[bytes] = []

    one.begin_transaction()
    committed += send(one, topic, "c1")
    one.commit_transaction(30)

    one.begin_transaction()
    aborted += send(one, topic, "a1")
    one.flush(30)  # the aborted records reach the log before the abort
    two.begin_transaction()
    committed += send(two, topic, "c2")
    two.commit_transaction(30)  # committed while one's transaction is still open
    one.abort_transaction(30)

    committed += send(plain, topic, "n")
    assert plain.flush(30) == 0

    one.begin_transaction()
    committed += send(one, topic, "c3")
    one.commit_transaction(30)
    two.begin_transaction()
    aborted += send(two, topic, "a2", count=3)
    two.flush(30)
    two.abort_transaction(30)
    return committed, aborted


@pytest.fixture(scope="module")
def written(broker: EmbeddedBroker) -> tuple[str, list[bytes], list[bytes]]:
    topic = "txn-mixed"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    committed, aborted = write_transactions(broker.bootstrap, topic)
    return topic, committed, aborted


# -- one reader per client ---------------------------------------------------------------
def read_confluent(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    messages = consume_to_end(bootstrap, topic, PARTITIONS, **{"isolation.level": isolation})
    return [m.value() for m in messages]  # type: ignore[attr-defined]


def read_kafka_python(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, group_id=None)
    partitions = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(partitions)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            consumer.position(tp) < ends[tp] for tp in partitions):
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.close()
    return values


def read_aiokafka(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = [ATopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning()
            ends = await consumer.end_offsets(partitions)
            values: list[bytes] = []
            deadline = time.monotonic() + 30

            async def behind() -> bool:
                return any([await consumer.position(tp) < ends[tp] for tp in partitions])

            while time.monotonic() < deadline and await behind():
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    values.extend(r.value for r in records)
            return values
        finally:
            await consumer.stop()

    return asyncio.run(run())


def read_kcat(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
         "-X", f"isolation.level={isolation}", "-f", "%s\\n"],
        capture_output=True, timeout=60, check=True)
    return out.stdout.splitlines()


READERS: dict[str, Callable[[str, str, str], list[bytes]]] = {
    "confluent-kafka": read_confluent, "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka, "kcat": read_kcat,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_read_committed_sees_exactly_the_committed_records(
    broker: EmbeddedBroker, written: tuple[str, list[bytes], list[bytes]], reader: str
) -> None:
    topic, committed, aborted = written
    read = READERS[reader]
    assert sorted(read(broker.bootstrap, topic, "read_committed")) == sorted(committed)
    # read_uncommitted: every data record, aborted ones included; never a control record
    assert sorted(read(broker.bootstrap, topic, "read_uncommitted")) == sorted(
        committed + aborted)


def test_list_offsets_by_isolation_level(broker: EmbeddedBroker) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic = "txn-open"
    create_topic(broker.bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        plain.produce(topic, value=f"p{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    producer = txn_producer(broker.bootstrap, "lso-check")
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    producer.flush(30)
    tp = KTopicPartition(topic, 0)

    def latest(isolation: str) -> int:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation)
        try:
            return int(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()

    assert (latest("read_committed"), latest("read_uncommitted")) == (3, 7)  # LSO, HW
    producer.commit_transaction(30)
    assert (latest("read_committed"), latest("read_uncommitted")) == (8, 8)  # marker at 7


@pytest.mark.parametrize("damage", [False, True])
def test_kill_9_with_an_aborted_transaction_then_read_committed(
    tmp_path: Path, damage: bool
) -> None:
    topic = "txn-crash"
    broker = EmbeddedBroker(data_dir=tmp_path)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        committed, aborted = write_transactions(broker.bootstrap, topic)
        before = {p: p.read_bytes() for p in tmp_path.glob(f"{topic}-*/*.txnindex")}
        assert len(before) == PARTITIONS and all(before.values())
        broker.kill()
        if damage:  # a torn index: the segment is recovered and its index rebuilt
            for path in before:
                path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])
        broker.start()
        assert {p: p.read_bytes() for p in tmp_path.glob(f"{topic}-*/*.txnindex")} == before
        assert sorted(read_confluent(broker.bootstrap, topic, "read_committed")) == sorted(
            committed)
        assert sorted(read_kafka_python(broker.bootstrap, topic, "read_uncommitted")) == sorted(
            committed + aborted)
    finally:
        broker.close()
