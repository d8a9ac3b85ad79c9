"""RecordBatch v2 headers: parse, validate and patch without decoding the records.

Wire / on-disk format (big-endian), 61-byte header then ``records_count`` records::

    0  base_offset            int64
    8  batch_length           int32   bytes after this field (so total = batch_length + 12)
    12 partition_leader_epoch int32   not covered by the CRC; set by the leader
    16 magic                  int8    must be 2 (v0/v1 message sets have their magic here too)
    17 crc                    uint32  CRC-32C of bytes [21, end)
    21 attributes             int16   bits 0-2 codec, 3 LogAppendTime, 4 transactional,
                                      5 control, 6 delete-horizon set
    23 last_offset_delta      int32
    27 base_timestamp         int64
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 records_count          int32

The broker validates this header and the CRC, patches the base offset and partition leader
epoch (outside the CRC) and appends; the records are walked once, without decoding keys or
values, by :mod:`strom.storage.log_validator`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c

from strom.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    UnsupportedForMessageFormatError,
)

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli), hardware-accelerated by the ``crc32c`` package."""
    return int(_crc32c.crc32c(data))


@dataclass(slots=True)
class BatchHeader:
    """The parsed 61-byte header of one record batch at ``position`` within its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; the caller guarantees 61 bytes are there."""
    return BatchHeader(*_HEADER.unpack_from(buf, position), position)  # type: ignore[call-arg]


def check_magic(buf: bytes | bytearray | memoryview, position: int) -> None:
    """Reject message formats other than v2 the way Kafka 4 does."""
    magic = buf[position + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} is not supported; use record batch magic v2"
            )
        raise CorruptMessageError(f"invalid record batch magic {magic}")


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> list[BatchHeader]:
    """Parse and validate every batch in a produce payload or a stored region.

    Raises CorruptMessageError for truncated batches, bad lengths or CRC mismatches,
    UnsupportedForMessageFormatError for magic v0/v1. Nothing is modified.
    """
    view = memoryview(buf)
    total = len(view)
    position = 0
    headers: list[BatchHeader] = []
    while position < total:
        if total - position < HEADER_SIZE:
            if total - position >= MAGIC_OFFSET + 1:
                check_magic(view, position)
            raise CorruptMessageError("truncated record batch header")
        check_magic(view, position)
        header = parse_header(view, position)
        end = position + header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > total:
            raise CorruptMessageError(
                f"record batch length {header.batch_length} does not fit the {total - position} "
                "bytes available"
            )
        if header.records_count < 0 or header.last_offset_delta < 0:
            raise CorruptMessageError("negative record count or offset delta")
        if verify_crc and crc32c(view[position + ATTRIBUTES_OFFSET : end]) != header.crc:
            raise CorruptMessageError("record batch CRC mismatch")
        headers.append(header)
        position = end
    return headers


def scan_valid_prefix(buf: bytes | bytearray | memoryview) -> tuple[list[BatchHeader], int]:
    """Headers of the longest valid prefix (crash recovery) and that prefix's length in bytes."""
    view = memoryview(buf)
    total = len(view)
    position = 0
    headers: list[BatchHeader] = []
    while total - position >= HEADER_SIZE:
        if view[position + MAGIC_OFFSET] != CURRENT_MAGIC:
            break
        header = parse_header(view, position)
        end = position + header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > total:
            break
        if crc32c(view[position + ATTRIBUTES_OFFSET : end]) != header.crc:
            break
        headers.append(header)
        position = end
    return headers, position


def patch_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Set the base offset (outside the CRC) in place."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Set the partition leader epoch (outside the CRC) in place."""
    _INT32.pack_into(buf, position + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, ts: int) -> None:
    """Mark a batch LogAppendTime with max timestamp ``ts`` and recompute its CRC in place."""
    set_max_timestamp(buf, position, size, ts, log_append_time=True)


def set_max_timestamp(buf: bytearray | memoryview, position: int, size: int, ts: int, *,
                      log_append_time: bool) -> None:
    """Set the timestamp type bit and the max timestamp of the batch at ``position`` (``size``
    bytes) and recompute its CRC in place."""
    attributes = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)[0]
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + 35, ts)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


def require_records(header: BatchHeader) -> None:
    """A produce batch must hold at least one record."""
    if header.records_count == 0:
        raise InvalidRecordError("record batch holds no records")
