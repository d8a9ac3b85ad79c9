"""Encode Arrow columns into v2 records sections, column-wise (the Spark write path).

The twin of :mod:`strom.spark.arrow_records`: instead of one Python step per record, every
field of every record is computed over whole columns with numpy and pyarrow compute.

Input: :class:`RecordColumns` (n records: keys and values as Arrow binary, null allowed,
timestamps in ms, optional headers) and each record's partition. Output: per partition,
:class:`~strom.protocol.records.builder.EncodedRecords` — the records section of one batch,
records in row order, offset deltas 0, 1, …, timestamp deltas from the section's first
record — each at most ``limit`` bytes unless it holds a single larger record. The record
format is Kafka's (:mod:`strom.protocol.records.record`)::

    length varint | attributes 0 | timestamp_delta varlong | offset_delta varint
    | key_length varint (-1 null) | key | value_length varint (-1 null) | value
    | headers_count varint | headers [key_length varint, key, value_length varint, value]

How, in four steps with a fixed number of numpy / Arrow calls per batch of rows:

1. Each record's *fixed* size — everything but its length varint and its two deltas — from
   the key, value and header lengths (:meth:`RecordColumns.fixed_sizes`).
2. Records are ordered by partition (stable, so each partition keeps row order) and each
   partition's run is cut into sections by the cumulative sum of an upper bound of each
   record's size (its deltas bounded by the partition's timestamp spread and by the most
   records a section can hold): one ``searchsorted`` per section, not per record.
3. With the sections known, the exact deltas and sizes follow.
4. The bytes: the small varint pieces between the variable fields (``prefix`` = length,
   attributes, deltas, key length; ``mid`` = value length; ``tail`` = header count) are
   written by :func:`~strom.spark._encode_columns.pack_varints` into Arrow binary arrays,
   then ``binary_join_element_wise`` concatenates prefix, key, mid, value, tail and encoded
   headers row by row in C++ — records back to back in one buffer, of which each section is
   a zero-copy slice. The computed sizes are checked against what was written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.records.builder import EncodedRecords
from strom.spark._encode_columns import I64, Varints, pack_varints, signed_varint_sizes
from strom.spark._record_columns import MIN_RECORD

I32 = npt.NDArray[np.int32]

#: Arrow's ``binary`` type addresses at most this many bytes in one array.
_MAX_INT32_BUFFER = 2**31 - 1
#: Up to this many partitions in one call, ordering rows by partition takes one pass each.
_FEW_PARTITIONS = 16


class InvalidRecordColumnError(ValueError):
    """A row cannot be a Kafka record (a null header or header key)."""


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records to encode, column-wise; every array has one element per record.

    ``keys`` / ``values``: ``binary`` or ``large_binary``, null = null key / value.
    ``timestamps``: create time in ms. ``headers``: per record, its headers already encoded
    back to back (``binary``), with ``header_counts`` — or both None when no record has any.
    ``key_lengths`` / ``value_lengths``: the length fields (bytes, -1 for null) as varints.
    """

    keys: pa.Array
    values: pa.Array
    timestamps: I64
    headers: pa.Array | None
    header_counts: Varints | None
    key_lengths: Varints
    value_lengths: Varints
    fixed_sizes: I64  # each record's bytes apart from its length varint and its two deltas

    @classmethod
    def of(cls, keys: pa.Array, values: pa.Array, timestamps: I64,
           headers: pa.Array | None = None) -> RecordColumns:
        """Columns from binary keys / values, ms timestamps and an optional
        ``list<struct<key: string, value: binary>>`` headers column (null = no headers).
        Raises InvalidRecordColumnError for a null header or header key."""
        encoded, counts = _encode_headers(headers) if headers is not None else (None, None)
        key_lengths, value_lengths = _lengths(keys), _lengths(values)
        key_varints, value_varints = Varints.of(key_lengths), Varints.of(value_lengths)
        fixed = (1 + key_varints.sizes + np.maximum(key_lengths, 0) + value_varints.sizes
                 + np.maximum(value_lengths, 0))
        count_varints = None
        if encoded is None or counts is None:
            fixed += 1  # header count 0
        else:
            count_varints = Varints.of(counts)
            fixed += count_varints.sizes + _lengths(encoded)
        return cls(keys, values, np.asarray(timestamps, dtype=np.int64), encoded,
                   count_varints, key_varints, value_varints, fixed)

    def __len__(self) -> int:
        return len(self.timestamps)

    def take(self, rows: I64) -> RecordColumns:
        """The records at ``rows``, in that order."""
        indices = pa.array(rows)
        return RecordColumns(
            self.keys.take(indices), self.values.take(indices), self.timestamps[rows],
            None if self.headers is None else self.headers.take(indices),
            None if self.header_counts is None else self.header_counts.take(rows),
            self.key_lengths.take(rows), self.value_lengths.take(rows), self.fixed_sizes[rows])


def encode_records(columns: RecordColumns, partitions: I32, limit: int
                   ) -> list[tuple[int, EncodedRecords]]:
    """The records sections of each partition: ``(partition, section)`` pairs, partitions in
    ascending order, each partition's sections in row order; ``limit`` >= 1 bytes a section
    (a larger record gets a section of its own)."""
    n = len(columns)
    if n == 0:
        return []
    if n > 1 and bool((partitions[1:] < partitions[:-1]).any()):
        order = _partition_order(partitions)
        columns, partitions = columns.take(order), partitions[order]
    timestamps = columns.timestamps
    fixed = columns.fixed_sizes
    starts = _section_starts(fixed, timestamps, partitions, limit)
    counts = np.diff(np.append(starts, n))
    first = np.repeat(starts, counts)
    timestamp_deltas = Varints.of(timestamps - timestamps[first])
    offset_deltas = Varints.of(np.arange(n, dtype=np.int64) - first)
    body = fixed + timestamp_deltas.sizes + offset_deltas.sizes
    length = Varints.of(body)
    total = int(length.sizes.sum() + body.sum())
    large = total > _MAX_INT32_BUFFER or (
        columns.headers is not None and pa.types.is_large_binary(columns.headers.type))
    pieces = [pack_varints([length, _zeros(n), timestamp_deltas, offset_deltas,
                            columns.key_lengths], large=large),
              columns.keys,
              pack_varints([columns.value_lengths], large=large),
              columns.values]
    if columns.headers is None or columns.header_counts is None:
        pieces.append(pack_varints([_zeros(n)], large=large))
    else:
        pieces += [pack_varints([columns.header_counts], large=large), columns.headers]
    records = _join(pieces, large)
    offsets = _offsets(records)
    if int(offsets[-1] - offsets[0]) != total:
        raise AssertionError(f"encoded {int(offsets[-1] - offsets[0])} bytes, computed {total}")
    view = memoryview(records.buffers()[2])
    ends = np.append(starts[1:], n)
    maxima = np.maximum.reduceat(timestamps, starts)
    return [(int(partitions[start]),
             EncodedRecords(view[offsets[start]:offsets[end]], int(end - start),
                            int(timestamps[start]), int(maximum)))
            for start, end, maximum in zip(starts.tolist(), ends.tolist(), maxima.tolist(),
                                           strict=True)]


def _partition_order(partitions: I32) -> I64:
    """Row indices ordered by partition, row order kept within each partition."""
    present = np.flatnonzero(np.bincount(partitions))
    if len(present) <= _FEW_PARTITIONS:
        return np.concatenate([np.flatnonzero(partitions == p) for p in present.tolist()])
    return np.argsort(partitions, kind="stable").astype(np.int64)


def _section_starts(fixed: I64, timestamps: I64, partitions: I32, limit: int) -> I64:
    """Where each section starts: every partition's run of records is cut greedily so that
    the upper bounds of its sections' sizes stay within ``limit`` (at least one record)."""
    n = len(fixed)
    runs = np.flatnonzero(partitions[1:] != partitions[:-1]) + 1
    run_starts = np.concatenate(([0], runs)).astype(np.int64)
    run_lengths = np.diff(np.append(run_starts, n))
    spread = (np.maximum.reduceat(timestamps, run_starts)
              - np.minimum.reduceat(timestamps, run_starts))
    most_records = np.minimum(run_lengths, max(limit // MIN_RECORD, 1))
    bound = fixed + np.repeat(signed_varint_sizes(spread) + signed_varint_sizes(most_records - 1),
                              run_lengths)
    bound += signed_varint_sizes(bound)
    ends = np.cumsum(bound)
    starts: list[int] = []
    for run_start, run_end in zip(run_starts.tolist(), (run_starts + run_lengths).tolist(),
                                  strict=True):
        position = run_start
        while position < run_end:
            starts.append(position)
            before = int(ends[position - 1]) if position else 0
            end = int(np.searchsorted(ends, before + limit, side="right"))
            position = min(max(end, position + 1), run_end)
    return np.array(starts, dtype=np.int64)


def _zeros(n: int) -> Varints:
    """n varints 0 (one zero byte each: attributes, an empty header count)."""
    return Varints(np.zeros(n, dtype=np.uint64), np.ones(n, dtype=np.int64))


def _lengths(array: pa.Array) -> I64:
    """Byte length of each element of a binary array, -1 for null."""
    return np.asarray(pc.binary_length(array).fill_null(-1), dtype=np.int64)


def _offsets(array: pa.Array) -> I64:
    """The n + 1 element offsets of a binary / large_binary array, into its data buffer."""
    dtype = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=dtype)
    return offsets[array.offset:array.offset + len(array) + 1].astype(np.int64)


def _join(pieces: list[pa.Array], large: bool) -> pa.Array:
    """Row-wise concatenation of binary arrays (null = nothing), in ``large_binary`` if
    ``large``, else in ``binary`` (the caller knows the result fits 2 GiB)."""
    target = pa.large_binary() if large else pa.binary()
    pieces = [p if p.type == target else p.cast(target) for p in pieces]
    return pc.binary_join_element_wise(*pieces, b"", null_handling="replace",
                                       null_replacement=b"")


def _encode_headers(column: pa.Array) -> tuple[pa.Array | None, I64 | None]:
    """Each record's headers encoded back to back (without their count), and the counts;
    ``(None, None)`` when no record has a header."""
    counts = np.asarray(pc.list_value_length(column).fill_null(0), dtype=np.int64)
    if not counts.any():
        return None, None
    entries = column.flatten()  # every header of every record, in order
    if entries.null_count:
        raise InvalidRecordColumnError("a header is null")
    fields = entries.flatten()
    names = fields[entries.type.get_field_index("key")]
    values = fields[entries.type.get_field_index("value")]
    if names.null_count:
        raise InvalidRecordColumnError("a header key is null (Kafka headers need a key)")
    names = names.cast(pa.large_binary() if pa.types.is_large_string(names.type)
                       else pa.binary())
    value_lengths = _lengths(values)
    large = int(_lengths(names).sum() + np.maximum(value_lengths, 0).sum()) \
        + 20 * len(entries) > _MAX_INT32_BUFFER
    joined = _join([pack_varints([Varints.of(_lengths(names))], large=large), names,
                    pack_varints([Varints.of(value_lengths)], large=large), values], large)
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    per_record = _offsets(joined)[bounds]
    offsets = pa.py_buffer(per_record if large else per_record.astype(np.int32))
    encoded = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), len(counts),
                                    [None, offsets, joined.buffers()[2]])
    return encoded, counts
