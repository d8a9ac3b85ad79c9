"""Decode record batches into records (consumer, Spark reader, compaction, markers).

Input: a run of v2 record batches (a Fetch response's records, a log segment region), each
a 61-byte header (:mod:`strom.protocol.records.batch`) followed by the records
(:mod:`strom.protocol.records.record`), compressed as one stream when attribute bits 0-2
name a codec (:mod:`strom.protocol.records.compression`).

Like a Kafka consumer, the reader stops cleanly at a trailing partial batch (a fetch may cut
the last batch short) and raises :class:`CorruptMessageError` for anything malformed —
never ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``. Magic v0/v1 batches raise
:class:`UnsupportedForMessageFormatError`, unknown codec ids
:class:`UnsupportedCompressionTypeError`.

Record timestamps are ``base_timestamp + delta``, or the batch's ``max_timestamp`` for
LogAppendTime batches; offsets are ``base_offset + delta``.

The per-record loop inlines one- and two-byte varints (nearly all lengths and deltas) and
slices keys and values straight out of one ``bytes`` object. :func:`decode_records_as`
builds the caller's record type directly, so no intermediate :class:`Record` is made and
copied per record. :func:`decode_record_tuples` (the client's consume path) builds tuple
records from a template, in C when the optional extension ``_record_decode`` is built
(``setup.py``; ~15x faster per record) and in Python otherwise; the Python loop is the
specification, and the two return equal records and raise the same error type
(``tests/protocol/test_record_decode.py`` runs both on random and mutated batches).

Varints are read as Kafka's ``ByteUtils`` reads them: at most 5 bytes kept to 32 bits,
varlongs at most 10 bytes kept to 64 bits.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol, TypeVar

from strom.common.errors import CorruptMessageError, KafkaError
from strom.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_magic,
    crc32c,
    parse_header,
)
from strom.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    decompress,
)
from strom.protocol.records.record import Header, Record, decode_varlong

Buffer = bytes | bytearray | memoryview


class _NativeDecode(Protocol):
    def __call__(self, data: Buffer, pos: int, end: int, count: int, base_offset: int,
                 base_timestamp: int, fixed_timestamp: int | None, cls: type[tuple[Any, ...]],
                 template: tuple[Any, ...], slots: tuple[int, int, int, int, int], /
                 ) -> list[Any]: ...


native_decode: _NativeDecode | None
try:  # the C twin of the tuple records' loop (setup.py builds it; optional)
    from strom.protocol.records._record_decode import decode as native_decode
except ImportError:  # pragma: no cover - built without a C compiler
    native_decode = None

_INT32 = struct.Struct(">i")
#: attributes, timestamp delta, offset delta, key length, value length, header count.
_MIN_RECORD_BODY = 6
_MIN_RECORD = _MIN_RECORD_BODY + 1


def scan_batches(buf: Buffer, *, verify_crc: bool = True) -> Iterator[BatchHeader]:
    """Headers of the complete batches in ``buf`` (positions relative to ``buf``).

    Stops at a trailing partial batch. Raises CorruptMessageError for a batch length below
    the 61-byte header, a negative record count or (with ``verify_crc``) a CRC mismatch.
    """
    view = memoryview(buf).cast("B")
    total = len(view)
    position = 0
    unpack_length = _INT32.unpack_from
    while total - position >= LOG_OVERHEAD:
        (batch_length,) = unpack_length(view, position + 8)
        end = position + LOG_OVERHEAD + batch_length
        if end > total:
            return  # a partial batch: the caller fetches the rest later
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            if batch_length >= 5:  # the magic byte is inside the batch
                check_magic(view, position)
            raise CorruptMessageError(f"record batch length {batch_length} below the minimum")
        check_magic(view, position)
        header = parse_header(view, position)
        if header.records_count < 0:
            raise CorruptMessageError(f"negative record count {header.records_count}")
        if verify_crc and crc32c(view[position + ATTRIBUTES_OFFSET : end]) != header.crc:
            raise CorruptMessageError(f"record batch CRC mismatch at position {position}")
        yield header
        position = end


def decode_batches(
    buf: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each complete batch in ``buf`` with its decoded (and decompressed) records."""
    for header in scan_batches(buf, verify_crc=verify_crc):
        yield header, decode_records(buf, header, max_decompressed_size=max_decompressed_size)


def decode_records(
    buf: Buffer,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """The records of the batch ``header`` describes (as returned by :func:`scan_batches`)."""
    return decode_records_as(buf, header, Record, max_decompressed_size=max_decompressed_size)


R = TypeVar("R")
#: ``make(offset, timestamp, key, value, headers)`` → one decoded record of the caller's type.
RecordFactory = Callable[[int, int, bytes | None, bytes | None, list[Header]], R]


def decode_records_as(
    buf: Buffer,
    header: BatchHeader,
    make: RecordFactory[R],
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[R]:
    """:func:`decode_records`, each record built by ``make`` (absolute offset, timestamp)."""
    if header.records_count == 0:
        return []
    data, position, end = _records_section(buf, header, max_decompressed_size)
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    return _decode_records(
        data,
        position,
        end,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        fixed_timestamp,
        make,
    )


class TupleLayout(NamedTuple):
    """How :func:`decode_record_tuples` builds a record: a copy of ``template`` (of type
    ``cls``: ``tuple`` or a NamedTuple) with the items at ``slots`` — the indexes of the
    offset, timestamp, key, value and headers, in that order — set from the record.
    Headers are a tuple of ``(key, value)`` tuples, ``()`` when there are none."""

    cls: type[tuple[Any, ...]]
    template: tuple[Any, ...]
    slots: tuple[int, int, int, int, int]


def decode_record_tuples(
    buf: Buffer,
    header: BatchHeader,
    layout: TupleLayout,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Any]:
    """The records of one batch as tuples of ``layout`` (absolute offsets and timestamps).

    Runs the C twin when it is built (:data:`native_decode`), else the Python loop; both
    return equal records and raise :class:`CorruptMessageError` for malformed records."""
    if header.records_count == 0:
        return []
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    if native_decode is None:
        data, position, end = _records_section(buf, header, max_decompressed_size)
        return _decode_records(data, position, end, header.records_count, header.base_offset,
                               header.base_timestamp, fixed_timestamp, _tuple_factory(layout))
    if header.compression == Compression.NONE:  # the C loop reads any buffer: no copy
        section: Buffer = buf
        position, end = header.position + HEADER_SIZE, header.position + header.size
    else:
        section, position, end = _records_section(buf, header, max_decompressed_size)
    try:
        return native_decode(section, position, end, header.records_count,
                             header.base_offset, header.base_timestamp, fixed_timestamp,
                             *layout)
    except ValueError as exc:
        raise CorruptMessageError(str(exc)) from None


def _tuple_factory(layout: TupleLayout) -> RecordFactory[Any]:
    """The Python twin's record builder for ``layout`` (one list reused, copied per record)."""
    cls, template, (at_offset, at_timestamp, at_key, at_value, at_headers) = layout
    fields = list(template)
    new = tuple.__new__

    def make(offset: int, timestamp: int, key: bytes | None, value: bytes | None,
             headers: list[Header]) -> Any:
        fields[at_offset] = offset
        fields[at_timestamp] = timestamp
        fields[at_key] = key
        fields[at_value] = value
        fields[at_headers] = tuple(headers) if headers else ()
        return new(cls, fields)

    return make


def iter_offsets_and_timestamps(
    buf: Buffer,
    *,
    verify_crc: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[tuple[int, int]]:
    """``(offset, timestamp)`` of every record, skipping keys, values and headers.

    The fast path for ListOffsets by timestamp and time-index rebuilds: it reads only each
    record's length, timestamp delta and offset delta. Callers can skip whole batches by
    ``max_timestamp`` with :func:`scan_batches` + :func:`batch_offsets_and_timestamps`.
    """
    for header in scan_batches(buf, verify_crc=verify_crc):
        yield from batch_offsets_and_timestamps(
            buf, header, max_decompressed_size=max_decompressed_size
        )


def batch_offsets_and_timestamps(
    buf: Buffer,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of each record of one batch (see
    :func:`iter_offsets_and_timestamps`)."""
    if header.records_count == 0:
        return []
    data, position, end = _records_section(buf, header, max_decompressed_size)
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    return _decode_offsets_and_timestamps(
        data,
        position,
        end,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        fixed_timestamp,
    )


def _records_section(
    buf: Buffer, header: BatchHeader, max_decompressed_size: int
) -> tuple[bytes, int, int]:
    """``(data, start, end)``: the batch's records, decompressed if need be, as one bytes."""
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    codec = header.compression
    if codec == Compression.NONE:
        if type(buf) is bytes:
            return buf, start, end
        data = bytes(memoryview(buf).cast("B")[start:end])
        return data, 0, len(data)
    view = memoryview(buf).cast("B")[start:end]
    data = decompress(codec, view, max_output_size=max_decompressed_size)
    return data, 0, len(data)


def _corrupt(detail: str) -> KafkaError:
    return CorruptMessageError(f"invalid record: {detail}")


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint of up to 5 bytes, 32 bits (the slow path of the inlined cases)."""
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            result &= 0xFFFFFFFF  # Kafka keeps 32 bits of the fifth byte's seven
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 28:
            raise _corrupt("varint longer than 5 bytes")


def _read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varlong of up to 10 bytes, 64 bits."""
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            result &= 0xFFFFFFFFFFFFFFFF  # Kafka keeps 64 bits of the tenth byte's seven
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise _corrupt("varlong longer than 10 bytes")


def _decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    new_record: RecordFactory[R],
) -> list[R]:
    if count > (end - pos) // _MIN_RECORD:
        raise _corrupt(f"{count} records cannot fit in {end - pos} bytes")
    records: list[R] = []
    append = records.append
    read_varint = _read_varint
    read_varlong = _read_varlong
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise _corrupt(f"record length {length} out of range")
            pos += 1  # the (unused) attributes byte
            byte = data[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                timestamp_delta, pos = read_varlong(data, pos)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(data, pos)
            byte = data[pos]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = read_varint(data, pos)
            if size >= 0:
                key: bytes | None = data[pos : pos + size]
                pos += size
            elif size == -1:
                key = None
            else:
                raise _corrupt(f"key length {size}")
            byte = data[pos]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                size = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                size, pos = read_varint(data, pos)
            if size >= 0:
                value: bytes | None = data[pos : pos + size]
                pos += size
            elif size == -1:
                value = None
            else:
                raise _corrupt(f"value length {size}")
            byte = data[pos]
            if byte == 0:
                headers: list[Header] = []
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, record_end)
            if pos != record_end:
                raise _corrupt(f"record body is {length} bytes but its fields end elsewhere")
            # LogAppendTime: every record carries the batch's time.
            timestamp = base_timestamp + timestamp_delta if fixed_timestamp is None \
                else fixed_timestamp
            append(new_record(base_offset + offset_delta, timestamp, key, value, headers))
    except IndexError as exc:
        raise _corrupt("truncated record") from exc
    if pos != end:
        raise CorruptMessageError(f"{end - pos} bytes left after the batch's {count} records")
    return records


def _read_headers(data: bytes, pos: int, record_end: int) -> tuple[list[Header], int]:
    count, pos = _read_varint(data, pos)
    if count < 0 or count > (record_end - pos) // 2:
        raise _corrupt(f"header count {count} out of range")
    headers: list[Header] = []
    for _ in range(count):
        size, pos = _read_varint(data, pos)
        if size < 0:
            raise _corrupt(f"header key length {size}")
        try:
            header_key = data[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _corrupt("header key is not UTF-8") from exc
        pos += size
        size, pos = _read_varint(data, pos)
        if size >= 0:
            header_value: bytes | None = data[pos : pos + size]
            pos += size
        elif size == -1:
            header_value = None
        else:
            raise _corrupt(f"header value length {size}")
        headers.append((header_key, header_value))
    return headers, pos


def _decode_offsets_and_timestamps(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
) -> list[tuple[int, int]]:
    if count > (end - pos) // _MIN_RECORD:
        raise _corrupt(f"{count} records cannot fit in {end - pos} bytes")
    result: list[tuple[int, int]] = []
    append = result.append
    read_varint = _read_varint
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: most lengths and deltas
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise _corrupt(f"record length {length} out of range")
            byte = data[pos + 1]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                timestamp_delta, pos = _read_varlong(data, pos + 1)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
            else:
                offset_delta, _ = read_varint(data, pos)
            append((base_offset + offset_delta, base_timestamp + timestamp_delta))
            pos = record_end
    except IndexError as exc:
        raise _corrupt("truncated record") from exc
    if pos != end:
        raise CorruptMessageError(f"{end - pos} bytes left after the batch's {count} records")
    if fixed_timestamp is not None:  # LogAppendTime: every record carries the batch's time
        return [(offset, fixed_timestamp) for offset, _ in result]
    return result


def records_have_null_key(data: bytes | bytearray | memoryview, count: int) -> bool:
    """Whether an uncompressed records section holds a record with a null key.

    Reads only each record's length and the varints before the key (the record format in
    :mod:`strom.protocol.records.record`); several times cheaper than decoding the records.
    Used to refuse keyless records on compacted topics. CorruptMessageError if malformed.
    """
    pos = 0
    end = len(data)
    for _ in range(count):
        length, pos = decode_varlong(data, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise CorruptMessageError(f"invalid record: length {length} out of range")
        _, field = decode_varlong(data, pos + 1)  # timestamp delta (after attributes)
        _, field = decode_varlong(data, field)  # offset delta
        key_length, _ = decode_varlong(data, field)
        if key_length < 0:
            return True
        pos = record_end
    return False
