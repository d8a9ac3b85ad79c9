"""Finding records by time in a log's segments (ListOffsets by timestamp and max timestamp).

Pure functions over the segment list, oldest first, and the log start: the time index narrows
the search, then only the one batch that can hold the answer is decoded.
"""

from __future__ import annotations

import dataclasses

from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.reader import batch_offsets_and_timestamps
from strom.storage.segment import LogSegment


def offset_for_timestamp(
    segments: list[LogSegment], log_start_offset: int, timestamp: int
) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) of the first record at or after the log start
    whose timestamp is >= ``timestamp``; None if there is none."""
    start = log_start_offset
    for segment in segments:
        if segment.next_offset <= start or segment.max_timestamp < timestamp:
            continue
        # Every record at or before a strictly smaller time-index entry is too old.
        entry = segment.time_index.lookup(timestamp, strict=True)
        from_offset = max(start, entry[1] + 1 if entry else segment.base_offset)
        found = segment.translate_offset(from_offset)
        if found is None:
            continue
        for header in segment.headers(found[0]):
            if header.max_timestamp < timestamp or header.last_offset < start:
                continue
            for offset, ts in record_timestamps(segment, header):
                if offset >= start and ts >= timestamp:
                    return offset, ts, header.partition_leader_epoch
    return None


def max_timestamp(
    segments: list[LogSegment], log_start_offset: int
) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) of the earliest record holding the largest
    timestamp; None for an empty log or one without timestamps."""
    best: LogSegment | None = None
    for segment in segments:
        if segment.next_offset <= log_start_offset:
            continue
        if segment.max_timestamp >= 0 and (
            best is None or segment.max_timestamp > best.max_timestamp
        ):
            best = segment
    if best is None:
        return None
    found = best.translate_offset(best.offset_of_max_timestamp)
    if found is None:
        return None
    header = found[1]
    for offset, ts in record_timestamps(best, header):
        if ts == header.max_timestamp:
            return offset, ts, header.partition_leader_epoch
    return header.base_offset, header.max_timestamp, header.partition_leader_epoch


def record_timestamps(segment: LogSegment, header: BatchHeader) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of a stored batch (decompressing if needed)."""
    batch = segment.read_bytes(header.position, header.size)
    return batch_offsets_and_timestamps(batch, dataclasses.replace(header, position=0))
