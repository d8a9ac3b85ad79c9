"""The producer's bridge to :mod:`strom.protocol.records`: size estimates and batch building."""

from __future__ import annotations

from collections.abc import Sequence

from strom.client.records import Header
from strom.common.types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from strom.protocol.records.builder import BatchBuilder

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
    builder = BatchBuilder(
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
    )
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, list(headers))
    return bytes(builder.build())
