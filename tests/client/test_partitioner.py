"""The partitioners agree with the Java client (murmur2 values from Kafka's UtilsTest), with
librdkafka's (the same keys land on the same partitions as with confluent-kafka configured with
that partitioner) and with kafka-python's default, against strom and Tansu."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from strom.client import SyncProducer
from strom.client.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    fnv1a,
    key_partition,
    murmur2,
    partitioner_for,
)
from strom.client.records import ClientConfigError
from tests.client.producer_helpers import make_topic

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_key_partition_is_positive_modulo() -> None:
    # toPositive(-973932308) = 1173551340; % 7 = 1173551340 % 7
    assert key_partition(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= key_partition(bytes([i]), 3) < 3 for i in range(256))


def test_murmur2_all_tail_lengths_match_reference() -> None:
    from kafka.partitioner.default import murmur2 as reference

    rng = random.Random(7)
    for length in range(0, 40):
        data = bytes(rng.randrange(256) for _ in range(length))
        assert murmur2(data) & 0xFFFFFFFF == reference(data) & 0xFFFFFFFF


def test_default_partitioner_keyed_ignores_stickiness() -> None:
    p = DefaultPartitioner(batch_size=10)
    assert {p.partition("t", b"k", 5, 100) for _ in range(20)} == {key_partition(b"k", 5)}


def test_default_partitioner_sticks_until_batch_full() -> None:
    p = DefaultPartitioner(batch_size=100, rng=random.Random(1))
    first = [p.partition("t", None, 4, 10) for _ in range(10)]
    assert len(set(first)) == 1  # 10 x 10 bytes fill one batch
    switched = p.partition("t", None, 4, 10)
    assert switched != first[0]


def test_default_partitioner_single_partition() -> None:
    p = DefaultPartitioner(batch_size=1)
    assert {p.partition("t", None, 1, 10) for _ in range(5)} == {0}


def test_round_robin() -> None:
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"k", 3, 1) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


# librdkafka's unittest_fnv1a (Go's hash/fnv results; librdkafka takes the absolute value).
LIBRDKAFKA_FNV1A = {b"kafka": 0xD33C4E1, b"giberish123456789": 0x77A58295, b"1234": 0x23BDD03,
                    b"234": 0x2DEA3CD2, b"": 0x7EE3623B}


@pytest.mark.parametrize(("data", "expected"), sorted(LIBRDKAFKA_FNV1A.items()))
def test_fnv1a_matches_librdkafka(data: bytes, expected: int) -> None:
    assert fnv1a(data) == expected


def test_partitioner_names() -> None:
    assert isinstance(partitioner_for(None), DefaultPartitioner)
    assert partitioner_for("consistent").partition("t", b"", 5, 1) == 0  # crc32("") = 0
    assert partitioner_for("murmur2_random").partition("t", b"21", 7, 1) == key_partition(b"21", 7)
    assert partitioner_for(lambda topic, key, n: n - 1).partition("t", b"k", 4, 1) == 3
    p = partitioner_for("consistent_random")
    assert len({p.partition("t", b"", 50, 20000) for _ in range(20)}) > 1  # empty = keyless
    assert len({partitioner_for("random").partition("t", b"k", 50, 1) for _ in range(20)}) > 1
    with pytest.raises(ClientConfigError):
        partitioner_for("crc16")


KEYS = [b"", b"a", b"21", b"order-17", b"\xff\x00\x80", *(f"user-{i}".encode() for i in range(40)),
        bytes(range(37))]
PARTITIONS = 7


def _strom_partitions(bootstrap: str, topic: str, partitioner: str | None) -> list[int]:
    with SyncProducer(bootstrap, partitioner=partitioner, linger_ms=1) as producer:
        futures = [producer.send(topic, b"v", key=key) for key in KEYS]
        return [f.result(20).partition for f in futures]


@pytest.mark.parametrize("name", ["consistent", "consistent_random", "murmur2",
                                  "murmur2_random", "fnv1a", "fnv1a_random"])
def test_keys_land_where_confluent_kafka_puts_them(any_broker: str, name: str) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = asyncio.run(make_topic(any_broker, PARTITIONS))
    producer = confluent_kafka.Producer({"bootstrap.servers": any_broker, "partitioner": name,
                                         "linger.ms": 1})
    theirs: dict[bytes, int] = {}

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        theirs[message.key() or b""] = message.partition()

    for key in KEYS:
        producer.produce(topic, b"v", key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    ours = dict(zip(KEYS, _strom_partitions(any_broker, topic, name), strict=True))
    if name == "consistent_random":  # an empty key is keyless there: anywhere is right
        del ours[b""], theirs[b""]
    assert ours == theirs
    assert len(set(ours.values())) > 3  # the keys spread: the comparison means something


def test_keys_land_where_kafka_python_puts_them(any_broker: str) -> None:
    kafka = pytest.importorskip("kafka")
    topic = asyncio.run(make_topic(any_broker, PARTITIONS))
    producer = kafka.KafkaProducer(bootstrap_servers=any_broker, linger_ms=1)
    try:
        futures = {key: producer.send(topic, value=b"v", key=key) for key in KEYS}
        theirs = {key: f.get(30).partition for key, f in futures.items()}
    finally:
        producer.close(10)
    for partitioner in (None, "murmur2_random", "org.apache.kafka.clients.producer."
                                                 "internals.DefaultPartitioner"):
        assert dict(zip(KEYS, _strom_partitions(any_broker, topic, partitioner),
                        strict=True)) == theirs
