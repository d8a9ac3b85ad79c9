"""Decode a fetched record set straight into one Arrow record batch (the Spark read path).

Input: what a Fetch returns for one partition — v2 record batches back to back, each a
61-byte header (:mod:`strom.protocol.records.batch`: base_offset int64, batch_length int32,
…, attributes int16 with the codec in bits 0-2, LogAppendTime bit 3 and control bit 5,
last_offset_delta int32, base_timestamp / max_timestamp int64, …, records_count int32) and
then the records section, compressed as one stream when the codec is not none. The last
batch may be cut short by the fetch size; it is ignored, as Kafka consumers do. The record
format and the numpy decoding are described in :mod:`strom.spark._record_columns`.

Output rows follow :func:`strom.spark.schema.arrow_schema`, exactly as
:func:`strom.protocol.records.reader.decode_batches` plus a row per record would give them:

* ``offset`` = base_offset + offset_delta; only records with ``start <= offset < end``;
* ``timestamp`` = base_timestamp + timestamp_delta (ms → µs), or the batch's max_timestamp
  for LogAppendTime batches, which also get ``timestampType`` 1 (else 0);
* ``key`` / ``value`` null for length -1; headers (when asked for) a list of
  ``{key: string, value: binary}``, a null value for length -1;
* control batches (transaction markers) give no rows.

Malformed input raises :class:`CorruptMessageError` where the record reader would (every
decoded record is checked, in range or not), with two differences: batches wholly outside
[start, end) are not decoded at all, and header keys are checked to be UTF-8 only when
headers are returned. A kept timestamp whose µs value overflows int64 is also rejected.

The position returned is where the next fetch starts: the offset after the last complete
batch looked at (control batches included), never below ``start`` and capped at ``end``.

Keys, values and header fields are never copied one by one in Python: the record set is
viewed as an Arrow binary array whose elements are the byte ranges between consecutive
field boundaries (zero-copy, offsets into the buffer), and ``pyarrow.compute.take`` gathers
the key and value elements into the output columns.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader
from strom.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    decompress,
)
from strom.protocol.records.reader import scan_batches
from strom.spark._record_columns import (
    I64,
    U8,
    Fields,
    Headers,
    corrupt,
    decode_fields,
    record_ends,
)
from strom.spark.schema import HEADER_TYPE, arrow_schema

Buffer = bytes | bytearray | memoryview

#: Arrow's int32 offsets address at most this many bytes of one buffer.
_MAX_INT32_BUFFER = 2**31 - 1
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
#: The largest |timestamp| in ms whose µs value fits the int64 ``timestamp`` column.
_MAX_TIMESTAMP_MS = (2**63 - 1) // 1000

I32 = npt.NDArray[np.int32]
Bools = npt.NDArray[np.bool_]

_schema = functools.cache(arrow_schema)


def decode_to_arrow(
    raw: Buffer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[pa.RecordBatch | None, int]:
    """The records of ``raw`` with ``start <= offset < end`` and the next offset to fetch.

    Returns ``(None, position)`` when no record is in range. Raises CorruptMessageError for
    malformed batches or records (and whatever :func:`scan_batches` / ``decompress`` raise).
    """
    data = raw if type(raw) is bytes else bytes(raw)
    batches, position = _select_batches(data, start, end, verify_crc)
    if not batches:
        return None, position
    buffer, bounds = _records_sections(data, batches, max_decompressed_size)
    arr = np.frombuffer(buffer, dtype=np.uint8)
    starts, ends = _record_bounds(buffer, arr, batches, bounds)
    fields = decode_fields(arr, starts, ends)
    rows = _Rows.of(batches, fields, start, end)
    if not rows.keep.any():
        return None, position
    columns = _columns(buffer, fields, rows, topic, partition, include_headers)
    return pa.RecordBatch.from_arrays(columns, schema=_schema(include_headers)), position


# ----------------------------------------------------------------------------- batch level


def _select_batches(
    data: bytes, start: int, end: int, verify_crc: bool
) -> tuple[list[BatchHeader], int]:
    """The complete data batches that may hold offsets in [start, end), and the position
    after the last batch scanned (a batch reaching ``end`` is the last one scanned)."""
    position = start
    batches: list[BatchHeader] = []
    for header in scan_batches(data, verify_crc=verify_crc):
        next_offset = header.next_offset
        if (next_offset > start and header.base_offset < end and header.records_count
                and not header.is_control):
            batches.append(header)
        position = max(position, min(next_offset, end))
        if position >= end:
            break
    return batches, position


def _records_sections(
    data: bytes, batches: list[BatchHeader], max_decompressed_size: int
) -> tuple[bytes, list[tuple[int, int]]]:
    """One buffer holding the (decompressed) records sections of ``batches``, in order, and
    each section's ``(start, end)`` in it. Without compressed batches that is ``data``."""
    bounds = [(b.position + HEADER_SIZE, b.position + b.size) for b in batches]
    if all(b.compression == Compression.NONE for b in batches):
        return data, bounds
    view = memoryview(data)
    pieces: list[Buffer] = []
    for header, (first, last) in zip(batches, bounds, strict=True):
        section = view[first:last]
        if header.compression != Compression.NONE:
            pieces.append(decompress(header.compression, section,
                                     max_output_size=max_decompressed_size))
        else:
            pieces.append(section)
    offsets = np.cumsum([0] + [len(piece) for piece in pieces]).tolist()
    return b"".join(pieces), list(itertools.pairwise(offsets))


def _record_bounds(
    buffer: bytes, arr: U8, batches: list[BatchHeader], bounds: list[tuple[int, int]]
) -> tuple[I64, I64]:
    """Where each record (its length varint) starts and where it ends, all batches."""
    ends = np.concatenate([
        record_ends(buffer, arr, first, last, header.records_count)
        for header, (first, last) in zip(batches, bounds, strict=True)
    ])
    starts = np.empty_like(ends)
    starts[1:] = ends[:-1]
    counts = np.array([b.records_count for b in batches], dtype=np.int64)
    starts[np.cumsum(counts) - counts] = [first for first, _ in bounds]
    return starts, ends


@dataclass(frozen=True, slots=True)
class _Rows:
    """Per-record values resolved from their batch, and which records are in range."""

    keep: Bools
    offsets: I64
    timestamps_us: I64
    timestamp_types: I32

    @classmethod
    def of(cls, batches: list[BatchHeader], fields: Fields, start: int, end: int) -> _Rows:
        counts = [b.records_count for b in batches]
        offsets = _per_record([b.base_offset for b in batches], counts) + fields.offset_deltas
        keep = (offsets >= start) & (offsets < end)
        log_append = np.repeat(np.array([b.is_log_append_time for b in batches]), counts)
        timestamps = _timestamps_ms(batches, counts, log_append, fields.timestamp_deltas, keep)
        return cls(keep, offsets, timestamps * 1000, log_append.astype(np.int32))


def _per_record(values: list[int], counts: list[int]) -> I64:
    return np.repeat(np.array(values, dtype=np.int64), counts)


def _timestamps_ms(
    batches: list[BatchHeader], counts: list[int], log_append: Bools, deltas: I64, keep: Bools
) -> I64:
    """Record timestamps (ms): base + delta, or max_timestamp for LogAppendTime batches.

    Raises CorruptMessageError if a kept record's timestamp does not fit the µs int64 column,
    rather than let it wrap around silently.
    """
    bases = _per_record([b.base_timestamp for b in batches], counts)
    maxima = _per_record([b.max_timestamp for b in batches], counts)
    sums = bases + deltas
    timestamps = np.where(log_append, maxima, sums)
    if _within_us(timestamps) and _within_us(bases) and _within_us(deltas):
        return timestamps  # |base + delta| <= 2 * the µs limit: nothing wrapped around
    wrapped = ~log_append & (((bases ^ sums) & (deltas ^ sums)) < 0)
    if bool((keep & (wrapped | ~_in_us_range(timestamps))).any()):
        raise corrupt("timestamp out of range")
    return timestamps


def _within_us(values: I64) -> bool:
    return bool(values.min() >= -_MAX_TIMESTAMP_MS and values.max() <= _MAX_TIMESTAMP_MS)


def _in_us_range(values: I64) -> Bools:
    return (values >= -_MAX_TIMESTAMP_MS) & (values <= _MAX_TIMESTAMP_MS)


# ---------------------------------------------------------------------------- Arrow columns


def _columns(
    buffer: bytes,
    fields: Fields,
    rows: _Rows,
    topic: str,
    partition: int,
    include_headers: bool,
) -> list[pa.Array]:
    """The output columns of the records in range."""
    keep = rows.keep
    every = bool(keep.all())
    picked = np.arange(len(keep)) if every else np.flatnonzero(keep)
    n = len(picked)
    keys, values = _gather_pairs(buffer, fields.key_starts, fields.key_lengths,
                                 fields.value_starts, fields.value_lengths, picked)
    offsets, timestamps, types = (
        (rows.offsets, rows.timestamps_us, rows.timestamp_types) if every
        else (rows.offsets[picked], rows.timestamps_us[picked], rows.timestamp_types[picked]))
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets),
        pa.array(timestamps, type=_TIMESTAMP_TYPE),
        pa.array(types),
    ]
    if include_headers:
        columns.append(_headers_column(buffer, fields.headers, keep))
    return columns


def _headers_column(buffer: bytes, headers: Headers, keep: Bools) -> pa.Array:
    """``list<struct<key string, value binary>>`` of the records selected by ``keep``.

    Header keys are checked to be UTF-8 in every decoded record, kept or not, as the record
    reader does.
    """
    list_offsets = np.zeros(len(headers.counts) + 1, dtype=np.int32)
    np.cumsum(headers.counts, out=list_offsets[1:])
    keys, values = _gather_pairs(buffer, headers.key_starts, headers.key_lengths,
                                 headers.value_starts, headers.value_lengths,
                                 np.arange(len(headers.key_starts)))
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise corrupt("header key is not UTF-8") from exc
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    column = pa.ListArray.from_arrays(pa.array(list_offsets), entries,
                                      type=pa.list_(HEADER_TYPE))
    return column if keep.all() else column.filter(pa.array(keep))


def _gather_pairs(
    buffer: bytes, first_starts: I64, first_lengths: I64, second_starts: I64,
    second_lengths: I64, picked: I64,
) -> tuple[pa.Array, pa.Array]:
    """Items ``picked`` of two byte-range fields (length -1 = null) as two binary arrays.

    Each item's first field precedes its second in ``buffer`` and items follow each other,
    so the ranges [first, first end, second, second end] of all items, one after another,
    are non-decreasing offsets: a zero-copy Arrow binary array over ``buffer`` whose element
    4i is item i's first field and 4i+2 its second (the odd elements are the bytes between
    fields). ``take`` then copies the wanted elements out in C++.
    """
    if not len(picked):
        return pa.array([], pa.binary()), pa.array([], pa.binary())
    large = len(buffer) > _MAX_INT32_BUFFER
    bounds = np.empty((len(first_starts), 4), dtype=np.int64 if large else np.int32)
    bounds[:, 0] = first_starts
    bounds[:, 1] = first_starts + np.maximum(first_lengths, 0)
    bounds[:, 2] = second_starts
    bounds[:, 3] = second_starts + np.maximum(second_lengths, 0)
    segments = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(), bounds.size - 1,
        [None, pa.py_buffer(bounds), pa.py_buffer(buffer)])
    return (_take(segments, 4 * picked, first_lengths[picked] < 0),
            _take(segments, 4 * picked + 2, second_lengths[picked] < 0))


def _take(segments: pa.Array, indices: I64, nulls: Bools) -> pa.Array:
    """Elements ``indices`` of ``segments``, null where ``nulls``, as a ``binary`` array."""
    taken = pc.take(segments, pa.array(indices, mask=nulls if nulls.any() else None))
    return taken if taken.type == pa.binary() else taken.cast(pa.binary())
