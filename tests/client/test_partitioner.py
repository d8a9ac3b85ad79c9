"""The partitioner agrees with the Java client (murmur2 values from Kafka's UtilsTest)."""

from __future__ import annotations

import random

import pytest

from strom.client.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    key_partition,
    murmur2,
)

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
