"""The producer's sending contract against real brokers: the three ways to send, records too
large failing at once (a batch too large for the topic split instead), buffer.memory with
max.block.ms back-pressure, and delivery.timeout.ms."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from strom.client import Producer, RecordMetadata, SyncProducer
from strom.client.records import ClientConfigError
from strom.common.errors import (
    MessageTooLargeError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)
from strom.common.types import TopicPartition
from tests.broker import test_leader_hints as leader_hints
from tests.client.producer_helpers import make_topic, read_all
from tests.controller.cluster import leader_seen_by
from tests.metadata.zk_helpers import wait_until

#: A topic every acks=all write to fails retriably: one replica, two required in sync.
STUCK = {"min.insync.replicas": "2"}


def test_the_three_ways_to_send(any_broker: str) -> None:
    async def test() -> None:
        topic = await make_topic(any_broker)
        delivered: list[tuple[RecordMetadata, BaseException | None]] = []
        async with Producer(any_broker, linger_ms=5) as producer:
            for i in range(3):  # fire-and-forget
                await producer.send(topic, b"f%d" % i)
            metadata = await producer.send_and_wait(topic, b"s", timestamp=1234)  # synchronous
            assert (metadata.topic, metadata.partition, metadata.offset,
                    metadata.timestamp) == (topic, 0, 3, 1234)
            await producer.send(topic, b"c", on_delivery=lambda m, e: delivered.append((m, e)))
            await producer.flush()
        assert [(m.topic, m.offset, e) for m, e in delivered] == [(topic, 4, None)]
        assert [r.value for r in await read_all(any_broker, topic)] == [
            b"f0", b"f1", b"f2", b"s", b"c"]

    asyncio.run(test())


def test_a_record_larger_than_max_request_size_fails_at_once(any_broker: str) -> None:
    async def test() -> None:
        topic = await make_topic(any_broker)
        async with Producer(any_broker, max_request_size=10_000,
                            buffer_memory=1_000_000) as producer:
            with pytest.raises(MessageTooLargeError, match="max_request_size"):
                await producer.send(topic, b"x" * 10_000)
        async with Producer(any_broker, buffer_memory=5_000) as producer:
            with pytest.raises(MessageTooLargeError, match="buffer_memory"):
                await producer.send(topic, b"x" * 6_000)

    asyncio.run(test())


def test_too_large_for_the_topic_fails_without_retries_and_batches_are_split(broker: Any
                                                                             ) -> None:
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await make_topic(bootstrap, config={"max.message.bytes": "2000"})
        async with Producer(bootstrap, linger_ms=50, delivery_timeout_s=60) as producer:
            started = time.monotonic()
            with pytest.raises(MessageTooLargeError):
                await producer.send_and_wait(topic, b"x" * 5000)
            assert time.monotonic() - started < 2  # MESSAGE_TOO_LARGE is not retried
            # 40 records of 100 bytes make one batch the topic refuses: split, all delivered.
            futures = [await producer.send(topic, b"%03d" % i + b"y" * 97) for i in range(40)]
            await producer.flush()
            assert [f.result().offset for f in futures] == list(range(40))
        records = await read_all(bootstrap, topic)
        assert [r.value[:3] for r in records if r.value] == [b"%03d" % i for i in range(40)]

    asyncio.run(test())


def test_a_send_waits_for_buffer_room_and_lingering_batches_go_at_once(any_broker: str
                                                                       ) -> None:
    async def test() -> None:
        topic = await make_topic(any_broker)
        async with Producer(any_broker, buffer_memory=2_000, batch_size=100_000,
                            linger_ms=20_000, delivery_timeout_s=60) as producer:
            started = time.monotonic()
            futures = [await producer.send(topic, b"z" * 500) for _ in range(12)]
            # The buffer holds three records: nine sends waited for room, and the batches
            # went without waiting for linger_ms.
            assert time.monotonic() - started < 10
            assert sum(f.done() for f in futures) >= 9  # delivered without linger or flush
            await producer.flush()
        assert len(await read_all(any_broker, topic)) == 12

    asyncio.run(test())


def test_max_block_and_delivery_timeout(broker: Any) -> None:
    """On a topic where every write fails retriably, a full buffer makes send() raise after
    max_block_s, and queued records fail at the delivery timeout with the last error."""
    async def test() -> None:
        topic = await make_topic(broker.bootstrap, config=STUCK)
        async with Producer(broker.bootstrap, buffer_memory=2_000, linger_ms=0,
                            max_block_s=0.5, request_timeout_s=1.0,
                            delivery_timeout_s=2.0) as producer:
            started = time.monotonic()
            futures = [await producer.send(topic, b"z" * 500) for _ in range(3)]
            with pytest.raises(RequestTimedOutError, match="max_block_s"):
                await producer.send(topic, b"z" * 500)
            assert 0.4 < time.monotonic() - started < 1.5
            for future in futures:
                with pytest.raises(NotEnoughReplicasError):
                    await future
            assert 1.8 < time.monotonic() - started < 5

    asyncio.run(test())


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with pytest.raises(ClientConfigError, match="delivery_timeout_s"):
        Producer("127.0.0.1:1", linger_ms=1000, request_timeout_s=30, delivery_timeout_s=30)


def test_sync_producer_callback_and_max_block(broker: Any) -> None:
    bootstrap = broker.bootstrap
    topic = asyncio.run(make_topic(bootstrap))
    delivered: list[Any] = []
    with SyncProducer(bootstrap, linger_ms=1) as producer:
        producer.send(topic, b"a", on_delivery=lambda m, e: delivered.append((m.offset, e)))
        producer.flush()
    assert delivered == [(0, None)]
    stuck = asyncio.run(make_topic(bootstrap, config=STUCK))
    with SyncProducer(bootstrap, buffer_memory=1_000, linger_ms=0, max_pending=1,
                      max_block_s=0.5, request_timeout_s=1.0,
                      delivery_timeout_s=2.0) as producer:
        futures = [producer.send(stuck, b"z" * 400) for _ in range(2)]
        started = time.monotonic()
        with pytest.raises(RequestTimedOutError):
            for _ in range(5):
                futures.append(producer.send(stuck, b"z" * 400))
        assert time.monotonic() - started < 3
        for future in futures[:2]:
            with pytest.raises(NotEnoughReplicasError):
                future.result(10)


led_by_b = leader_hints.led_by_b  # fixture: a 3-broker cluster, topic "hints" led by b


def test_a_leader_move_is_followed_from_the_produce_answers_hint(led_by_b: Any) -> None:
    """After an ElectLeaders move the first send reaches the old leader, whose
    NOT_LEADER_OR_FOLLOWER answer names the new one (KIP-951): the retry goes there at once,
    without a Metadata request."""
    cluster, a, b = led_by_b.cluster, led_by_b.a, led_by_b.b

    async def scenario() -> tuple[list[int], int, int]:
        bootstrap = ",".join(broker.bootstrap for broker in cluster.values())
        async with Producer(bootstrap, linger_ms=0, idempotent=True) as producer:
            first = await (await producer.send("hints", b"before", partition=0))
            refreshes = 0
            refresh = producer.cluster.refresh

            async def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal refreshes
                refreshes += 1
                return await refresh(*args, **kwargs)

            producer.cluster.refresh = counted  # type: ignore[method-assign]
            assert producer.cluster.metadata.leader(TopicPartition("hints", 0)) == b
            await asyncio.to_thread(leader_hints.elect_a, led_by_b)
            await asyncio.to_thread(wait_until, lambda: leader_seen_by(cluster[b], "hints") == a)
            second = await (await producer.send("hints", b"after", partition=0))
            return [first.offset, second.offset], refreshes, \
                producer.cluster.metadata.leader(TopicPartition("hints", 0)) or -1

    offsets, refreshes, leader = asyncio.run(scenario())
    assert offsets == [0, 1] and leader == a and refreshes == 0
