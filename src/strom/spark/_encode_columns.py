"""Vectorised (numpy) varints for the column-wise record encoder (:mod:`strom.spark.arrow_encode`).

Kafka's record fields are zigzag varints: ``zigzag(n) = (n << 1) ^ (n >> 63)`` written as
unsigned LEB128, 7 bits a byte, low group first, the high bit set on every byte but the last
(at most 5 bytes for a varint, 10 for a varlong). Here they are computed for whole columns:
:func:`zigzag` and :func:`varint_sizes` per value, and :func:`pack_varints`, which writes
several varint columns side by side into one Arrow binary array whose element i holds the
varints of row i one after another — the small pieces the encoder then joins with keys,
values and headers. Writing takes one numpy scatter per byte position (a varint's n-th byte
is written only for the values that have one), never a Python step per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]

#: The smallest unsigned value needing 2, 3, … 10 LEB128 bytes.
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def zigzag(values: I64) -> U64:
    """Zigzag-map signed 64-bit values to unsigned ones (0, -1, 1, -2 … → 0, 1, 2, 3 …)."""
    return ((values << 1) ^ (values >> 63)).view(np.uint64)


def varint_sizes(unsigned: U64) -> I64:
    """Bytes of the unsigned LEB128 encoding of each value (1 to 10)."""
    sizes = np.ones(len(unsigned), dtype=np.int64)
    if not len(unsigned):
        return sizes
    largest = unsigned.max()
    for threshold in _THRESHOLDS:  # one pass per byte the largest value needs
        if largest < threshold:
            break
        sizes += unsigned >= threshold
    return sizes


def signed_varint_sizes(values: I64) -> I64:
    """Bytes of the zigzag varint (or varlong) of each signed value."""
    return varint_sizes(zigzag(values))


class Varints(NamedTuple):
    """One varint column: zigzag-mapped values and their encoded sizes."""

    unsigned: U64
    sizes: I64

    @classmethod
    def of(cls, values: I64) -> Varints:
        unsigned = zigzag(values)
        return cls(unsigned, varint_sizes(unsigned))

    def take(self, rows: I64) -> Varints:
        return Varints(self.unsigned[rows], self.sizes[rows])


def pack_varints(columns: Sequence[Varints], *, large: bool = False) -> pa.Array:
    """A binary array (``large_binary`` if ``large``) whose element i is the varint of row i
    of each column, in column order. All columns have the same length."""
    count = len(columns[0].sizes)
    widths = columns[0].sizes.copy()
    for column in columns[1:]:
        widths += column.sizes
    offsets = np.zeros(count + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(widths, out=offsets[1:])
    data = np.zeros(int(offsets[-1]), dtype=np.uint8)
    position = offsets[:-1].astype(np.int64)
    for column in columns:
        _write_varints(data, position, column.unsigned, column.sizes)
        position += column.sizes
    return pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), count,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _write_varints(data: U8, position: I64, unsigned: U64, sizes: I64) -> None:
    """Write each value's LEB128 bytes at its position (``data`` starts zeroed).

    One scatter per byte index k of the widest value, over every row: a row with fewer
    bytes writes its last byte again instead (index min(k, size - 1)), so no row is ever
    written past its own bytes and no subset of rows needs to be selected.
    """
    if not len(sizes):
        return
    widest = int(sizes.max())
    if widest == 1:
        if unsigned.any():
            data[position] = unsigned  # one byte each: the value itself (< 0x80)
        return
    last = sizes - 1
    for index in range(widest):
        byte_index = np.minimum(last, index)
        group = (unsigned >> (byte_index * 7).astype(np.uint64)) & np.uint64(0x7F)
        data[position + byte_index] = group | ((byte_index < last).astype(np.uint64) << 7)
