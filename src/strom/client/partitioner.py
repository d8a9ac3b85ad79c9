"""Choosing a partition for a record, compatible with the Java client.

Keyed records go to ``toPositive(murmur2(key)) % partitions`` — the same partition the Java
client, librdkafka's ``murmur2_random`` and kafka-python pick, so mixed producers agree.
Unkeyed records use the sticky partitioner (KIP-480 / KIP-794): stay on one randomly chosen
partition until about ``batch_size`` bytes went there, then switch, which fills batches
instead of spreading single records. :class:`RoundRobinPartitioner` is the alternative.
"""

from __future__ import annotations

import random
import struct
from typing import Protocol

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), signed."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:tail]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record, as the Java client computes it."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner(Protocol):
    """Picks a partition; ``record_size`` lets sticky strategies count bytes."""

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int: ...


class DefaultPartitioner:
    """murmur2 for keyed records, sticky for unkeyed ones (the Java client's default)."""

    def __init__(self, batch_size: int = 16384, rng: random.Random | None = None) -> None:
        self.batch_size = max(batch_size, 1)
        self._rng = rng or random.Random()
        self._sticky: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes so far)

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        if key is not None:
            return key_partition(key, num_partitions)
        current = self._sticky.get(topic)
        if current is None or current[0] >= num_partitions or current[1] >= self.batch_size:
            previous = None if current is None else current[0]
            choice = self._rng.randrange(num_partitions)
            if num_partitions > 1 and choice == previous:
                choice = (choice + 1) % num_partitions
            current = (choice, 0)
        self._sticky[topic] = (current[0], current[1] + record_size)
        return current[0]


class RoundRobinPartitioner:
    """Every record to the next partition in turn (keys are ignored, as in Java's)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % num_partitions
