"""Checks a payload passes before a log appends it (all before a byte is written).

Pure functions over the parsed batch headers: the leader's size checks
(:func:`check_client_batches`; what is inside each batch is
:mod:`strom.storage.log_validator`'s) and the follower's (:func:`check_replicated_batches`).
The producer-sequence checks live in :mod:`strom.storage.producer_state`; offsets are
assigned by :meth:`strom.storage.log.Log.append`.
"""

from __future__ import annotations

from strom.common.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from strom.protocol.records.batch import BatchHeader
from strom.storage.log_settings import LogSettings


def check_client_batches(
    headers: list[BatchHeader], total: int, settings: LogSettings
) -> tuple[int, bool]:
    """Size checks of a leader's payload of ``total`` bytes holding ``headers`` (at least
    one): the payload within ``segment.bytes``, each batch within ``max.message.bytes``.

    Returns (record count, whether any batch carries a producer id).
    """
    if total > settings.segment_bytes:
        raise RecordListTooLargeError(
            f"{total} bytes of batches exceed segment.bytes {settings.segment_bytes}"
        )
    record_count = 0
    has_producer = False
    for header in headers:
        if header.size > settings.max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {header.size} bytes exceeds max.message.bytes "
                f"{settings.max_message_bytes}"
            )
        record_count += header.records_count
        if header.producer_id >= 0:
            has_producer = True
    return record_count, has_producer


def check_replicated_batches(
    headers: list[BatchHeader], log_end_offset: int, partition_name: str
) -> int:
    """The batches a follower fetched keep the leader's offsets: the first must start at or
    after the follower's log end and each after the previous one's last offset; returns the
    offset after the last one (the new log end).

    Gaps are allowed (Kafka's rule): a leader whose log cleaner removed records serves the
    surviving batches at their own offsets, so the first batch may start past the log end and
    consecutive batches need not be contiguous. An offset below the log end is
    OFFSET_OUT_OF_RANGE (replication truncates to a common point before appending); offsets
    that do not increase within the payload are INVALID_RECORD.
    """
    first = headers[0].base_offset
    if first < log_end_offset:
        raise OffsetOutOfRangeError(
            f"replicated batch at offset {first} is below the log end {log_end_offset} of "
            f"{partition_name}"
        )
    expected = first
    for header in headers:
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise InvalidRecordError(
                f"replicated batch at offset {header.base_offset} does not follow offset "
                f"{expected - 1} of {partition_name}: offsets out of order"
            )
        expected = header.base_offset + header.last_offset_delta + 1
    return expected
