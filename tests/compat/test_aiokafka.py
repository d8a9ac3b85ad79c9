"""aiokafka against a real strom broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from strom.testing import EmbeddedBroker


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume(broker: EmbeddedBroker, new_topic: Callable[..., str],
                         codec: str | None) -> None:
    topic = new_topic(partitions=2)

    async def scenario() -> list[object]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                                    enable_idempotence=True)
        await producer.start()
        try:
            sends = [await producer.send(topic, value=f"v{i}".encode(),
                                         key=f"k{i % 3}".encode()) for i in range(500)]
            await asyncio.gather(*sends)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        await consumer.seek_to_beginning()
        got: list[object] = []
        try:
            while len(got) < 500:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batch.values():
                    got.extend(records)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    assert len(got) == 500
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]  # type: ignore[attr-defined]
        assert offsets == list(range(len(offsets)))
    partitions_of: dict[bytes, set[int]] = {}
    for r in got:
        partitions_of.setdefault(r.key, set()).add(r.partition)  # type: ignore[attr-defined]
    assert set(partitions_of) == {b"k0", b"k1", b"k2"}
    assert all(len(ps) == 1 for ps in partitions_of.values())  # one partition per key


@pytest.mark.parametrize("reset", ["earliest", "none"])
def test_seek_past_the_end_applies_auto_offset_reset(
    broker: EmbeddedBroker, new_topic: Callable[..., str], reset: str
) -> None:
    topic = new_topic()

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, value=b"v%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset=reset)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 100)  # past the end: the fetch answers OFFSET_OUT_OF_RANGE
        got: list[bytes] = []
        try:
            while len(got) < 3:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                got += [r.value for r in batch.get(tp, [])]  # type: ignore[misc]
        finally:
            await consumer.stop()
        return got

    if reset == "none":
        with pytest.raises(OffsetOutOfRangeError):
            asyncio.run(scenario())
    else:
        assert asyncio.run(scenario()) == [b"v0", b"v1", b"v2"]
