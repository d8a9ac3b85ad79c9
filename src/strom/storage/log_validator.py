"""What a leader checks inside a record batch before appending it (Kafka's ``LogValidator``).

The broker keeps batches opaque on disk and on the wire (DESIGN.md), but a batch whose header
and CRC are sound can still hold records no consumer can parse — librdkafka then re-fetches
the same offset forever. So every batch a client or a coordinator appends is walked once here,
without building record objects, after the header checks of
:mod:`strom.storage.log_append` (sizes) and :func:`strom.protocol.records.batch.iter_batches`
(length, magic, CRC). Nothing is written unless every batch passes.

Checked, with the error Kafka answers:

* client batches only (:class:`AppendOrigin` ``CLIENT``; coordinators write markers and
  transactional batches themselves): base offset 0; at least one record and ``records_count
  == last_offset_delta + 1``; no control batch (the one place that refuses clients' control
  batches); a producer id comes with a base sequence — INVALID_RECORD;
* the codec is 0-4 — UNSUPPORTED_COMPRESSION_TYPE (Kafka fails with an unmapped
  ``IllegalArgumentException``, i.e. UNKNOWN_SERVER_ERROR);
* a compressed payload decompresses (bounded by
  :data:`~strom.protocol.records.compression.DEFAULT_MAX_DECOMPRESSED_SIZE`) — INVALID_RECORD,
  as Kafka answers a stream that ends early (for a stream its codec cannot read at all Kafka
  answers UNKNOWN_SERVER_ERROR from an unmapped exception); not the retriable CORRUPT_MESSAGE,
  which is kept for what the CRC and the batch framing catch: the CRC held, so a retry would
  send the same bytes;
* the record structure (:func:`scan_records`): every record's length prefix, its fields
  (timestamp delta, offset delta, key, value, headers with non-null UTF-8 keys) ending exactly
  at its end, exactly ``records_count`` records filling the batch, offset deltas 0, 1, 2, …,
  record attributes below 0x80 (unused, but kafka-python reads the byte as a varint) —
  INVALID_RECORD (strom never rewrites a batch, so a batch whose inner offsets would not be
  the assigned ones is refused where Kafka would rebuild it);
* single records, reported as Produce ``record_errors`` (index within the batch + message)
  while the whole batch fails: a record without a key on a ``compact`` topic
  (INVALID_RECORD); a CreateTime timestamp outside ``[now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms]`` and a producer's LogAppendTime batch on a
  LogAppendTime topic (INVALID_TIMESTAMP; it wins when both kinds occur).

Kept opaque: keys, values, header keys and values (only their lengths are read; header keys
are UTF-8-checked, as strom's reader and kafka-python need), record attributes' low bits. The
cost is one pass over each record's varints, in C (:func:`scan_records`; a Python twin when
the extension is not built): see docs/benchmarks.md.

:func:`validate_batch` returns the largest record timestamp, which the log writes into the
batch header when it differs (Kafka does the same, so a producer cannot misstate it).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable

from strom.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordError,
    UnsupportedCompressionTypeError,
)
from strom.protocol.records.batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, BatchHeader
from strom.protocol.records.compression import Compression, decompress
from strom.protocol.records.reader import batch_offsets_and_timestamps
from strom.storage.log_settings import LogSettings

_Scan = Callable[[bytes | memoryview, int, int, int, bool], tuple[int, int, list[int]]]
native_scan: _Scan | None
try:  # the C twin of scan_records_python (setup.py builds it; optional)
    from strom.storage._record_scan import scan as native_scan
except ImportError:  # pragma: no cover - depends on the build
    native_scan = None

NO_TIMESTAMP = -1
_MAX_CODEC = max(Compression)
#: The smallest record: a one-byte length and six one-byte fields (attributes, timestamp
#: delta, offset delta, key length, value length, header count).
_MIN_RECORD = 7


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's ``AppendOrigin``): some checks apply to client batches only,
    and replicated batches are the leader's, appended without validation."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


def validate_batch(
    view: memoryview,
    header: BatchHeader,
    settings: LogSettings,
    now_ms: int,
    origin: AppendOrigin,
    partition_name: str,
) -> int:
    """Check one batch (``header`` as parsed from ``view``); see the module docstring.

    Returns the largest record timestamp (-1 if no record has one; the header's for an
    empty batch). Raises the Kafka error
    that refuses the batch; record-level refusals carry ``record_errors``.
    """
    count = header.records_count
    if origin is AppendOrigin.CLIENT:
        _check_client_header(header, partition_name)
    codec = header.compression
    if codec > _MAX_CODEC:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {codec} in a record "
                                              f"batch for {partition_name}")
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    data: bytes | memoryview = view
    if codec != Compression.NONE:
        try:
            data = decompress(codec, view[start:end])
        except CorruptMessageError as exc:
            raise InvalidRecordError(f"{exc.message} in {partition_name}") from exc
        start, end = 0, len(data)
    try:
        min_delta, max_delta, keyless = scan_records(
            data, start, end, count,
            collect_keyless=settings.compact_policy and not header.is_control)
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{exc.message} in {partition_name}") from exc
    if count == 0:  # an empty coordinator batch (client batches hold at least one record)
        return header.max_timestamp
    errors: dict[int, tuple[type[KafkaError], str]] = {}
    if not settings.log_append_time:
        base = header.base_timestamp
        earliest = now_ms - settings.before_max_ms
        latest = now_ms + settings.after_max_ms
        if not earliest <= base + min_delta <= base + max_delta <= latest:
            _timestamp_errors(view, header, earliest, latest, errors)
    elif header.is_log_append_time and origin is AppendOrigin.CLIENT:
        reason = "a producer must not set the LogAppendTime timestamp type"
        errors.update((i, (InvalidTimestampError, reason)) for i in range(count))
    if keyless:
        reason = ("Compacted topic cannot accept message without key in topic partition "
                  f"{partition_name}.")
        errors.update((i, (InvalidRecordError, reason)) for i in keyless)
    if errors:
        raise _record_validation_error(errors)
    return max(NO_TIMESTAMP, header.base_timestamp + max_delta)


def _check_client_header(header: BatchHeader, partition_name: str) -> None:
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"the base offset of a record batch appended to {partition_name} must be 0, not "
            f"{header.base_offset}")
    count = header.records_count
    if count <= 0:
        raise InvalidRecordError(f"record batch for {partition_name} holds no records")
    if count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch for {partition_name} declares {count} records but last offset "
            f"delta {header.last_offset_delta}")
    if header.is_control:
        raise InvalidRecordError(
            f"clients may not write control records (partition {partition_name})")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"record batch for {partition_name} has producer id {header.producer_id} but "
            f"base sequence {header.base_sequence}")


def _timestamp_errors(view: memoryview, header: BatchHeader, earliest: int, latest: int,
                      errors: dict[int, tuple[type[KafkaError], str]]) -> None:
    """The slow path, taken only when some record is out of range: name each one."""
    as_create_time = dataclasses.replace(
        header, attributes=header.attributes & ~TIMESTAMP_TYPE_MASK, base_offset=0)
    records = batch_offsets_and_timestamps(view, as_create_time)
    for index, (offset, ts) in enumerate(records):
        if ts != NO_TIMESTAMP and not earliest <= ts <= latest:
            errors[index] = (InvalidTimestampError,
                             f"Timestamp {ts} of the record at relative offset {offset} is out "
                             f"of range; it must be within [{earliest}, {latest}]")


def _record_validation_error(errors: dict[int, tuple[type[KafkaError], str]]) -> KafkaError:
    record_errors: list[RecordError] = [(i, errors[i][1]) for i in sorted(errors)]
    if any(kind is InvalidTimestampError for kind, _ in errors.values()):
        return InvalidTimestampError("One or more records have been rejected due to invalid "
                                     "timestamp", record_errors=record_errors)
    shown = "; ".join(f"record {i}: {message}" for i, message in record_errors[:3])
    return InvalidRecordError(
        f"One or more records have been rejected: {len(record_errors)} record error(s), the "
        f"first at most three: {shown}", record_errors=record_errors)


def _invalid(detail: str) -> KafkaError:
    return InvalidRecordError(f"invalid record structure: {detail}")


def _varint(data: bytes | memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Zigzag varint (varlong with ``max_bytes=10``) at ``pos``: (value, position after).

    As Kafka's ``ByteUtils``: a varint keeps 32 bits, a varlong 64 (higher bits dropped)."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            result &= 0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise _invalid(f"varint longer than {max_bytes} bytes")


def scan_records(
    data: bytes | memoryview, pos: int, end: int, count: int, *, collect_keyless: bool = True
) -> tuple[int, int, list[int]]:
    """Walk ``count`` records in ``data[pos:end]`` (the record format in
    :mod:`strom.protocol.records.record`) without decoding keys, values or headers.

    Returns (smallest timestamp delta, largest timestamp delta, indexes of records without
    a key — empty unless ``collect_keyless``); raises InvalidRecordError unless the records
    are well formed, exactly fill the range and carry offset deltas 0, 1, 2, …

    Runs the C twin (``strom.storage._record_scan``, built with the package) when it is
    there, else :func:`scan_records_python`; both give the same answers and messages.
    """
    if native_scan is None:
        return scan_records_python(data, pos, end, count, collect_keyless=collect_keyless)
    try:
        return native_scan(data, pos, end, count, collect_keyless)
    except ValueError as exc:
        raise _invalid(str(exc)) from None


def scan_records_python(
    data: bytes | memoryview, pos: int, end: int, count: int, *, collect_keyless: bool = True
) -> tuple[int, int, list[int]]:
    """:func:`scan_records` in Python: the specification of the C twin, and the fallback when
    it is not built. The loop inlines one- and two-byte varints (nearly every length, delta
    and count), since it runs once per record on the produce path."""
    if isinstance(data, memoryview) and len(data) > end:
        data = data[:end]  # a read past the batch is an IndexError, as in the C twin
    if count < 0 or count > (end - pos) // _MIN_RECORD:
        raise _invalid(f"{count} records cannot fit in {end - pos} bytes")
    min_delta = 1 << 63
    max_delta = -(1 << 63)
    keyless: list[int] = []
    varint = _varint
    try:
        for index in range(count):
            # length (non-negative): zigzag, so the low bit of the first byte is the sign
            byte = data[pos]
            if byte < 0x80:
                if byte & 1:
                    raise _invalid(f"record {index} has a negative length")
                record_end = pos + 1 + (byte >> 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                if byte & 1:
                    raise _invalid(f"record {index} has a negative length")
                record_end = pos + 2 + ((((byte & 0x7F) | (data[pos + 1] << 7))) >> 1)
                pos += 2
            else:
                length, pos = varint(data, pos)
                if length < 0:
                    raise _invalid(f"record {index} has a negative length")
                record_end = pos + length
            if record_end > end:
                raise _invalid(f"record {index} runs past the end of its batch")
            # attributes (unused; a set high bit breaks readers that take it for a
            # varint, as kafka-python's), then the timestamp delta (varlong)
            if data[pos] > 0x7F:
                raise _invalid(f"record {index} has attributes {data[pos]:#x}")
            byte = data[pos + 1]
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                delta, pos = varint(data, pos + 1, 10)
            if delta < min_delta:
                min_delta = delta
            if delta > max_delta:
                max_delta = delta
            # offset delta: must be the record's index (zigzag(i) == 2i)
            byte = data[pos]
            if byte < 0x80:
                if byte != index << 1:
                    raise _invalid(f"record {index} has offset delta {(byte >> 1) ^ -(byte & 1)}")
                pos += 1
            elif data[pos + 1] < 0x80:
                if (byte & 0x7F) | (data[pos + 1] << 7) != index << 1:
                    offset_delta, _ = varint(data, pos)
                    raise _invalid(f"record {index} has offset delta {offset_delta}")
                pos += 2
            else:
                offset_delta, pos = varint(data, pos)
                if offset_delta != index:
                    raise _invalid(f"record {index} has offset delta {offset_delta}")
            # key: -1 is null
            byte = data[pos]
            if byte < 0x80:
                if byte & 1:
                    if byte != 1:
                        raise _invalid(f"record {index} has key length {(byte >> 1) ^ -1}")
                    if collect_keyless:
                        keyless.append(index)
                    pos += 1
                else:
                    pos += 1 + (byte >> 1)
            else:
                size, pos = varint(data, pos)
                if size < -1:
                    raise _invalid(f"record {index} has key length {size}")
                if size == -1:
                    if collect_keyless:
                        keyless.append(index)
                else:
                    pos += size
            # value: -1 is null
            byte = data[pos]
            if byte < 0x80:
                if byte & 1:
                    if byte != 1:
                        raise _invalid(f"record {index} has value length {(byte >> 1) ^ -1}")
                    pos += 1
                else:
                    pos += 1 + (byte >> 1)
            elif data[pos + 1] < 0x80 and not byte & 1:
                pos += 2 + ((((byte & 0x7F) | (data[pos + 1] << 7))) >> 1)
            else:
                size, pos = varint(data, pos)
                if size < -1:
                    raise _invalid(f"record {index} has value length {size}")
                if size > 0:
                    pos += size
            # headers
            if data[pos] == 0:
                pos += 1
            else:
                pos = _skip_headers(data, pos, record_end, index)
            if pos != record_end:
                raise _invalid(f"the fields of record {index} do not end where its length says")
    except IndexError:
        raise _invalid("a record runs past the end of its batch") from None
    if pos != end:
        raise _invalid(f"{end - pos} bytes follow the batch's {count} records")
    return min_delta, max_delta, keyless


def _skip_headers(data: bytes | memoryview, pos: int, record_end: int, index: int) -> int:
    count, pos = _varint(data, pos)
    if count < 0 or 2 * count > record_end - pos:
        raise _invalid(f"record {index} has {count} headers")
    for _ in range(count):
        size, pos = _varint(data, pos)
        if size < 0 or pos + size > record_end:
            raise _invalid(f"record {index} has a header key of length {size}")
        try:
            bytes(data[pos : pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(f"record {index} has a header key that is not UTF-8") from None
        pos += size
        size, pos = _varint(data, pos)
        if size < -1:
            raise _invalid(f"record {index} has a header value of length {size}")
        if size > 0:
            pos += size
    return pos
