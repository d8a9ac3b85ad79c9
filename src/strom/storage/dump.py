"""Offline inspection of segment and index files (for ``strom dump-log``); pure functions.

These read files directly and never modify them, so they are safe on a live data directory
(results may then be a little stale) and on copies of Kafka's own log directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.errors import CorruptMessageError
from strom.protocol.records.batch import ATTRIBUTES_OFFSET, BatchHeader, crc32c
from strom.protocol.records.compression import codec_name
from strom.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptIndexError,
    offset_from_name,
    read_fully,
)
from strom.storage.offset_index import OffsetIndex
from strom.storage.segment import iter_headers
from strom.storage.time_index import TimeIndex


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One record batch of a segment file."""

    base_offset: int
    last_offset: int
    position: int
    size: int
    crc_valid: bool
    record_count: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    codec: str
    is_transactional: bool
    is_control: bool
    is_log_append_time: bool


@dataclass(frozen=True, slots=True)
class SegmentDump:
    """Every readable batch of a ``.log`` file and where (and why) reading stopped."""

    path: Path
    base_offset: int
    file_size: int
    batches: list[BatchInfo]
    valid_bytes: int  # length of the prefix of whole batches with good CRCs
    problem: str | None  # why the scan stopped before the end of the file, if it did


@dataclass(frozen=True, slots=True)
class IndexEntry:
    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    timestamp: int
    offset: int


@dataclass(slots=True)
class IndexCheck:
    """Result of verifying an index against its segment; ``problems`` empty means sound."""

    path: Path
    entries: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def base_offset_of(path: Path) -> int:
    """The base offset encoded in a segment / index file name."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        offset = offset_from_name(path.name, suffix)
        if offset is not None:
            return offset
    raise ValueError(f"{path.name} is not a segment or index file name")


def _info(header: BatchHeader, crc_valid: bool) -> BatchInfo:
    return BatchInfo(
        header.base_offset, header.last_offset, header.position, header.size, crc_valid,
        header.records_count, header.base_timestamp, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, header.partition_leader_epoch,
        _codec(header.compression),
        header.is_transactional, header.is_control, header.is_log_append_time,
    )


def _codec(codec: int) -> str:
    try:
        return codec_name(codec)
    except Exception:  # ids 5-7 are not codecs; a dump shows them rather than failing
        return f"unknown({codec})"


def iter_segment_batches(path: Path, *, check_crc: bool = True) -> Iterator[BatchInfo]:
    """The batches of a ``.log`` file in order; stops quietly at a structurally bad batch
    (use :func:`dump_segment` to learn why)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        try:
            for header in iter_headers(fd, 0, size):
                yield _info(header, _crc_ok(fd, header) if check_crc else True)
        except CorruptMessageError:
            return
    finally:
        os.close(fd)


def _crc_ok(fd: int, header: BatchHeader) -> bool:
    data = read_fully(fd, header.size - ATTRIBUTES_OFFSET, header.position + ATTRIBUTES_OFFSET)
    return crc32c(data) == header.crc


def dump_segment(path: Path) -> SegmentDump:
    """Every batch of a ``.log`` file with CRC status, the valid prefix and any problem."""
    fd = os.open(path, os.O_RDONLY)
    batches: list[BatchInfo] = []
    problem: str | None = None
    valid = 0
    try:
        size = os.fstat(fd).st_size
        try:
            for header in iter_headers(fd, 0, size):
                info = _info(header, _crc_ok(fd, header))
                batches.append(info)
                if problem is None:
                    if info.crc_valid:
                        valid = header.position + header.size
                    else:
                        problem = f"CRC mismatch in the batch at position {header.position}"
        except CorruptMessageError as exc:
            problem = problem or str(exc)
    finally:
        os.close(fd)
    return SegmentDump(path, base_offset_of(path), size, batches, valid, problem)


def offset_index_entries(path: Path) -> list[IndexEntry]:
    """Raw entries of a ``.index`` file (no sanity check; a trailing partial entry is ignored)."""
    base = base_offset_of(path)
    return [IndexEntry(base + rel, pos)
            for rel, pos in OffsetIndex.raw_entries(path.read_bytes())]


def time_index_entries(path: Path) -> list[TimeIndexEntry]:
    """Raw entries of a ``.timeindex`` file (no sanity check; a partial tail is ignored)."""
    base = base_offset_of(path)
    return [TimeIndexEntry(ts, base + rel)
            for ts, rel in TimeIndex.raw_entries(path.read_bytes())]


def _batches_by_position(log_path: Path) -> dict[int, BatchInfo]:
    return {b.position: b for b in iter_segment_batches(log_path, check_crc=False)}


def verify_offset_index(log_path: Path, index_path: Path | None = None) -> IndexCheck:
    """Check every ``.index`` entry: structure (as at load) and that it points at the start of
    a batch whose last offset is the entry's offset."""
    index_path = index_path or log_path.with_suffix(INDEX_SUFFIX)
    base = base_offset_of(log_path)
    entries = offset_index_entries(index_path) if index_path.exists() else []
    check = IndexCheck(index_path, len(entries))
    if not index_path.exists():
        check.problems.append("index file is missing")
        return check
    try:
        OffsetIndex.load(index_path, base, 2**31 - 1, log_path.stat().st_size).close()
    except CorruptIndexError as exc:
        check.problems.append(str(exc))
    batches = _batches_by_position(log_path)
    for entry in entries:
        batch = batches.get(entry.position)
        if batch is None:
            check.problems.append(f"entry ({entry.offset}, {entry.position}) is not a batch start")
        elif batch.last_offset != entry.offset:
            check.problems.append(
                f"entry ({entry.offset}, {entry.position}) points at a batch ending at "
                f"{batch.last_offset}"
            )
    return check


def verify_time_index(log_path: Path, index_path: Path | None = None) -> IndexCheck:
    """Check every ``.timeindex`` entry: structure, and that its offset ends the batch that
    holds the largest timestamp so far and its timestamp is that timestamp."""
    index_path = index_path or log_path.with_suffix(TIME_INDEX_SUFFIX)
    base = base_offset_of(log_path)
    if not index_path.exists():
        return IndexCheck(index_path, 0, ["time index file is missing"])
    entries = time_index_entries(index_path)
    check = IndexCheck(index_path, len(entries))
    try:
        TimeIndex.load(index_path, base, 2**31 - 1).close()
    except CorruptIndexError as exc:
        check.problems.append(str(exc))
    running = -1
    max_so_far: dict[int, tuple[int, int]] = {}  # batch last offset -> (max ts so far, its batch)
    holder = -1
    for batch in iter_segment_batches(log_path, check_crc=False):
        if batch.max_timestamp > running:
            running, holder = batch.max_timestamp, batch.last_offset
        max_so_far[batch.last_offset] = (running, holder)
    for entry in entries:
        known = max_so_far.get(entry.offset)
        if known is None:
            check.problems.append(f"entry ({entry.timestamp}, {entry.offset}) is not a batch end")
        elif known != (entry.timestamp, entry.offset):
            check.problems.append(
                f"entry ({entry.timestamp}, {entry.offset}) disagrees with the batches: the max "
                f"timestamp up to there is {known[0]} at offset {known[1]}"
            )
    return check
