"""Checks a payload passes before a log appends it (all before a byte is written).

Pure functions over the parsed batch headers (and, for compacted topics, the record keys):
the leader's checks (:func:`check_client_batches`, :func:`refuse_control_batches`,
:func:`require_keys`) and the follower's
(:func:`check_replicated_batches`). The producer-sequence checks live in
:mod:`strom.storage.producer_state`; offsets are assigned by :meth:`strom.storage.log.Log.append`.
"""

from __future__ import annotations

from strom.common.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from strom.protocol.records.batch import HEADER_SIZE, BatchHeader
from strom.protocol.records.reader import decode_records, records_have_null_key
from strom.storage.log_settings import LogSettings

NO_TIMESTAMP = -1


def check_client_batches(
    headers: list[BatchHeader], total: int, settings: LogSettings, now_ms: int
) -> tuple[int, bool]:
    """Header-level checks of a produce payload of ``total`` bytes holding ``headers``
    (at least one): sizes, record counts, timestamps against
    ``message.timestamp.{before,after}.max.ms`` (unless the topic uses LogAppendTime).

    Returns (record count, whether any batch carries a producer id). Records are not decoded.
    """
    if total > settings.segment_bytes:
        raise RecordListTooLargeError(
            f"{total} bytes of batches exceed segment.bytes {settings.segment_bytes}"
        )
    check_time = not settings.log_append_time
    earliest = now_ms - settings.before_max_ms
    latest = now_ms + settings.after_max_ms
    record_count = 0
    has_producer = False
    for header in headers:
        if header.records_count == 0:
            raise InvalidRecordError("record batch holds no records")
        if header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"record batch of {header.records_count} records has last offset delta "
                f"{header.last_offset_delta}"
            )
        if header.size > settings.max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {header.size} bytes exceeds max.message.bytes "
                f"{settings.max_message_bytes}"
            )
        if check_time:
            # Header-level check (first and max timestamp); records are not decoded.
            for ts in (header.base_timestamp, header.max_timestamp):
                if ts != NO_TIMESTAMP and not earliest <= ts <= latest:
                    raise InvalidTimestampError(
                        f"timestamp {ts} is out of the accepted range [{earliest}, {latest}]"
                    )
        record_count += header.records_count
        if header.producer_id >= 0:
            has_producer = True
    return record_count, has_producer


def refuse_control_batches(headers: list[BatchHeader], partition_name: str) -> None:
    """Only the transaction coordinator writes control batches (commit / abort markers); a
    client's produce holding one is refused with INVALID_RECORD, as Kafka's validator does
    for ``AppendOrigin.CLIENT``."""
    for header in headers:
        if header.is_control:
            raise InvalidRecordError(
                f"Clients are not allowed to write control records in topic partition "
                f"{partition_name}."
            )


def require_keys(buf: memoryview, headers: list[BatchHeader], partition_name: str) -> None:
    """Compacted topics keep the latest record per key: a record without one is refused
    (Kafka's rule; this is the one append path that looks at records)."""
    for header in headers:
        if header.is_control:
            continue
        if header.compression == 0:
            data = bytes(buf[header.position + HEADER_SIZE : header.position + header.size])
            keyless = records_have_null_key(data, header.records_count)
        else:
            keyless = any(r.key is None for r in decode_records(buf, header))
        if keyless:
            raise InvalidRecordError(
                "Compacted topic cannot accept message without key in topic partition "
                f"{partition_name}."
            )


def check_replicated_batches(
    headers: list[BatchHeader], log_end_offset: int, partition_name: str
) -> int:
    """The batches a follower fetched must start at its log end and be contiguous; returns
    the offset after the last one (the new log end)."""
    expected = log_end_offset
    for header in headers:
        if header.base_offset != expected:
            raise OffsetOutOfRangeError(
                f"replicated batch at offset {header.base_offset} does not follow offset "
                f"{expected - 1} of {partition_name}"
            )
        expected = header.base_offset + header.last_offset_delta + 1
    return expected
