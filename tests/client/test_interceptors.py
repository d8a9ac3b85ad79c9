"""Producer interceptors as Java's: applied in order, exceptions logged and ignored,
on_acknowledgement for every record (also those that fail before they are sent), before
the record's callback; against strom and Tansu."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest

from strom.client import Producer, RecordMetadata, SyncProducer
from strom.client.interceptors import ProducerRecord
from strom.client.serializers import SerializationError
from strom.common.errors import MessageTooLargeError, UnknownTopicOrPartitionError
from tests.client.producer_helpers import make_topic, read_all


class Tagging:
    """Adds a header naming itself and records what it saw."""

    def __init__(self, name: str, events: list[Any]) -> None:
        self.name, self.events, self.closed = name, events, False

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.events.append((self.name, "send", record.value))
        return dataclasses.replace(record, value=f"{record.value}+{self.name}",
                                   headers=(*record.headers, (self.name, b"1")))

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        self.events.append((self.name, "ack", metadata.topic, metadata.offset,
                            type(exception).__name__ if exception else None))

    def close(self) -> None:
        self.closed = True


class Broken:
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("on_send bug")

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        raise RuntimeError("on_acknowledgement bug")


def test_interceptors_in_order_errors_ignored(any_broker: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    events: list[Any] = []
    first, second = Tagging("a", events), Tagging("b", events)

    async def test() -> None:
        topic = await make_topic(any_broker)
        delivered: list[Any] = []
        async with Producer(any_broker, value_serializer="str", linger_ms=1,
                            interceptors=[first, Broken(), second]) as producer:
            future = await producer.send(topic, "v", on_delivery=lambda m, e: delivered.append(
                (events[-1], m.offset, e)))
            assert (await future).offset == 0
            assert delivered == [(("b", "ack", topic, 0, None), 0, None)]  # after interceptors
            with pytest.raises(SerializationError):
                await producer.send(topic, "w", key=5)  # the key serializer is bytes
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send(topic, "x", partition=9)
            with pytest.raises(MessageTooLargeError):
                await producer.send(topic, "y" * 2_000_000)
        assert first.closed and second.closed
        sent = [("a", "ack", topic, 0, None), ("b", "ack", topic, 0, None)]
        assert events == [
            ("a", "send", "v"), ("b", "send", "v+a"), *sent,
            ("a", "send", "w"), ("b", "send", "w+a"),
            ("a", "ack", topic, -1, "SerializationError"),
            ("b", "ack", topic, -1, "SerializationError"),
            ("a", "send", "x"), ("b", "send", "x+a"),
            ("a", "ack", topic, -1, "UnknownTopicOrPartitionError"),
            ("b", "ack", topic, -1, "UnknownTopicOrPartitionError"),
            ("a", "send", "y" * 2_000_000), ("b", "send", "y" * 2_000_000 + "+a"),
            ("a", "ack", topic, -1, "MessageTooLargeError"),
            ("b", "ack", topic, -1, "MessageTooLargeError"),
        ]
        records = await read_all(any_broker, topic)
        assert [(r.value, r.headers) for r in records] == [(b"v+a+b", (("a", b"1"), ("b", b"1")))]

    with caplog.at_level(logging.WARNING, "strom.client.interceptors"):
        asyncio.run(test())
    assert "on_send bug" in caplog.text and "on_acknowledgement bug" in caplog.text


def test_sync_producer_interceptors(any_broker: str) -> None:
    events: list[Any] = []
    topic = asyncio.run(make_topic(any_broker))
    with SyncProducer(any_broker, value_serializer="str", linger_ms=1,
                      interceptors=[Tagging("a", events)]) as producer:
        assert producer.send(topic, "v").result(10).offset == 0
    assert events == [("a", "send", "v"), ("a", "ack", topic, 0, None)]
    assert [r.value for r in asyncio.run(read_all(any_broker, topic))] == [b"v+a"]
