"""Records of the ``__transaction_state`` topic, in Kafka's exact formats (sans-io).

Key (``TransactionLogKey``, version 0, never flexible)::

    int16 key version (0) | transactional_id string (int16 length + UTF-8)

Value (``TransactionLogValue``; a null value is a tombstone: the transactional id expired)::

    int16 value version (0, or 1 = flexible)
    producer_id int64 | producer_epoch int16 | transaction_timeout_ms int32
    transaction_status int8 (:class:`~strom.coordinator.txn.model.TxnState`)
    transaction_partitions nullable array of [topic string, partition_ids array of int32]
    transaction_last_update_timestamp_ms int64 | transaction_start_timestamp_ms int64
    (version 1: compact lengths and tagged fields — 0 previous_producer_id int64,
     1 next_producer_id int64, 2 client_transaction_version int16; defaults -1, -1, 0)

strom writes version 0, as Kafka does until ``transaction.version`` 2: the partitions are null
in state Empty and grouped by topic otherwise. Both versions are read.

Transactional id → partition: ``(java_string_hashcode(id) & 0x7fffffff) % partitions``
(Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from strom.common.types import TopicPartition
from strom.coordinator.codec import (
    Reader,
    RecordFormatError,
    encode_string,
    partition_for,
)

__all__ = ["TXN_TOPIC", "RecordFormatError", "TxnLogValue", "decode_key", "decode_value",
           "encode_key", "encode_value", "partition_for"]

TXN_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One transactional id's persisted state (what a ``__transaction_state`` value holds)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + encode_string(transactional_id)


def decode_key(data: bytes | None) -> str | None:
    """The transactional id; None for a key version that is not ours (replay skips it)."""
    if data is None:
        raise RecordFormatError("null key in __transaction_state")
    reader = Reader(bytes(data))
    if reader.int16() != KEY_VERSION:
        return None
    return reader.string()


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return by_topic


def encode_value(value: TxnLogValue, *, empty_state: int = 0) -> bytes:
    """Version 0 bytes of ``value``; its partitions are written null when its state is
    ``empty_state`` (Empty), which must then have none."""
    out = [_VALUE_HEAD.pack(VALUE_VERSION, value.producer_id, value.producer_epoch,
                            value.timeout_ms, value.state)]
    if value.state == empty_state:
        if value.partitions:
            raise ValueError("a transaction in state Empty has no partitions")
        out.append(_I32.pack(-1))
    else:
        grouped = _grouped(value.partitions)
        out.append(_I32.pack(len(grouped)))
        for topic, ids in grouped.items():
            out.append(encode_string(topic))
            out.append(_I32.pack(len(ids)))
            out.extend(_I32.pack(p) for p in ids)
    out.append(_TIMES.pack(value.last_update_ms, value.start_ms))
    return b"".join(out)


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """The persisted state, or None for a tombstone. RecordFormatError on bad bytes."""
    if data is None:
        return None
    reader = Reader(bytes(data))
    version = reader.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    reader.flexible = version >= 1
    producer_id = reader.int64()
    epoch = reader.int16()
    timeout_ms = reader.int32()
    state = _I8.unpack(reader.take(1))[0]
    partitions: set[TopicPartition] = set()
    count = reader.nullable_array_length()
    for _ in range(max(count, 0)):
        topic = reader.string()
        for _ in range(reader.array_length()):
            partitions.add(TopicPartition(topic, reader.int32()))
        reader.skip_tagged_fields()
    last_update = reader.int64()
    start = reader.int64()
    previous = following = -1
    if reader.flexible:
        for tag, payload in reader.tagged_fields():
            if tag == 0 and len(payload) == 8:
                previous = _I64.unpack(payload)[0]
            elif tag == 1 and len(payload) == 8:
                following = _I64.unpack(payload)[0]
    return TxnLogValue(producer_id, epoch, timeout_ms, state, frozenset(partitions),
                       last_update, start, previous, following)
