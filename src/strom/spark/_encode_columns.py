"""Vectorised (numpy) varints for the column-wise record encoder (:mod:`strom.spark.arrow_encode`).

Kafka's record fields are zigzag varints: ``zigzag(n) = (n << 1) ^ (n >> 63)`` written as
unsigned LEB128, 7 bits a byte, low group first, the high bit set on every byte but the last
(at most 5 bytes for a varint, 10 for a varlong). Here they are computed for whole columns:
:func:`zigzag` and :func:`varint_sizes` per value, and :func:`pack_varints`, which writes
several varint columns side by side into one Arrow binary array whose element i holds the
varints of row i one after another — the small pieces the encoder then joins with keys,
values and headers. Writing takes a few whole-column numpy operations per byte position of
each column's widest varint, never a Python step per value.
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
    of each column, in column order. All columns have the same length.

    The bytes are laid out first in a fixed-width matrix, one row per element and one slot
    per column as wide as that column's widest varint; a slot's byte k is written for all
    rows at once (a strided column store). A mask of the bytes each row really uses then
    compacts the matrix into the array's data (row-major order is element order), unless
    every row uses all of its bytes.
    """
    count = len(columns[0].sizes)
    widest = [int(column.sizes.max()) if count else 1 for column in columns]
    matrix = np.empty((count, sum(widest)), dtype=np.uint8)
    used: npt.NDArray[np.bool_] | None = None
    widths = np.zeros(count, dtype=np.int64)
    slot = 0
    for column, width in zip(columns, widest, strict=True):
        widths += column.sizes
        for k in range(width):
            group = column.unsigned >> np.uint64(7 * k) if k else column.unsigned
            if k + 1 < width:
                more = column.sizes > k + 1
                matrix[:, slot + k] = (group & np.uint64(0x7F)) | (more.astype(np.uint64) << 7)
            else:
                matrix[:, slot + k] = group  # the widest value's last byte: < 0x80
        if width > 1 and not bool((column.sizes == width).all()):
            if used is None:
                used = np.ones(matrix.shape, dtype=np.bool_)
            for k in range(1, width):
                used[:, slot + k] = column.sizes > k
        slot += width
    data = matrix.ravel() if used is None else matrix[used]
    offsets = np.zeros(count + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(widths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), count,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])
