"""One compaction pass over one log: dirty-section measurement, offset map, segment rewrite.

Terms (Kafka's): the *clean* section runs from the log start to the *first dirty offset*
(the cleaner checkpoint), the *dirty* section from there to the *first uncleanable offset*:
the active segment's base, the last stable offset, or the first segment holding a record
younger than ``min.compaction.lag.ms``, whichever comes first (cut at segment ends).

A pass (:func:`clean_log`):

1. builds the offset map — key → offset of its latest record — over the dirty section
   (stopping at a segment end once ``max_map_entries`` keys are mapped: the map end);
2. rewrites every inactive segment from the log start up to the map end, grouped into
   runs that fit ``segment.bytes`` / ``segment.index.bytes`` / a 32-bit relative offset,
   keeping a record only if it is the latest of its key (a key the map does not know is the
   latest already). Batches keep their base offset, last offset delta (so the producer's
   last sequence survives), producer id / epoch / base sequence, partition leader epoch,
   codec and timestamp type; records keep offsets and timestamps. A batch left without
   records disappears, unless it is the last data batch of a live idempotent producer (kept
   empty, as Kafka does, so producer state rebuilt from the log still knows the producer).
   Records without a key are removed (counted as invalid). Transactions: see below.
3. swaps each rewritten group in through :mod:`strom.storage.swap` and
   :meth:`Log.replace_segments` (groups whose bytes did not change are not rewritten).

Steps 1 and 2 (reading, decoding, filtering, re-encoding, writing ``<base>.*.cleaned``) run
through a :class:`PassRunner` on plain picklable work items (:class:`MapTask`,
:class:`GroupTask`): the cleaner's worker process (:mod:`strom.storage.cleaner_worker`,
which reads the segments by path) or, as a fallback, :class:`InThreadRunner` in the calling
thread. Step 3 always runs in the broker process, under the log's lock.

Tombstones (null values) follow KIP-534: the first pass that keeps one stamps its batch with
a delete horizon (attribute bit 6 set, ``base_timestamp`` = now + ``delete.retention.ms``,
record timestamp deltas rebased so every record keeps its timestamp); a later pass removes
the tombstone once now >= the horizon. A horizon lives in the batch, so it survives merges.

Transactions (Kafka's rules, :mod:`strom.storage.cleaner_txn`): the cleanable range ends at
the last stable offset, so every transaction with data in it is decided. The aborted ones
come from the transaction indexes (:meth:`Log.aborted_transactions`): their batches never
enter the offset map and are removed (emptied if one is a live producer's last batch), and
committed transactional records compact like any other. An abort marker stays, with its
transaction-index entry (written to the cleaned segment's ``.txnindex``), while data of its
transaction remains; a commit marker while its transaction's data remains; then a marker
gets a delete horizon (``delete.retention.ms``, like a tombstone) and a later pass removes it,
unless it is the last batch of a live producer whose last write was a marker (kept, emptied,
so the producer's epoch survives for fencing).

A pass reads only inactive segments (``pread``; immutable except through the cleaner,
retention and truncation, which the swap validates against) and writes only its own files.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from strom.common.errors import StromError
from strom.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    crc32c,
    parse_header,
)
from strom.protocol.records.compression import compress
from strom.protocol.records.control import ControlType, control_type_of
from strom.protocol.records.reader import decode_records
from strom.protocol.records.record import Record, encode_record
from strom.storage.cleaner_txn import TxnCleaning
from strom.storage.files import TXN_INDEX_SUFFIX, read_fully
from strom.storage.log import CleanerView, Log, LogSettings
from strom.storage.segment import MAX_RELATIVE_OFFSET, LogSegment, iter_headers
from strom.storage.swap import (
    CLEANED_SUFFIX,
    discard_swap,
    finish_swap,
    prepare_swap,
    write_range_file,
)
from strom.storage.txn_index import AbortedTxn

log = logging.getLogger("strom.storage.compaction")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")
WRITE_CHUNK = 1 << 20
#: Groups are handed to the runner in batches of up to this much input (at least one group):
#: fewer round trips to the worker process, bounded disk for ``.cleaned`` files awaiting swap.
GROUP_BATCH_BYTES = 32 << 20


class Pacer:
    """Paces a pass so it does not starve the event loop.

    * GIL hand-off: a CPU-bound thread keeps the GIL for the whole switch interval (5 ms)
      each time the event loop gives it up for a syscall, so every ``pwrite`` / ``send`` of
      the loop would wait up to 5 ms (measured: produce fell from ~95 to ~3 MB/s). The pass
      therefore sleeps ``yield_s`` every ``yield_interval_s`` of work (~10 % of its speed).
    * Optional I/O cap (Kafka's ``log.cleaner.io.max.bytes.per.second``).
    """

    def __init__(self, bytes_per_second: float | None = None, *,
                 yield_interval_s: float = 0.0005, yield_s: float = 0.00005) -> None:
        self.rate = bytes_per_second
        self.yield_interval_s = yield_interval_s
        self.yield_s = yield_s
        self._start = self._last_yield = time.monotonic()
        self._bytes = 0.0

    def account(self, nbytes: int) -> None:
        now = time.monotonic()
        if self.rate:
            self._bytes += nbytes
            ahead = self._bytes / self.rate - (now - self._start)
            if ahead > 0.001:
                time.sleep(ahead)
                self._last_yield = now = time.monotonic()
            if self._bytes > self.rate * 10:  # a fresh window now and then: no long bursts
                self._start, self._bytes = now, 0.0
        if self.yield_interval_s and now - self._last_yield >= self.yield_interval_s:
            time.sleep(self.yield_s)
            self._last_yield = time.monotonic()


class CleaningAborted(StromError):
    """The log was truncated, closed or deleted during the pass; its work is dropped."""


@dataclass(slots=True, frozen=True)
class DirtyRange:
    """How much of a log is dirty, measured from a :class:`CleanerView`."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool  # max.compaction.lag.ms exceeded by the oldest dirty record
    dirty_segments: tuple[LogSegment, ...]

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def eligible(self, min_ratio: float) -> bool:
        return self.dirty_bytes > 0 and (self.forced or self.ratio >= min_ratio)


@dataclass(slots=True)
class PassResult:
    """What one pass did. ``end_offset`` is the next first dirty offset when ``completed``."""

    first_dirty: int
    end_offset: int
    completed: bool = False
    bytes_read: int = 0  # map building and rewriting both count
    input_bytes: int = 0  # size of the segments the pass went through (clean + dirty)
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_replaced: int = 0
    groups_swapped: int = 0
    map_size: int = 0
    changed_groups: list[int] = field(default_factory=list)


def segment_ends(view: CleanerView) -> list[int]:
    """The end of each inactive segment: the next segment's base (gaps count as inside)."""
    segments = view.segments
    return [segments[i + 1].base_offset for i in range(len(segments) - 1)] + (
        [view.active_base_offset] if segments else []
    )


def first_dirty_offset(view: CleanerView, checkpoint: int | None) -> int:
    """The checkpoint, reset to the log start when it is below it or beyond the log."""
    if checkpoint is None or checkpoint < view.log_start_offset:
        return view.log_start_offset
    if checkpoint > view.active_base_offset:
        return view.log_start_offset
    return checkpoint


def measure(
    view: CleanerView, checkpoint: int | None, settings: LogSettings, now_ms: int
) -> DirtyRange:
    """Kafka's cleanable range and dirty ratio (segment granularity)."""
    first_dirty = first_dirty_offset(view, checkpoint)
    limit = min(view.active_base_offset, view.last_stable_offset)
    min_lag = settings.min_compaction_lag_ms
    clean_bytes = dirty_bytes = 0
    dirty: list[LogSegment] = []
    uncleanable = first_dirty
    stopped = False
    for segment, end in zip(view.segments, segment_ends(view), strict=True):
        if end <= first_dirty:
            clean_bytes += segment.size
            continue
        if stopped or end > limit or (
            min_lag > 0 and segment.size and segment.largest_timestamp() > now_ms - min_lag
        ):
            stopped = True
            continue
        dirty.append(segment)
        dirty_bytes += segment.size
        uncleanable = end
    forced = False
    if dirty and settings.max_compaction_lag_ms < 2**62:
        head = dirty[0]
        earliest = head.first_batch_timestamp
        if earliest < 0:
            earliest = head.largest_timestamp()
        forced = now_ms - earliest > settings.max_compaction_lag_ms
    return DirtyRange(first_dirty, uncleanable, clean_bytes, dirty_bytes, forced, tuple(dirty))


def _check(plog: Log, view: CleanerView, pacer: Pacer | None, nbytes: int) -> None:
    """Between batches: stop if the log changed under the pass; respect the I/O cap."""
    if plog.cleaning_invalidated(view.generation):
        raise CleaningAborted(f"cleaning of {plog!r} aborted")
    if pacer is not None:
        pacer.account(nbytes)


#: Called before each batch a pass reads with its size: raises to stop the pass, paces it.
Check = Callable[[int], None]


# -- a pass's work items: plain picklable data, so a worker process can run them ---------
@dataclass(slots=True, frozen=True)
class SegmentSpec:
    """An inactive segment as a pass reads it: its ``.log`` file, the bytes to read (its size
    when the pass began) and its end (the next segment's base offset)."""

    path: str
    base_offset: int
    size: int
    end: int


@dataclass(slots=True, frozen=True)
class MapTask:
    """Step 1 (the offset map over ``dirty``) and the inputs of step 2's filter.

    ``aborted``: the aborted transactions overlapping the dirty range (kept out of the map);
    ``marker_only_producers``: :attr:`CleanerView.marker_only_producers`."""

    dirty: tuple[SegmentSpec, ...]
    first_dirty: int
    max_entries: int
    producer_last_offsets: dict[int, int]
    now_ms: int
    delete_retention_ms: int
    aborted: tuple[AbortedTxn, ...] = ()
    marker_only_producers: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class MapResult:
    end: int  # the map end: first offset of the next pass's dirty section
    size: int  # keys mapped
    bytes_read: int


@dataclass(slots=True, frozen=True)
class GroupTask:
    """Step 2 for one group: rewrite ``segments`` into ``<base>.*.cleaned`` in ``directory``;
    ``aborted``: the aborted transactions overlapping the group's offsets."""

    directory: str
    segments: tuple[SegmentSpec, ...]
    index_interval_bytes: int
    max_index_bytes: int
    now_ms: int
    aborted: tuple[AbortedTxn, ...] = ()

    @property
    def base_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def end(self) -> int:
        return self.segments[-1].end


@dataclass(slots=True)
class GroupResult:
    """``changed``: the ``.cleaned`` files and range file are written, waiting for the swap
    (otherwise nothing is left on disk)."""

    changed: bool = False
    input_bytes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0


def segment_spec(segment: LogSegment, end: int) -> SegmentSpec:
    return SegmentSpec(str(segment.log_path), segment.base_offset, segment.size, end)


class SegmentReader(Protocol):
    """What a pass reads of a segment: :class:`LogSegment` or :class:`SegmentFile`."""

    @property
    def base_offset(self) -> int: ...

    def headers(self) -> Iterator[BatchHeader]: ...

    def read_bytes(self, position: int, size: int) -> bytes: ...


class SegmentChangedError(StromError):
    """A segment file a pass reads by path is gone or shorter than when the pass began."""


class SegmentFile:
    """A segment's ``.log`` opened by path (in the worker process), read up to ``spec.size``."""

    def __init__(self, spec: SegmentSpec) -> None:
        self.base_offset = spec.base_offset
        self.size = spec.size
        try:
            self._fd = os.open(spec.path, os.O_RDONLY)
        except FileNotFoundError:
            raise SegmentChangedError(f"{spec.path} is gone") from None
        if os.fstat(self._fd).st_size < spec.size:
            os.close(self._fd)
            raise SegmentChangedError(f"{spec.path} is shorter than {spec.size} bytes")

    def headers(self) -> Iterator[BatchHeader]:
        return iter_headers(self._fd, 0, self.size)

    def read_bytes(self, position: int, size: int) -> bytes:
        return read_fully(self._fd, size, position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_each(specs: Iterable[SegmentSpec]) -> Iterator[tuple[SegmentFile, int]]:
    """Each segment opened in turn (closed when the next one is asked for), with its end."""
    for spec in specs:
        segment = SegmentFile(spec)
        try:
            yield segment, spec.end
        finally:
            segment.close()


def build_offset_map(
    segments: Iterable[tuple[SegmentReader, int]], first_dirty: int, max_entries: int,
    check: Check, aborted: Iterable[AbortedTxn] = (),
) -> tuple[dict[bytes, int], int, int]:
    """key → latest offset over the dirty ``(segment, end)`` pairs, leaving out the records
    of the ``aborted`` transactions; returns the map, its end offset (a segment end: the map
    stops after the segment that filled it) and the bytes read."""
    offset_map: dict[bytes, int] = {}
    end = first_dirty
    bytes_read = 0
    txn = TxnCleaning(aborted)
    for segment, segment_end in segments:
        for header in segment.headers():
            check(header.size)
            if header.last_offset < first_dirty:
                continue
            if header.is_control:
                data = segment.read_bytes(header.position, header.size)
                header.position = 0
                txn.on_control(header, control_type(data, header))
                continue
            if header.is_transactional and txn.on_data_batch(header):
                continue  # aborted: its records must never hide committed ones
            data = segment.read_bytes(header.position, header.size)
            bytes_read += header.size
            header.position = 0
            for record in decode_records(data, header):
                if record.key is not None and record.offset >= first_dirty:
                    offset_map[record.key] = record.offset
        end = segment_end
        if len(offset_map) >= max_entries:
            break
    return offset_map, end, bytes_read


def control_type(data: bytes, header: BatchHeader) -> ControlType | None:
    """The type of the control batch ``header`` describes in ``data``; None if it holds no
    record (an earlier pass emptied it)."""
    records = decode_records(data, header) if header.records_count else []
    return _control_type(records)


def _control_type(records: list[Record]) -> ControlType | None:
    if not records:
        return None
    try:
        return control_type_of(records[0].key)
    except StromError:
        return ControlType.UNKNOWN  # not a marker we know: kept as it is


@dataclass(slots=True)
class Filter:
    """Per-pass inputs and state of :meth:`filter_batch` (batches come in offset order)."""

    offset_map: dict[bytes, int]
    producer_last_offsets: dict[int, int]
    now_ms: int
    delete_retention_ms: int
    marker_only_producers: dict[int, int] = field(default_factory=dict)
    txn: TxnCleaning = field(default_factory=TxnCleaning)
    records_removed: int = 0
    tombstones_removed: int = 0

    @classmethod
    def for_pass(cls, task: MapTask, offset_map: dict[bytes, int]) -> Filter:
        return cls(offset_map, task.producer_last_offsets, task.now_ms,
                   task.delete_retention_ms, task.marker_only_producers)

    def _last_of_producer(self, header: BatchHeader) -> bool:
        """A live producer's last data batch, or the last marker of a producer whose last
        write was a marker (same epoch): kept, possibly emptied, for producer state."""
        pid = header.producer_id
        if pid < 0:
            return False
        if header.is_control:
            return self.marker_only_producers.get(pid) == header.producer_epoch
        return self.producer_last_offsets.get(pid) == header.last_offset

    def filter_batch(self, data: bytes, header: BatchHeader) -> bytes | None:
        """The batch to write in place of ``data`` (itself when unchanged), or None."""
        if header.is_control:
            return self._filter_control(data, header)
        if self.txn.on_data_batch(header):  # an aborted transaction's: every record goes
            self.records_removed += header.records_count
            if self._last_of_producer(header):
                return data if not header.records_count else empty_batch(header)
            return None
        records = decode_records(data, header) if header.records_count else []
        has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
        horizon = header.base_timestamp if has_horizon else None
        keep: list[Record] = []
        needs_horizon = False
        latest_of = self.offset_map.get
        for record in records:
            key = record.key
            if key is None:
                continue
            latest = latest_of(key)
            if latest is not None and record.offset < latest:
                continue
            if record.value is None:
                if horizon is not None and self.now_ms >= horizon:
                    self.tombstones_removed += 1
                    continue
                if horizon is None:
                    needs_horizon = True
            keep.append(record)
        removed = len(records) - len(keep)
        self.records_removed += removed
        if not keep:
            if self._last_of_producer(header):
                return data if not records else empty_batch(header)
            return None
        if not removed and not needs_horizon:
            return data
        if needs_horizon:
            horizon = self.now_ms + self.delete_retention_ms
        return encode_batch(header, keep, horizon)

    def _filter_control(self, data: bytes, header: BatchHeader) -> bytes | None:
        """A marker stays while its transaction has data; then it gets a delete horizon, and
        goes (emptied if it is a producer's last) once the horizon has passed."""
        records = decode_records(data, header) if header.records_count else []
        if not self.txn.on_control(header, _control_type(records)):
            return data
        last = self._last_of_producer(header)
        if not records:
            return data if last else None
        if not header.attributes & DELETE_HORIZON_MASK:
            return encode_batch(header, records, self.now_ms + self.delete_retention_ms)
        if self.now_ms < header.base_timestamp:
            return data
        self.records_removed += len(records)
        return empty_batch(header) if last else None


def encode_batch(header: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
    """Rebuild ``header``'s batch with ``records`` (a subset of its own), offsets and
    timestamps preserved; with a ``horizon`` the batch carries it as its delete horizon."""
    base_offset = header.base_offset
    base_ts = header.base_timestamp if horizon is None else horizon
    payload = b"".join([
        encode_record(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
        for r in records
    ])
    codec = header.compression
    if codec:
        payload = compress(codec, payload)
    attributes = header.attributes
    if horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    if header.is_log_append_time:
        max_ts = header.max_timestamp
    else:
        max_ts = max(r.timestamp for r in records)
    return _pack(header, attributes, base_ts, max_ts, len(records), payload)


def empty_batch(header: BatchHeader) -> bytes:
    """The header alone (no records, no codec, no delete horizon): keeps a producer's last
    offset / sequence (or, for a marker, epoch)."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    return _pack(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _pack(header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int,
          payload: bytes) -> bytes:
    out = bytearray(HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        out, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch, CURRENT_MAGIC, 0, attributes, header.last_offset_delta,
        base_ts, max_ts, header.producer_id, header.producer_epoch, header.base_sequence, count,
    )
    out[HEADER_SIZE:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def group_segments(
    segments: list[LogSegment], ends: list[int], max_bytes: int, max_index_bytes: int
) -> list[list[LogSegment]]:
    """Consecutive runs whose data fits one segment (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index_bytes = segments[i].offset_index.size_in_bytes
        j = i + 1
        while j < len(segments):
            nxt = segments[j]
            if (size + nxt.size > max_bytes
                    or index_bytes + nxt.offset_index.size_in_bytes > max_index_bytes
                    or ends[j] - 1 - group[0].base_offset > MAX_RELATIVE_OFFSET):
                break
            group.append(nxt)
            size += nxt.size
            index_bytes += nxt.offset_index.size_in_bytes
            j += 1
        groups.append(group)
        i = j
    return groups


def write_group(
    task: GroupTask, segments: Sequence[SegmentReader], filt: Filter, check: Check
) -> GroupResult:
    """Step 2 for one group: write ``<base>.log/.index/.timeindex/.range.cleaned`` (fsynced)
    if filtering changes its bytes; on an error or no change, nothing is left on disk."""
    directory = Path(task.directory)
    base = task.base_offset
    result = GroupResult(input_bytes=sum(spec.size for spec in task.segments))
    removed, tombstones = filt.records_removed, filt.tombstones_removed
    cleaned = LogSegment.create(
        directory, base, index_interval_bytes=task.index_interval_bytes,
        max_index_bytes=task.max_index_bytes, now_ms=task.now_ms, name_suffix=CLEANED_SUFFIX,
    )
    changed = len(segments) > 1
    filt.txn.add_aborted(task.aborted)
    try:
        chunk = bytearray()
        headers: list[BatchHeader] = []
        for segment in segments:
            for header in segment.headers():
                check(header.size)
                data = segment.read_bytes(header.position, header.size)
                result.bytes_read += header.size
                header.position = 0
                out = filt.filter_batch(data, header)
                if out is not data:
                    changed = True
                if out is None:
                    continue
                new_header = parse_header(out)
                new_header.position = len(chunk)
                chunk += out
                headers.append(new_header)
                if len(chunk) >= WRITE_CHUNK:
                    cleaned.append(memoryview(chunk), headers)
                    chunk, headers = bytearray(), []
        retained = filt.txn.take_retained()
        if changed:
            if headers:
                cleaned.append(memoryview(chunk), headers)
            cleaned.on_inactive()
            # Written even empty when the first segment has one: the swap's rename must
            # replace it (swap.py).
            first_index = Path(task.segments[0].path).with_suffix(TXN_INDEX_SUFFIX)
            cleaned.txn_index.replace_all(retained, create=first_index.exists())
            cleaned.flush()
            cleaned.close()
            write_range_file(directory, base, task.end)
            result.bytes_written = cleaned.size
            result.changed = True
    finally:
        cleaned.close()
        if not result.changed:
            discard_swap(directory, base)
    result.records_removed = filt.records_removed - removed
    result.tombstones_removed = filt.tombstones_removed - tombstones
    return result


def discard_written(tasks: Sequence[GroupTask], results: Sequence[GroupResult]) -> None:
    """Remove the ``.cleaned`` files of the groups of a batch that were written."""
    for task, result in zip(tasks, results, strict=False):
        if result.changed:
            discard_swap(Path(task.directory), task.base_offset)


def batch_groups(groups: list[list[LogSegment]], max_bytes: int) -> list[list[list[LogSegment]]]:
    """Consecutive groups, at most ``max_bytes`` of input per batch (at least one group)."""
    batches: list[list[list[LogSegment]]] = []
    size = 0
    for group in groups:
        group_size = sum(segment.size for segment in group)
        if batches and size + group_size <= max_bytes:
            batches[-1].append(group)
            size += group_size
        else:
            batches.append([group])
            size = group_size
    return batches


def swap_group(plog: Log, view: CleanerView, group: list[LogSegment], base: int) -> None:
    """Step 3: swap the group's ``.cleaned`` files in (in the broker process); raises
    CleaningAborted (the files removed) if the log changed under the pass."""
    directory = plog.directory
    swapped = False
    try:
        _check(plog, view, None, 0)
        prepare_swap(directory, base)
        if plog.replace_segments(group, base, view.generation) is None:
            raise CleaningAborted(f"cleaning of {plog!r} aborted at the swap of segment {base}")
        swapped = True
        finish_swap(directory, base)
    finally:
        if not swapped:
            discard_swap(directory, base)


class PassRunner(Protocol):
    """Runs steps 1 and 2 of one pass. ``segments`` are the live segments the task's specs
    describe (same order). Raises CleaningAborted when the pass must stop."""

    def build_map(self, task: MapTask, segments: Sequence[LogSegment]) -> MapResult: ...

    def clean_groups(
        self, tasks: Sequence[GroupTask], groups: Sequence[Sequence[LogSegment]]
    ) -> list[GroupResult]:
        """Step 2 for consecutive groups; on an error, no ``.cleaned`` file is left."""
        ...

    def end_pass(self) -> None: ...


class InThreadRunner:
    """Steps 1 and 2 in the calling thread, through the live segments' descriptors (the
    fallback when the worker process cannot start; paced by ``pacer``)."""

    def __init__(self, plog: Log, view: CleanerView, pacer: Pacer | None = None) -> None:
        self.plog = plog
        self.view = view
        self.pacer = pacer
        self._filter: Filter | None = None

    def _check(self, nbytes: int) -> None:
        _check(self.plog, self.view, self.pacer, nbytes)

    def build_map(self, task: MapTask, segments: Sequence[LogSegment]) -> MapResult:
        offset_map, end, bytes_read = build_offset_map(
            zip(segments, (spec.end for spec in task.dirty), strict=True), task.first_dirty,
            task.max_entries, self._check, task.aborted)
        self._filter = Filter.for_pass(task, offset_map)
        return MapResult(end, len(offset_map), bytes_read)

    def clean_groups(
        self, tasks: Sequence[GroupTask], groups: Sequence[Sequence[LogSegment]]
    ) -> list[GroupResult]:
        assert self._filter is not None, "build_map first"
        results: list[GroupResult] = []
        try:
            for task, group in zip(tasks, groups, strict=True):
                results.append(write_group(task, group, self._filter, self._check))
        except BaseException:
            discard_written(tasks, results)
            raise
        return results

    def end_pass(self) -> None:
        self._filter = None


def _swap_batch(
    plog: Log, view: CleanerView, batch: list[list[LogSegment]], tasks: list[GroupTask],
    outcomes: list[GroupResult], result: PassResult,
) -> None:
    """Swap a batch's written groups in, in order; on an abort the rest are discarded."""
    done = 0
    try:
        for group, task, outcome in zip(batch, tasks, outcomes, strict=True):
            done += 1
            if not outcome.changed:
                continue
            swap_group(plog, view, group, task.base_offset)
            result.bytes_written += outcome.bytes_written
            result.segments_replaced += len(group)
            result.groups_swapped += 1
            result.changed_groups.append(task.base_offset)
    finally:
        discard_written(tasks[done:], outcomes[done:])


def clean_log(
    plog: Log,
    view: CleanerView,
    dirty: DirtyRange,
    now_ms: int,
    *,
    max_map_entries: int,
    pacer: Pacer | None = None,
    runner: PassRunner | None = None,
) -> PassResult:
    """Run one pass (module docstring) through ``runner`` (default: in this thread, paced by
    ``pacer``). Raises CleaningAborted if the log changed under it; groups swapped before
    that stay swapped (each swap is complete on its own)."""
    if runner is None:
        runner = InThreadRunner(plog, view, pacer)
    result = PassResult(dirty.first_dirty, dirty.first_dirty)
    settings = plog.settings
    ends = segment_ends(view)
    end_of = dict(zip(map(id, view.segments), ends, strict=True))
    task = MapTask(
        tuple(segment_spec(s, end_of[id(s)]) for s in dirty.dirty_segments), dirty.first_dirty,
        max_map_entries, dict(view.producer_last_offsets), now_ms, settings.delete_retention_ms,
        tuple(plog.aborted_transactions(dirty.first_dirty, dirty.first_uncleanable)),
        dict(view.marker_only_producers),
    )
    try:
        mapped = runner.build_map(task, dirty.dirty_segments)
        result.bytes_read += mapped.bytes_read
        result.map_size = mapped.size
        count = sum(1 for end in ends if end <= mapped.end)
        segments = view.segments[:count]
        groups = group_segments(segments, ends[:count], settings.segment_bytes,
                                settings.max_index_bytes)
        for batch in batch_groups(groups, GROUP_BATCH_BYTES):
            _check(plog, view, None, 0)
            tasks = [GroupTask(str(plog.directory),
                               tuple(segment_spec(s, end_of[id(s)]) for s in group),
                               settings.index_interval_bytes, settings.max_index_bytes, now_ms,
                               tuple(plog.aborted_transactions(group[0].base_offset,
                                                               end_of[id(group[-1])])))
                     for group in batch]
            outcomes = runner.clean_groups(tasks, batch)
            for done in outcomes:
                result.input_bytes += done.input_bytes
                result.bytes_read += done.bytes_read
                result.records_removed += done.records_removed
                result.tombstones_removed += done.tombstones_removed
            _swap_batch(plog, view, batch, tasks, outcomes, result)
    finally:
        runner.end_pass()
    result.end_offset = mapped.end
    result.completed = True
    return result
