"""The producer's bridge to :mod:`strom.protocol.records`: size estimates and batch building."""

from __future__ import annotations

from collections.abc import Sequence

from strom.client.records import Header
from strom.common.types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from strom.protocol.records.builder import EncodedRecords
from strom.protocol.records.record import encode_record, encode_varint

# Per-record framing in a v2 batch is at most ~21 bytes (length, attributes, deltas, lengths).
RECORD_OVERHEAD = 21

PendingRecord = tuple[int, bytes | None, bytes | None, Sequence[Header]]


def estimate_record_size(
    key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
) -> int:
    """An upper bound of a record's uncompressed size in a batch (cheap; no encoding)."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, data in headers:
        size += 10 + len(name) + (len(data) if data else 0)
    return size


# Zigzag varints of 0 … 2**14 - 1, the values a producer's records almost always need
# (timestamp and offset deltas, key / value / record lengths): a lookup instead of a loop.
_SMALL = 1 << 14
_VARINTS: tuple[bytes, ...] = tuple(encode_varint(i) for i in range(_SMALL))
_NULL = b"\x01"  # varint -1: a null key / value
_NO_HEADERS = b"\x00"


def encode_records(records: Sequence[PendingRecord], base_timestamp: int) -> bytes:
    """The records section of a v2 batch: ``records`` back to back, offset deltas 0 … n-1,
    timestamp deltas from ``base_timestamp`` — byte for byte what
    :func:`strom.protocol.records.record.encode_record` writes for each (the producer's hot
    path: faster, as small varints come from a table)."""
    small, varints = _SMALL, _VARINTS
    out: list[bytes] = []
    append = out.append
    for delta, (timestamp, key, value, headers) in enumerate(records):
        if headers:
            append(encode_record(delta, timestamp - base_timestamp, key, value, tuple(headers)))
            continue
        ts_delta = timestamp - base_timestamp
        head = b"\x00" + (varints[ts_delta] if 0 <= ts_delta < small
                          else encode_varint(ts_delta)) + (
            varints[delta] if delta < small else encode_varint(delta))
        if key is None:
            key_part = _NULL
        else:
            n = len(key)
            key_part = (varints[n] if n < small else encode_varint(n)) + key
        if value is None:
            length = len(head) + len(key_part) + 2
            body_tail = _NULL + _NO_HEADERS
            append((varints[length] if length < small else encode_varint(length)) + head
                   + key_part + body_tail)
            continue
        n = len(value)
        value_len = varints[n] if n < small else encode_varint(n)
        length = len(head) + len(key_part) + len(value_len) + n + 1
        append(b"".join(((varints[length] if length < small else encode_varint(length)),
                         head, key_part, value_len, value, _NO_HEADERS)))
    return b"".join(out)


def build_batch(
    records: Sequence[PendingRecord],
    *,
    codec: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
) -> bytes:
    """One v2 record batch (base offset 0) holding ``records`` (timestamp, key, value, headers);
    ``transactional`` sets the batch's transactional attribute (bit 4)."""
    base_timestamp = records[0][0]
    encoded = EncodedRecords(encode_records(records, base_timestamp), len(records),
                             base_timestamp, max(r[0] for r in records))
    return encoded.seal(compression=codec, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                        transactional=transactional)
