"""The fetcher's ``isolation_level="read_committed"`` against a real strom broker, with data
written by strom.client's transactional producer and by confluent-kafka's (and the reverse:
strom.client's transactions read by confluent-kafka's read_committed consumer)."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer as CkProducer

from strom.client import Fetcher, Producer
from strom.client.records import ClientConfigError
from strom.common.types import TopicPartition
from strom.testing import EmbeddedBroker
from tests.client.txn_helpers import (
    BROKER_DROPS_ABORTED,
    needs_aborted_filtering,
    new_topic,
    read,
    txn_producer,
    unique,
)
from tests.compat.test_transactions import read_all


def test_isolation_level_names() -> None:
    assert Fetcher("127.0.0.1:1", isolation_level="read_committed").isolation_level == 1
    assert Fetcher("127.0.0.1:1", isolation_level="READ_UNCOMMITTED").isolation_level == 0
    with pytest.raises(ClientConfigError, match="read_committed"):
        Fetcher("127.0.0.1:1", isolation_level="serializable")


def test_an_open_transaction_holds_read_committed_back(strom_broker: EmbeddedBroker) -> None:
    bootstrap = strom_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        tp = TopicPartition(topic, 0)
        async with Producer(bootstrap) as plain:
            await plain.send_and_wait(topic, b"before", partition=0)
        producer = await txn_producer(bootstrap, unique("open"))
        try:
            producer.begin_transaction()
            await producer.send(topic, b"in the transaction", partition=0)
            await producer.flush()
            async with Producer(bootstrap) as plain:
                await plain.send_and_wait(topic, b"after", partition=0)
            async with Fetcher(bootstrap, isolation_level="read_committed",
                               auto_offset_reset="earliest") as fetcher:
                fetcher.assign([tp])
                seen: list[bytes | None] = []
                for _ in range(3):
                    seen += [r.value for r in await fetcher.fetch()]
                # Nothing at or past the open transaction's first offset (the LSO).
                assert seen == [b"before"] and fetcher.position(tp) == 1
                await producer.commit_transaction(30)
                deadline = time.monotonic() + 10
                while len(seen) < 3:
                    assert time.monotonic() < deadline, f"only {seen}"
                    seen += [r.value for r in await fetcher.fetch()]
                assert seen == [b"before", b"in the transaction", b"after"]
        finally:
            await producer.close()

    asyncio.run(test())


@needs_aborted_filtering
def test_aborted_transactions_are_dropped(strom_broker: EmbeddedBroker) -> None:
    """Two producers' transactions interleaved with plain records on one partition: one
    aborts, one commits; read_committed returns the committed and plain records only."""
    bootstrap = strom_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        aborting = await txn_producer(bootstrap, unique("aborting"))
        committing = await txn_producer(bootstrap, unique("committing"))
        try:
            async with Producer(bootstrap) as plain:
                for round_ in range(3):
                    aborting.begin_transaction()
                    committing.begin_transaction()
                    for i in range(3):
                        await aborting.send(topic, f"a{round_}.{i}".encode(), partition=0)
                        await aborting.flush()
                        await committing.send(topic, f"c{round_}.{i}".encode(), partition=0)
                        await committing.flush()
                        await plain.send_and_wait(topic, f"p{round_}.{i}".encode(),
                                                  partition=0)
                    await aborting.abort_transaction(30)
                    await committing.commit_transaction(30)
        finally:
            await aborting.close()
            await committing.close()
        everything = await read(bootstrap, topic, 1)
        assert len(everything) == 27
        assert await read(bootstrap, topic, 1, "read_committed") == sorted(
            v for v in everything if not v.startswith(b"a"))

    asyncio.run(test())


def confluent_transactions(bootstrap: str, topic: str, *, abort: bool) -> None:
    producer = CkProducer({"bootstrap.servers": bootstrap, "transactional.id": unique("ck"),
                           "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"committed{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    if abort:
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, f"aborted{i}".encode(), partition=i % 2)
        producer.flush(30)
        producer.abort_transaction(30)


def test_confluent_kafka_commits_read_by_strom_client(strom_broker: EmbeddedBroker) -> None:
    topic = asyncio.run(new_topic(strom_broker.bootstrap))
    confluent_transactions(strom_broker.bootstrap, topic, abort=False)
    committed = sorted(f"committed{i}".encode() for i in range(4))
    assert asyncio.run(read(strom_broker.bootstrap, topic, isolation="read_committed")) == (
        committed)
    assert asyncio.run(read(strom_broker.bootstrap, topic)) == committed


@needs_aborted_filtering
def test_confluent_kafka_aborts_dropped_by_strom_client(strom_broker: EmbeddedBroker) -> None:
    topic = asyncio.run(new_topic(strom_broker.bootstrap))
    confluent_transactions(strom_broker.bootstrap, topic, abort=True)
    assert asyncio.run(read(strom_broker.bootstrap, topic, isolation="read_committed")) == (
        sorted(f"committed{i}".encode() for i in range(4)))
    assert len(asyncio.run(read(strom_broker.bootstrap, topic))) == 8


def test_strom_client_transactions_read_by_confluent_kafka(
        strom_broker: EmbeddedBroker) -> None:
    bootstrap = strom_broker.bootstrap

    async def write(topic: str) -> None:
        producer = await txn_producer(bootstrap, unique("to-ck"))
        try:
            producer.begin_transaction()
            for i in range(4):
                await producer.send(topic, f"committed{i}".encode(), partition=i % 2)
            await producer.commit_transaction(30)
            producer.begin_transaction()
            for i in range(4):
                await producer.send(topic, f"aborted{i}".encode(), partition=i % 2)
            await producer.flush()
            await producer.abort_transaction(30)
        finally:
            await producer.close()

    topic = asyncio.run(new_topic(bootstrap))
    asyncio.run(write(topic))
    seen = read_all(strom_broker, topic, 2, "read_committed")  # confluent-kafka's consumer
    committed = sorted(f"committed{i}".encode() for i in range(4))
    if BROKER_DROPS_ABORTED:
        assert seen == committed
    else:  # the broker cannot name the aborted transaction yet
        assert set(committed) <= set(seen)
