"""Choosing a partition for a record: the Java client's default and librdkafka's partitioners.

Keyed records go to ``toPositive(murmur2(key)) % partitions`` by default — the same partition
the Java client, librdkafka's ``murmur2`` / ``murmur2_random`` and kafka-python pick, so mixed
producers agree. Unkeyed records use the sticky partitioner (KIP-480 / KIP-794): stay on one
randomly chosen partition until about ``batch_size`` bytes went there, then switch, which
fills batches instead of spreading single records. :class:`RoundRobinPartitioner` is the
alternative.

:func:`partitioner_for` takes a name as librdkafka's ``partitioner`` property does (the key
hash is the same function, so a key lands where confluent-kafka puts it):

====================  ==========================================================
``consistent``        ``crc32(key) % n``; an empty key hashes (to partition 0)
``consistent_random`` ``crc32(key) % n``; empty keys are treated as keyless
``murmur2[_random]``  Java's murmur2 (as above)
``fnv1a[_random]``    ``|fnv1a_32(key)| % n`` (librdkafka's, Sarama-compatible)
``random``            a random partition for every record, keys ignored
====================  ==========================================================

With librdkafka, keyless (None-key) records of every hash partitioner stick to one
partition for ``sticky.partitioning.linger.ms``; strom sticks by bytes as the Java client
does (where keyless records go is random in both, nothing to agree on). ``default`` /
``murmur2_sticky`` is the Java default, ``round_robin`` Java's RoundRobinPartitioner and
``uniform_sticky`` Java's UniformStickyPartitioner (keys ignored).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from strom.client.records import ClientConfigError

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


@runtime_checkable
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


def fnv1a(data: bytes) -> int:
    """librdkafka's ``rd_fnv1a``: 32-bit FNV-1a of ``data`` as a signed int, made
    non-negative by absolute value (-2**31 stays as 2**31 once read unsigned)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & _MASK
    if h & 0x80000000:
        h = (-(h - (1 << 32))) & _MASK
    return h


def crc32(data: bytes) -> int:
    """librdkafka's ``rd_crc32`` (the zlib / IEEE CRC-32), unsigned."""
    return zlib.crc32(data)


def _murmur2_positive(data: bytes) -> int:
    return murmur2(data) & 0x7FFFFFFF


class HashPartitioner:
    """``hash(key) % n`` for keyed records, sticky (as :class:`DefaultPartitioner`) for
    keyless ones; with ``empty_is_keyless`` an empty key counts as none (librdkafka's
    ``consistent_random``)."""

    def __init__(self, hash_function: Callable[[bytes], int], *, batch_size: int = 16384,
                 empty_is_keyless: bool = False, rng: random.Random | None = None) -> None:
        self.hash = hash_function
        self.empty_is_keyless = empty_is_keyless
        self._keyless = DefaultPartitioner(batch_size, rng)

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        if key is None or (self.empty_is_keyless and not key):
            return self._keyless.partition(topic, None, num_partitions, record_size)
        return self.hash(key) % num_partitions


class RandomPartitioner:
    """A random partition for every record (librdkafka's ``random``; keys ignored)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        return self._rng.randrange(num_partitions)


class UniformStickyPartitioner(DefaultPartitioner):
    """Sticky for every record, keys ignored (Java's UniformStickyPartitioner)."""

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        return super().partition(topic, None, num_partitions, record_size)


class CallablePartitioner:
    """A plain function ``(topic, key bytes or None, partition count) -> partition``."""

    def __init__(self, function: Callable[[str, bytes | None, int], int]) -> None:
        self.function = function

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  record_size: int) -> int:
        return int(self.function(topic, key, num_partitions))


_JAVA = "org.apache.kafka.clients.producer."
_FACTORIES: dict[str, Callable[[int], Partitioner]] = {
    "default": DefaultPartitioner,
    "murmur2_sticky": DefaultPartitioner,
    "round_robin": lambda _size: RoundRobinPartitioner(),
    "uniform_sticky": UniformStickyPartitioner,
    "random": lambda _size: RandomPartitioner(),
    "consistent": lambda size: HashPartitioner(crc32, batch_size=size),
    "consistent_random": lambda size: HashPartitioner(crc32, batch_size=size,
                                                      empty_is_keyless=True),
    "murmur2": lambda size: HashPartitioner(_murmur2_positive, batch_size=size),
    "murmur2_random": lambda size: HashPartitioner(_murmur2_positive, batch_size=size),
    "fnv1a": lambda size: HashPartitioner(fnv1a, batch_size=size),
    "fnv1a_random": lambda size: HashPartitioner(fnv1a, batch_size=size),
    f"{_JAVA}internals.DefaultPartitioner": DefaultPartitioner,
    f"{_JAVA}RoundRobinPartitioner": lambda _size: RoundRobinPartitioner(),
    f"{_JAVA}UniformStickyPartitioner": UniformStickyPartitioner,
}

#: What ``partitioner=`` accepts: a name above, a Partitioner, or a plain function.
PartitionerSpec = str | Partitioner | Callable[[str, "bytes | None", int], int] | None


def partitioner_names() -> list[str]:
    return sorted(_FACTORIES)


def partitioner_for(spec: PartitionerSpec, batch_size: int = 16384) -> Partitioner:
    """The partitioner ``spec`` names or wraps (None: the Java default)."""
    if spec is None:
        return DefaultPartitioner(batch_size)
    if isinstance(spec, str):
        factory = _FACTORIES.get(spec.strip())
        if factory is None:
            raise ClientConfigError(f"unknown partitioner {spec!r}; expected one of "
                                    f"{', '.join(partitioner_names())} or a callable")
        return factory(batch_size)
    if isinstance(spec, Partitioner):
        return spec
    if callable(spec):
        return CallablePartitioner(spec)
    raise ClientConfigError(f"not a partitioner: {spec!r}")
