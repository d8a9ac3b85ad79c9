"""Build complete v2 record batches (producer side, control markers, broker rewrites).

Output format: the 61-byte header described in :mod:`strom.protocol.records.batch`, then
the records (:mod:`strom.protocol.records.record`), compressed as one stream when the codec
(attribute bits 0-2) is not none. ``batch_length`` counts the bytes after itself
(49 + records), ``base_timestamp`` is the first record's timestamp, ``max_timestamp`` the
largest, and the CRC-32C covers attributes to the end. Defaults follow the Java producer:
base offset 0 (the broker assigns offsets), partition leader epoch -1, no producer id /
epoch / sequence (-1). Compressed batches are always sent compressed, as Java does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c as _crc32c

from strom.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from strom.protocol.records.compression import Compression, compress
from strom.protocol.records.control import (
    ControlType,
    encode_control_key,
    encode_end_txn_marker_value,
)
from strom.protocol.records.record import Header, encode_record, size_of_varint

_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

#: Worst-case bytes a record adds beyond its key, value and headers: length (5), attributes
#: (1), timestamp delta (10), offset delta (5).
MAX_RECORD_OVERHEAD = 21

BytesLike = bytes | bytearray | memoryview


def max_record_size(
    key: BytesLike | None, value: BytesLike | None, headers: Sequence[Header] = ()
) -> int:
    """Upper bound of the bytes one record adds to a batch (before compression)."""
    size = MAX_RECORD_OVERHEAD + size_of_varint(len(headers))
    for data in (key, value):
        size += 1 if data is None else size_of_varint(len(data)) + len(data)
    for header_key, header_value in headers:
        key_len = len(header_key.encode("utf-8"))
        size += size_of_varint(key_len) + key_len
        size += 1 if header_value is None else size_of_varint(len(header_value)) + len(header_value)
    return size


class BatchBuilder:
    """Accumulates records and encodes them as one v2 record batch.

    Lifecycle: construct, :meth:`append` records (offset deltas 0, 1, 2 … unless given),
    optionally :meth:`set_producer_state`, then :meth:`build` — which may be called again and
    returns the same bytes until more records are appended. Not thread-safe: one owner
    (a producer's per-partition accumulator, or the broker writing a marker / rewrite).
    """

    __slots__ = (
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_compression_level",
        "_control",
        "_count",
        "_last_offset_delta",
        "_log_append_time",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_records",
        "_transactional",
    )

    def __init__(
        self,
        *,
        compression: int = Compression.NONE,
        compression_level: int | None = None,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
        control: bool = False,
        log_append_time: bool = False,
    ) -> None:
        self._compression = Compression(compression)
        self._compression_level = compression_level
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._transactional = transactional
        self._control = control
        self._log_append_time = log_append_time
        self._records = bytearray()
        self._count = 0
        self._last_offset_delta = -1
        self._base_timestamp: int | None = None
        self._max_timestamp = NO_TIMESTAMP

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool
    ) -> None:
        """Stamp idempotence / transaction state (the producer does this when it drains)."""
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._transactional = transactional

    def append(
        self,
        timestamp: int,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Sequence[Header] = (),
        *,
        offset_delta: int | None = None,
    ) -> int:
        """Add a record (timestamp in ms); returns its offset delta within the batch.

        ``offset_delta`` defaults to the previous one + 1; explicit deltas (broker rewrites
        after compaction) must increase.
        """
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        elif offset_delta <= self._last_offset_delta:
            raise ValueError(
                f"offset delta {offset_delta} does not follow {self._last_offset_delta}"
            )
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        self._records += encode_record(
            offset_delta, timestamp - self._base_timestamp, key, value, tuple(headers)
        )
        self._count += 1
        self._last_offset_delta = offset_delta
        return offset_delta

    @property
    def records_count(self) -> int:
        return self._count

    @property
    def is_empty(self) -> bool:
        return self._count == 0

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batch built now without compression (header included); an upper
        bound of the compressed size for batching decisions."""
        return HEADER_SIZE + len(self._records)

    def has_room_for(
        self,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Sequence[Header] = (),
        *,
        limit: int,
    ) -> bool:
        """Whether one more record keeps the batch within ``limit`` bytes (uncompressed).
        An empty batch always has room, so an oversized record still gets its own batch."""
        if self._count == 0:
            return True
        return self.size_in_bytes + max_record_size(key, value, headers) <= limit

    def build(self) -> bytes:
        """The complete batch: header with batch length and CRC-32C, then the records."""
        return seal_batch(
            self._records,
            count=self._count,
            last_offset_delta=max(self._last_offset_delta, 0),
            base_timestamp=NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp,
            max_timestamp=self._max_timestamp,
            compression=self._compression,
            compression_level=self._compression_level,
            base_offset=self._base_offset,
            partition_leader_epoch=self._partition_leader_epoch,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            transactional=self._transactional,
            control=self._control,
            log_append_time=self._log_append_time,
        )


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """The records section of a v2 batch, encoded but not yet sealed into a batch.

    ``records`` holds ``count`` (>= 1) records back to back in the uncompressed record format
    of :mod:`strom.protocol.records.record`, with offset deltas 0 … count-1 and timestamp
    deltas relative to ``base_timestamp`` (the first record's timestamp); ``max_timestamp``
    is the largest record timestamp. Whoever sends it stamps the producer state and the
    codec with :meth:`seal` (the CRC covers both, so they are never part of ``records``).
    Bulk encoders (the Spark writer) produce these; the client producer seals them when it
    sends, and again if a retry needs new sequence numbers.
    """

    records: BytesLike
    count: int
    base_timestamp: int
    max_timestamp: int

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the sealed batch without compression (header included)."""
        return HEADER_SIZE + len(self.records)

    def seal(
        self,
        *,
        compression: int = Compression.NONE,
        compression_level: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
    ) -> bytes:
        """The complete batch (base offset 0, partition leader epoch -1, CreateTime)."""
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        return seal_batch(
            self.records,
            count=self.count,
            last_offset_delta=self.count - 1,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            compression=compression,
            compression_level=compression_level,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
        )


def seal_batch(
    records: BytesLike,
    *,
    count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int = Compression.NONE,
    compression_level: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """A complete batch around an uncompressed records section: the section compressed as
    one stream when ``compression`` is not none, the 61-byte header in front, CRC-32C over
    attributes to the end. Raises ValueError for a header field out of its wire range."""
    codec = Compression(compression)
    payload: BytesLike = records
    if codec is not Compression.NONE:
        payload = compress(codec, records, level=compression_level)
    attributes = int(codec)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    header = bytearray(HEADER_SIZE)
    try:
        _HEADER.pack_into(
            header,
            0,
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise ValueError(f"record batch field out of range: {exc}") from exc
    crc = _crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])
    crc = _crc32c.crc32c(payload, crc)
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, payload))


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch: transactional + control attributes, base sequence -1, one
    record with offset delta 0 whose key / value are the marker (see ``control.py``)."""
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise ValueError(f"not a transaction marker type: {control_type!r}")
    builder = BatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )
    builder.append(
        timestamp,
        encode_control_key(control_type),
        encode_end_txn_marker_value(coordinator_epoch),
    )
    return builder.build()
