"""The writer's partition choice for whole columns, the same as the client producer's.

:mod:`strom.client.partitioner` decides record by record: an explicit partition wins, a keyed
record goes to ``toPositive(murmur2(key)) % partitions`` (the Java client's rule), and an
unkeyed one to the sticky partition (KIP-480 / KIP-794: one random partition until about
``batch_size`` bytes went there, then another). Here the same rules run over numpy columns:
:func:`murmur2` hashes every key at once (one pass per 4-byte word position, over the keys
that long), :class:`StickyPartitioner` assigns runs of unkeyed records with one step per
switch, not per record.
"""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from strom.common.errors import UnknownTopicOrPartitionError

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
Bools = npt.NDArray[np.bool_]

_M = np.uint32(0x5BD1E995)
_SEED = np.uint32(0x9747B28C)


def murmur2(keys: pa.Array) -> U32:
    """Kafka's murmur2 of each element of a binary array, as unsigned 32-bit values (null
    elements hash as empty). Equal to :func:`strom.client.partitioner.murmur2` mod 2**32."""
    offsets, data = _offsets_and_data(keys)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    hashes = _SEED ^ lengths.astype(np.uint32)
    words = lengths >> 2
    if len(words) and words.max() > 0:
        by_words = np.argsort(words, kind="stable")
        sorted_words = words[by_words]
        for word in range(int(sorted_words[-1])):
            # The keys with more than ``word`` whole words are the last ones in by_words.
            rows = by_words[np.searchsorted(sorted_words, word, side="right"):]
            at = starts[rows] + 4 * word
            k = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << 8)
                 | (data[at + 2].astype(np.uint32) << 16) | (data[at + 3].astype(np.uint32) << 24))
            k *= _M
            k ^= k >> np.uint32(24)
            k *= _M
            hashes[rows] = (hashes[rows] * _M) ^ k
    tail = starts + (lengths & ~3)
    rest = lengths & 3
    for extra, shift in ((3, 16), (2, 8)):
        rows = np.flatnonzero(rest >= extra)
        if len(rows):
            hashes[rows] ^= data[tail[rows] + extra - 1].astype(np.uint32) << np.uint32(shift)
    rows = np.flatnonzero(rest >= 1)
    if len(rows):
        hashes[rows] = (hashes[rows] ^ data[tail[rows]].astype(np.uint32)) * _M
    hashes ^= hashes >> np.uint32(13)
    hashes *= _M
    hashes ^= hashes >> np.uint32(15)
    return hashes


def key_partitions(keys: pa.Array, count: int) -> I32:
    """The partition of each key (``toPositive(murmur2(key)) % count``, the Java rule)."""
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(count)).astype(np.int32)


def _offsets_and_data(array: pa.Array) -> tuple[I64, npt.NDArray[np.uint8]]:
    """Element offsets (n + 1, from 0) and the bytes of a binary / large_binary array."""
    if array.null_count:
        array = pc.if_else(array.is_null(), b"", array)
    dtype = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=dtype)[array.offset:array.offset + len(array) + 1]
    data = (np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None
            else np.zeros(0, dtype=np.uint8))
    return offsets.astype(np.int64), data


class StickyPartitioner:
    """Partitions for unkeyed records without an explicit one: stay on one randomly chosen
    partition until about ``batch_size`` bytes went there, then move to another (the Java
    client's default, as :class:`strom.client.partitioner.DefaultPartitioner` does).

    Holds per-topic state across calls (the current partition and the bytes it took); one
    owner (a writer task), not thread-safe.
    """

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self.batch_size = max(batch_size, 1)
        self._rng = rng or random.Random()
        self._current: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes so far)

    def assign(self, topic: str, sizes: I64, count: int) -> I32:
        """A partition for each record of ``sizes`` bytes, in order."""
        out = np.empty(len(sizes), dtype=np.int32)
        ends = np.cumsum(sizes)
        before = ends - sizes  # bytes of this call's records before each record
        partition, taken = self._current.get(topic, (-1, self.batch_size))
        position = 0
        while position < len(sizes):
            if partition < 0 or partition >= count or taken >= self.batch_size:
                partition, taken = self._switch(partition, count), 0
            # A record joins the current partition while fewer than batch_size bytes went there.
            end = int(np.searchsorted(before, before[position] + self.batch_size - taken,
                                      side="left"))
            end = max(end, position + 1)
            out[position:end] = partition
            taken += int(ends[end - 1] - before[position])
            position = end
        self._current[topic] = (partition, taken)
        return out

    def _switch(self, previous: int, count: int) -> int:
        choice = self._rng.randrange(count)
        if count > 1 and choice == previous:
            choice = (choice + 1) % count
        return choice


def assign_partitions(topic: str, count: int, explicit: pa.Array | None, keys: pa.Array,
                      sizes: I64, sticky: StickyPartitioner) -> I32:
    """The partition of each record: ``explicit`` where given (checked to exist), else by key,
    else sticky. ``sizes`` are the records' sizes for the sticky choice."""
    n = len(keys)
    given: Bools = np.zeros(n, dtype=np.bool_)
    partitions = np.empty(n, dtype=np.int32)
    if explicit is not None and explicit.null_count < n:
        given = np.asarray(explicit.is_valid())
        values = np.asarray(explicit.fill_null(0), dtype=np.int64)
        bad = given & ((values < 0) | (values >= count))
        if bad.any():
            raise UnknownTopicOrPartitionError(
                f"partition {int(values[np.argmax(bad)])} of topic {topic!r} does not exist "
                f"(it has {count})")
        partitions[given] = values[given]
        if given.all():
            return partitions
    keyed = ~given & np.asarray(keys.is_valid())
    if keyed.all():
        return key_partitions(keys, count)
    if keyed.any():
        rows = np.flatnonzero(keyed)
        partitions[rows] = key_partitions(keys.take(pa.array(rows)), count)
    unkeyed = np.flatnonzero(~given & ~keyed)
    if len(unkeyed):
        partitions[unkeyed] = sticky.assign(topic, sizes[unkeyed], count)
    return partitions
