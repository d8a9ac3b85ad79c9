"""Vectorised (numpy) field decoding of v2 records, the engine of :mod:`strom.spark.arrow_records`.

A records section is ``count`` records back to back, each (Kafka's ``DefaultRecord``)::

    length           varint   bytes after this field
    attributes       int8     unused
    timestamp_delta  varlong
    offset_delta     varint
    key_length       varint   -1 = null key
    key              bytes
    value_length     varint   -1 = null value
    value            bytes
    headers_count    varint
    headers          [key_length varint (>= 0), key UTF-8, value_length varint (-1 = null), value]

Varints are zigzag-encoded LEB128 (7 bits a byte, low group first, high bit = more bytes).

Decoding runs in two passes. :func:`record_ends` finds where records start and end from their
``length`` varints — the one inherently sequential step: runs of equal-size records are
guessed and checked vectorised, anything else is walked by a tight pure-Python loop.
:func:`decode_fields` then decodes every field of all records at once: each step reads one
varint per record with numpy gathers at per-record byte positions and advances those
positions.

Invariants and safety: field reads use ``take(mode="clip")``, so no index ever faults. Every length
is checked to be >= -1 (>= 0 for counts and header keys), so positions only move forward,
and finally each record's fields must end exactly at its ``length``-given end. Together this
means every byte a valid record was decoded from lay inside that record; anything else
raises :class:`CorruptMessageError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strom.common.errors import CorruptMessageError, KafkaError

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10
#: length (1) + attributes, timestamp delta, offset delta, key / value length, header count.
MIN_RECORD_BODY = 6
MIN_RECORD = MIN_RECORD_BODY + 1


def corrupt(detail: str) -> KafkaError:
    """The CorruptMessageError for a malformed record (worded like the record reader's)."""
    return CorruptMessageError(f"invalid record: {detail}")


# ----------------------------------------------------------------------- record boundaries

#: Sections with fewer records are walked in Python without looking for equal-size runs.
MIN_RUN_SECTION = 64
#: A run of equal-size records shorter than this makes the rest of the section walked.
MIN_RUN = 32
#: Guessed record starts checked first in a run (then 8 times more while they all match).
RUN_WINDOW = 64


def record_ends(data: bytes, arr: U8, start: int, end: int, count: int) -> I64:
    """End position (exclusive) of each of the ``count`` records in ``data[start:end]``.

    Runs of records of equal size (common: fixed-size payloads) are found with vectorised
    checks, the rest is walked one length varint at a time. Checks that the records fill
    the section exactly; their lengths themselves are checked by :func:`decode_fields` (the
    walk here takes a negative zigzag length as its magnitude, keeping positions increasing).
    """
    if count > (end - start) // MIN_RECORD:
        raise corrupt(f"{count} records cannot fit in {end - start} bytes")
    pieces: list[I64] = []
    position, done = start, 0
    while done < count:
        if count < MIN_RUN_SECTION:
            run = np.array(_walk_lengths(data, position, count - done), dtype=np.int64)
        else:
            run = _equal_size_run(data, arr, position, end, count - done)
        pieces.append(run)
        done += len(run)
        position = int(run[-1])
        if len(run) < MIN_RUN and done < count:
            pieces.append(np.array(_walk_lengths(data, position, count - done), np.int64))
            done = count
            position = int(pieces[-1][-1])
    if position != end:
        raise corrupt(f"the {count} records do not fill their {end - start}-byte section")
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _equal_size_run(data: bytes, arr: U8, position: int, end: int, remaining: int) -> I64:
    """Ends of the records from ``position`` on that have the first one's size (>= 1 record).

    Sound by induction: if the record at a guessed start holds exactly the first record's
    length varint bytes, it ends where the next guessed start is.
    """
    stride = _walk_lengths(data, position, 1)[0] - position
    prefix = data[position : position + _prefix_size(data, position)]
    fit = min(remaining, (end - position) // stride)
    accepted = 1
    window = RUN_WINDOW
    while accepted < fit:
        starts = position + stride * np.arange(accepted, min(fit, accepted + window))
        match = arr.take(starts) == prefix[0]
        for index in range(1, len(prefix)):
            match &= arr.take(starts + index) == prefix[index]
        if not match.all():
            accepted += int(np.argmin(match))
            break
        accepted += len(starts)
        window *= 8
    return position + stride * np.arange(1, accepted + 1, dtype=np.int64)


def _walk_lengths(data: bytes, pos: int, count: int) -> list[int]:
    """Follow ``count`` length varints from ``pos`` (one and two bytes inlined)."""
    ends = [0] * count
    try:
        for i in range(count):
            byte = data[pos]
            if byte < 0x80:
                pos += 1 + (byte >> 1)
            else:
                second = data[pos + 1]
                if second < 0x80:
                    pos += 2 + (((byte & 0x7F) | (second << 7)) >> 1)
                else:
                    pos = _skip_long_record(data, pos)
            ends[i] = pos
    except IndexError:
        raise corrupt("truncated record") from None
    return ends


def _skip_long_record(data: bytes, pos: int) -> int:
    """Position after a record whose length varint takes three bytes or more."""
    unsigned = 0
    for index in range(VARINT_MAX_BYTES):
        byte = data[pos + index]
        unsigned |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return pos + index + 1 + (unsigned >> 1)
    raise corrupt("varint longer than 5 bytes")


def _prefix_size(data: bytes, pos: int) -> int:
    """Bytes of the varint at ``pos`` (already read once, so known to be complete)."""
    size = 1
    while data[pos + size - 1] >= 0x80:
        size += 1
    return size


# ---------------------------------------------------------------------------- varint reads


def read_varints(arr: U8, pos: I64, max_bytes: int = VARINT_MAX_BYTES) -> tuple[I64, I64]:
    """The zigzag varint at each position of ``pos``, and the position after each."""
    first = arr.take(pos, mode="clip")
    more = first >= 0x80
    if not more.any():
        unsigned = first.astype(np.int64)
        return (unsigned >> 1) ^ -(unsigned & 1), pos + 1
    second = arr.take(pos + 1, mode="clip")
    if not (more & (second >= 0x80)).any():
        low = (first & 0x7F).astype(np.int64)
        unsigned = np.where(more, low | (second.astype(np.int64) << 7), low)
        return (unsigned >> 1) ^ -(unsigned & 1), pos + 1 + more
    return _read_long_varints(arr, pos, max_bytes)


def _read_long_varints(arr: U8, pos: I64, max_bytes: int) -> tuple[I64, I64]:
    """General case of :func:`read_varints`: any mix of 1 to ``max_bytes``-byte varints."""
    unsigned = np.zeros(len(pos), dtype=np.uint64)
    size = np.zeros(len(pos), dtype=np.int64)
    pending = np.arange(len(pos))
    for index in range(max_bytes):
        byte = arr.take(pos[pending] + index, mode="clip")
        unsigned[pending] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * index)
        size[pending] += 1
        pending = pending[byte >= 0x80]
        if not len(pending):
            signed = (unsigned >> np.uint64(1)).astype(np.int64)
            signed ^= -(unsigned & np.uint64(1)).astype(np.int64)
            return signed, pos + size
    raise corrupt(f"varint longer than {max_bytes} bytes")


def _read_lengths(arr: U8, pos: I64, what: str, minimum: int) -> tuple[I64, I64]:
    """A length varint per position, checked to be >= ``minimum``."""
    length, after = read_varints(arr, pos)
    if len(length) and int(length.min()) < minimum:
        raise corrupt(f"{what} length {int(length.min())}")
    return length, after


# ---------------------------------------------------------------------------- record fields


@dataclass(frozen=True, slots=True)
class Headers:
    """Every header of the decoded records, in record order then header order."""

    counts: I64
    key_starts: I64
    key_lengths: I64
    value_starts: I64
    value_lengths: I64  # -1 = null


@dataclass(frozen=True, slots=True)
class Fields:
    """The decoded fields of n records: deltas, and byte ranges of keys and values."""

    timestamp_deltas: I64
    offset_deltas: I64
    key_starts: I64
    key_lengths: I64  # -1 = null
    value_starts: I64
    value_lengths: I64  # -1 = null
    headers: Headers


def decode_fields(arr: U8, starts: I64, ends: I64) -> Fields:
    """Decode the records whose length varints sit at ``starts`` and that end at ``ends``."""
    length, pos = read_varints(arr, starts)
    if len(length) and (int(length.min()) < MIN_RECORD_BODY or not np.array_equal(
            pos + length, ends)):
        raise corrupt("record length out of range")
    timestamp_deltas, pos = read_varints(arr, pos + 1, VARLONG_MAX_BYTES)  # after attributes
    offset_deltas, pos = read_varints(arr, pos)
    key_lengths, key_starts = _read_lengths(arr, pos, "key", -1)
    value_lengths, value_starts = _read_lengths(arr, key_starts + np.maximum(key_lengths, 0),
                                                "value", -1)
    pos = value_starts + np.maximum(value_lengths, 0)
    headers, pos = _decode_headers(arr, pos, ends)
    if not np.array_equal(pos, ends):
        raise corrupt("record fields do not end where the record length says")
    return Fields(timestamp_deltas, offset_deltas, key_starts, key_lengths, value_starts,
                  value_lengths, headers)


def _decode_headers(arr: U8, pos: I64, ends: I64) -> tuple[Headers, I64]:
    """Header count and headers of every record; returns them and the positions after."""
    counts, pos = read_varints(arr, pos)
    if len(counts) and (int(counts.min()) < 0 or bool((counts > (ends - pos) // 2).any())):
        raise corrupt("header count out of range")
    total = int(counts.sum())
    key_starts = np.empty(total, dtype=np.int64)
    key_lengths = np.empty(total, dtype=np.int64)
    value_starts = np.empty(total, dtype=np.int64)
    value_lengths = np.empty(total, dtype=np.int64)
    if total:
        first = np.cumsum(counts) - counts  # index of each record's first header
        pos = pos.copy()
        for index in range(int(counts.max())):
            rows = np.flatnonzero(counts > index)
            slots = first[rows] + index
            length, start = _read_lengths(arr, pos[rows], "header key", 0)
            key_starts[slots], key_lengths[slots] = start, length
            length, start = _read_lengths(arr, start + length, "header value", -1)
            value_starts[slots], value_lengths[slots] = start, length
            pos[rows] = start + np.maximum(length, 0)
    return Headers(counts, key_starts, key_lengths, value_starts, value_lengths), pos
