"""Key and value serializers: Kafka's byte formats, the None rule, errors raised from send(),
and records written through them read back from strom and Tansu."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from strom.client import Producer, SyncProducer
from strom.client.records import ClientConfigError
from strom.client.serializers import SerializationError, resolve_serializer
from tests.client.producer_helpers import make_topic, read_all

JAVA = "org.apache.kafka.common.serialization."


@pytest.mark.parametrize(("name", "data", "expected"), [
    # Kafka's IntegerSerializer / LongSerializer: big-endian two's complement.
    ("int", 1, b"\x00\x00\x00\x01"),
    ("int", -1, b"\xff\xff\xff\xff"),
    (f"{JAVA}IntegerSerializer", 2**31 - 1, b"\x7f\xff\xff\xff"),
    ("long", 258, b"\x00\x00\x00\x00\x00\x00\x01\x02"),
    (f"{JAVA}LongSerializer", -2, b"\xff" * 7 + b"\xfe"),
    ("double", 1.5, struct.pack(">d", 1.5)),
    ("str", "zürich", "zürich".encode()),
    (f"{JAVA}StringSerializer", "a", b"a"),
    ("json", {"a": [1, "é"]}, '{"a":[1,"é"]}'.encode()),
    ("bytes", bytearray(b"ab"), b"ab"),
    (f"{JAVA}ByteArraySerializer", b"ab", b"ab"),
])
def test_builtin_formats(name: str, data: Any, expected: bytes) -> None:
    assert resolve_serializer(name)("t", data) == expected


@pytest.mark.parametrize("name", ["bytes", "str", "int", "long", "json"])
def test_none_stays_none(name: str) -> None:
    assert resolve_serializer(name)("t", None) is None


@pytest.mark.parametrize(("name", "data"), [("int", 2**31), ("int", "1"), ("str", b"x"),
                                            ("bytes", "x"), ("long", True), ("json", {1j})])
def test_bad_values_raise_serialization_error(name: str, data: Any) -> None:
    with pytest.raises(SerializationError):
        resolve_serializer(name)("t", data)


def test_custom_serializers() -> None:
    class Upper:
        def serialize(self, topic: str, data: Any) -> bytes:
            return f"{topic}:{data}".upper().encode()

    assert resolve_serializer(Upper())("t", "x") == b"T:X"
    assert resolve_serializer(lambda v: v[::-1].encode())("t", "ab") == b"ba"
    with pytest.raises(SerializationError, match="returned int"):
        resolve_serializer(lambda v: 5)("t", "ab")
    with pytest.raises(ClientConfigError, match="unknown serializer"):
        resolve_serializer("avro")


def test_records_are_written_serialized_with_headers_untouched(any_broker: str) -> None:
    async def test() -> None:
        topic = await make_topic(any_broker)
        async with Producer(any_broker, key_serializer="int", value_serializer="json",
                            linger_ms=1) as producer:
            await producer.send(topic, {"n": 1}, key=7, headers=[("h", b"\x00\x01")])
            await producer.send(topic, None, key=None)  # a tombstone, a null key
            with pytest.raises(SerializationError):
                await producer.send(topic, {"n": 2}, key="seven")
            await producer.flush()
        records = await read_all(any_broker, topic)
        assert [(r.key, r.value, r.headers) for r in records] == [
            (b"\x00\x00\x00\x07", b'{"n":1}', (("h", b"\x00\x01"),)),
            (None, None, ())]

    asyncio.run(test())


def test_sync_producer_serializes_in_the_callers_thread(any_broker: str) -> None:
    topic = asyncio.run(make_topic(any_broker))
    with SyncProducer(any_broker, key_serializer="str", value_serializer="str",
                      linger_ms=1) as producer:
        with pytest.raises(SerializationError):
            producer.send(topic, 12)  # raises here, not in the future
        assert producer.send(topic, "é", key="k").result(10).offset == 0
    records = asyncio.run(read_all(any_broker, topic))
    assert [(r.key, r.value) for r in records] == [(b"k", "é".encode())]
