"""One log segment: a ``.log`` file of record batches plus its offset and time indexes."""

from __future__ import annotations

import io
import logging
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Literal

from strom.common.errors import CorruptMessageError, KafkaError
from strom.protocol.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    parse_header,
    scan_valid_prefix,
)
from strom.protocol.records.control import EndTxnMarker, read_end_txn_marker
from strom.storage.file_pool import FileLease, FilePool, PooledFile, default_pool
from strom.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    CorruptIndexError,
    file_name,
    read_fully,
    unlink_quietly,
    write_fully,
)
from strom.storage.offset_index import OffsetIndex
from strom.storage.time_index import TimeIndex
from strom.storage.txn_index import TransactionIndex

log = logging.getLogger("strom.storage.segment")

MAX_RELATIVE_OFFSET = 2**31 - 1
SCAN_CHUNK = 8192
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_BOUNDARY_SCAN_LIMIT = 64  # headers read at most when cutting a read at a batch boundary

#: Reads smaller than this are returned as bytes rather than as a :class:`FileRegion`: the
#: network layer copies regions this small with ``pread`` anyway (sendfile is for larger
#: ones), so copying them at read time costs nothing more and releases the descriptor at once
#: — a fetch across thousands of partitions then pins no files. Larger reads are copied too
#: when the file pool is full of pinned files (bounded by the fetch's own size limits).
INLINE_READ_BYTES = 64 * 1024


@dataclass(slots=True)
class FileRegion:
    """``size`` bytes at ``position`` of an open segment file, sent with sendfile / pread.

    ``file`` is the segment's raw (unbuffered) file object; its seek position is never used
    by storage, so senders may move it (asyncio's sendfile does). ``lease`` pins the file in
    the :mod:`~strom.storage.file_pool` for as long as the region lives: its descriptor is not
    closed (by eviction, retention, truncation, a cleaner swap or a topic deletion) while a
    sender may still use it. Drop the region once its bytes are sent.
    """

    file: BinaryIO
    position: int
    size: int
    lease: FileLease | None = None


def iter_headers(fd: int, start: int, end: int, chunk: int = SCAN_CHUNK) -> Iterator[BatchHeader]:
    """Headers of the batches in ``[start, end)`` of a file, read with chunked ``os.pread``.

    Checks structure only (magic, length, batch inside ``end``), not CRCs; raises
    CorruptMessageError when the bytes at a batch start are not a batch. Each header's
    ``position`` is its absolute file position.
    """
    pos = start
    buf = b""
    buf_start = start
    while pos < end:
        rel = pos - buf_start
        if rel + HEADER_SIZE > len(buf):
            buf = read_fully(fd, min(max(chunk, HEADER_SIZE), end - pos), pos)
            buf_start = pos
            rel = 0
            if len(buf) < HEADER_SIZE:
                raise CorruptMessageError(f"truncated batch header at position {pos}")
        if buf[rel + MAGIC_OFFSET] != CURRENT_MAGIC:
            raise CorruptMessageError(f"bad magic {buf[rel + MAGIC_OFFSET]} at position {pos}")
        header = parse_header(buf, rel)
        header.position = pos
        if header.batch_length < _MIN_BATCH_LENGTH or pos + header.size > end:
            raise CorruptMessageError(f"bad batch length {header.batch_length} at position {pos}")
        yield header
        pos += header.size


_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_OFFSET = 23


def _find_batch(fd: int, start: int, end: int, offset: int) -> BatchHeader | None:
    """The header of the first batch in ``[start, end)`` whose last offset is >= ``offset``.

    The hot-path twin of :func:`iter_headers`: reads only base offset, length and last offset
    delta of the batches it skips, and parses one full header.
    """
    pos = start
    buf = b""
    buf_start = start
    unpack_head = _BASE_AND_LENGTH.unpack_from
    unpack_delta = _LAST_DELTA.unpack_from
    while pos < end:
        rel = pos - buf_start
        if rel + HEADER_SIZE > len(buf):
            buf = read_fully(fd, min(SCAN_CHUNK, end - pos), pos)
            buf_start = pos
            rel = 0
            if len(buf) < HEADER_SIZE:
                raise CorruptMessageError(f"truncated batch header at position {pos}")
        base, length = unpack_head(buf, rel)
        if buf[rel + MAGIC_OFFSET] != CURRENT_MAGIC or length < _MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"no record batch at position {pos}")
        if base + unpack_delta(buf, rel + _LAST_DELTA_OFFSET)[0] >= offset:
            header = parse_header(buf, rel)
            header.position = pos
            if pos + header.size > end:
                raise CorruptMessageError(f"batch at position {pos} runs past the segment")
            return header
        pos += length + LOG_OVERHEAD
    return None


def _last_batch_end(fd: int, start: int, end: int, limit: int, max_steps: int) -> int:
    """From the batch start ``start``, the end of the last whole batch ending <= ``limit``
    (``start`` itself if none does), reading at most ``max_steps`` headers."""
    pos = start
    buf = read_fully(fd, min(4096, end - pos), pos)
    buf_start = pos
    unpack_length = _INT32.unpack_from
    for _ in range(max_steps):
        if pos >= end:
            break
        rel = pos - buf_start
        if rel + LOG_OVERHEAD > len(buf):
            buf = read_fully(fd, min(4096, end - pos), pos)
            buf_start = pos
            rel = 0
            if len(buf) < LOG_OVERHEAD:
                break
        next_pos = pos + unpack_length(buf, rel + 8)[0] + LOG_OVERHEAD
        if next_pos > limit or next_pos <= pos:
            break
        pos = next_pos
    return pos


@dataclass(slots=True)
class RecoveryResult:
    """What :meth:`LogSegment.recover` found: the valid batches and the bytes cut off."""

    headers: list[BatchHeader]
    truncated_bytes: int


class LogSegment:
    """A segment of a partition's log: batches ``[base_offset, next_offset)``.

    On disk, in the partition directory (names are the base offset padded to 20 digits):

    * ``<base>.log`` — record batches (magic v2) back to back, exactly as produced after
      offset assignment; no header. Appended with ``os.pwrite`` on an unbuffered descriptor,
      so a write that returned is in the page cache and survives kill -9 (not power loss:
      that needs :meth:`flush`). ``pwrite`` rather than ``write`` because the same descriptor
      serves :class:`FileRegion` reads and asyncio's sendfile moves its file offset.
    * ``<base>.index`` — :class:`~strom.storage.offset_index.OffsetIndex`.
    * ``<base>.timeindex`` — :class:`~strom.storage.time_index.TimeIndex`.
    * ``<base>.txnindex`` — :class:`~strom.storage.txn_index.TransactionIndex`, the aborted
      transactions whose abort marker is in this segment (only present once it has one). The
      segment keeps it in step on truncation, close, flush and unlink; the log appends to it
      (it needs producer state) and rebuilds it after :meth:`recover` emptied it.

    Descriptors: the ``.log`` is a :class:`~strom.storage.file_pool.PooledFile`, opened when
    first used and closed by the pool when it is the least recently used idle file (the rules
    — who closes, when it reopens, in-flight reads — are in :mod:`strom.storage.file_pool`).
    Every method pins it for the duration of its I/O; :meth:`read` hands its pin to the
    returned :class:`FileRegion`. The indexes hold no descriptor between flushes. A segment
    being appended to or read stays open because it is the most recently used.

    Index entries are added for a batch when more than ``index_interval_bytes`` were appended
    since the previous entry (Kafka's rule). In memory the segment tracks its size, next
    offset, the first batch's timestamp (for ``segment.ms``), the max timestamp and the last
    offset of the batch holding it.

    Invariants: batches have increasing offsets, all >= ``base_offset`` and within int32 of
    it; ``size`` is the file length covered by whole batches; the indexes only reference
    batches inside ``size``. A missing or unsound index is rebuilt by :meth:`recover`, which
    also cuts a torn or corrupt tail (checked by CRC).

    Thread-safety: owned by the thread that appends (the event loop); :meth:`flush` may run
    concurrently in a worker thread, and the log cleaner (its worker process, or its thread in
    the fallback) reads *inactive* segments (``headers``, ``read_bytes`` or the files by path:
    ``pread`` only, never their in-memory indexes' mutation).
    Readers use positions with ``pread`` / ``sendfile`` only. Cleaned segments are written
    under a ``name_suffix`` (``.cleaned``) and reopened under their final names.
    Lifecycle: :meth:`create` or :meth:`open`, appends while active, :meth:`on_inactive` when
    a newer segment takes over, :meth:`close`; :meth:`unlink` (or :meth:`detach` before the
    cleaner renames files over this segment's) removes the names: an open descriptor stays
    usable until :meth:`close`, so in-flight reads finish, and the file is never reopened
    by name again.
    """

    __slots__ = (
        "_bytes_since_index",
        "_dirty",
        "_log",
        "base_offset",
        "created_ms",
        "directory",
        "first_batch_timestamp",
        "index_interval_bytes",
        "max_timestamp",
        "name_suffix",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "roll_jitter_ms",
        "size",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        log_file: PooledFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        *,
        index_interval_bytes: int,
        created_ms: int,
        roll_jitter_ms: int = 0,
        name_suffix: str = "",
    ) -> None:
        self.directory = directory
        self.name_suffix = name_suffix
        self.base_offset = base_offset
        self._log = log_file
        self._dirty = True  # written since the last fsync (unknown for a file just opened)
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self.size = 0
        self.next_offset = base_offset
        self.first_batch_timestamp = -1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0

    # -- paths ----------------------------------------------------------------------------
    @staticmethod
    def log_path_for(directory: Path, base_offset: int) -> Path:
        return directory / file_name(base_offset, LOG_SUFFIX)

    @property
    def log_path(self) -> Path:
        return self.directory / (file_name(self.base_offset, LOG_SUFFIX) + self.name_suffix)

    @property
    def index_path(self) -> Path:
        return self.directory / (file_name(self.base_offset, INDEX_SUFFIX) + self.name_suffix)

    @property
    def time_index_path(self) -> Path:
        return self.directory / (file_name(self.base_offset, TIME_INDEX_SUFFIX)
                                 + self.name_suffix)

    @property
    def txn_index_path(self) -> Path:
        return self.txn_index.path

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        roll_jitter_ms: int = 0,
        name_suffix: str = "",
        pool: FilePool | None = None,
        lazy_indexes: bool = False,
        fresh_dir: bool = False,
        log_file: io.FileIO | None = None,
    ) -> LogSegment:
        """A new empty segment (files at that base offset are replaced; ``fresh_dir``: the
        directory was just made, so there are none to remove; ``log_file``: its ``.log``,
        already created and open).

        ``name_suffix`` is appended to the file names: the cleaner writes segments as
        ``<base>.log.cleaned`` etc. (see :mod:`strom.storage.swap`) and reopens them under
        their final names once renamed. ``pool`` defaults to the process's file pool.
        ``lazy_indexes`` (a new log's first segment): the index files are made with their
        first entry, so creating a partition costs one file, not three."""
        log_path = directory / (file_name(base_offset, LOG_SUFFIX) + name_suffix)
        file = (PooledFile.create(pool or default_pool(), log_path) if log_file is None
                else PooledFile.adopt(pool or default_pool(), log_path, log_file))
        try:
            oi = OffsetIndex.create(directory / (file_name(base_offset, INDEX_SUFFIX)
                                                 + name_suffix), base_offset, max_index_bytes,
                                    lazy=lazy_indexes, absent=fresh_dir)
            ti = TimeIndex.create(directory / (file_name(base_offset, TIME_INDEX_SUFFIX)
                                               + name_suffix), base_offset, max_index_bytes,
                                  lazy=lazy_indexes, absent=fresh_dir)
        except BaseException:
            file.close()
            raise
        txn = TransactionIndex.create(
            directory / (file_name(base_offset, TXN_INDEX_SUFFIX) + name_suffix), base_offset,
            absent=fresh_dir)
        return cls(directory, base_offset, file, oi, ti, txn,
                   index_interval_bytes=index_interval_bytes, created_ms=now_ms,
                   roll_jitter_ms=roll_jitter_ms, name_suffix=name_suffix)

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        recover: bool = False,
        roll_jitter_ms: int = 0,
        pool: FilePool | None = None,
    ) -> tuple[LogSegment, RecoveryResult | None]:
        """Open an existing segment.

        With ``recover`` the whole file is validated (CRC), the offset and time indexes rebuilt
        and the transaction index emptied (the log rebuilds it). Otherwise the indexes are
        loaded and sanity-checked and the batches after the last index entry are scanned; any
        problem falls back to recovery. The second value is the recovery result when recovery
        ran (the ``.log`` is then left open in the pool, the most recently used file).
        """
        file = PooledFile(pool or default_pool(), cls.log_path_for(directory, base_offset))
        try:
            size = os.fstat(file.acquire().fileno()).st_size
        except BaseException:
            file.close()
            raise
        file.release()
        oi_path = directory / file_name(base_offset, INDEX_SUFFIX)
        ti_path = directory / file_name(base_offset, TIME_INDEX_SUFFIX)
        txn_path = directory / file_name(base_offset, TXN_INDEX_SUFFIX)
        oi: OffsetIndex | None = None
        ti: TimeIndex | None = None
        txn: TransactionIndex | None = None
        try:
            if not recover and size == 0 and not oi_path.exists():
                # A new log's first segment, closed before its first entry: its index files
                # are made with that entry (see ``create(lazy_indexes=True)``).
                oi = OffsetIndex.create(oi_path, base_offset, max_index_bytes, lazy=True)
                ti = TimeIndex.create(ti_path, base_offset, max_index_bytes, lazy=True)
                txn = TransactionIndex.create(txn_path, base_offset)
                segment = cls(directory, base_offset, file, oi, ti, txn,
                              index_interval_bytes=index_interval_bytes, created_ms=now_ms,
                              roll_jitter_ms=roll_jitter_ms)
                segment.size = 0
                segment._load_tail_state()
                return segment, None
            if not recover:
                try:
                    oi = OffsetIndex.load(oi_path, base_offset, max_index_bytes, size)
                    ti = TimeIndex.load(ti_path, base_offset, max_index_bytes)
                    txn = TransactionIndex.load(txn_path, base_offset)
                    segment = cls(directory, base_offset, file, oi, ti, txn,
                                  index_interval_bytes=index_interval_bytes, created_ms=now_ms,
                                  roll_jitter_ms=roll_jitter_ms)
                    segment.size = size
                    segment._load_tail_state()
                    return segment, None
                except (FileNotFoundError, CorruptIndexError, CorruptMessageError) as exc:
                    log.warning("rebuilding segment %s: %s", cls.log_path_for(directory,
                                                                               base_offset), exc)
                    for index in (oi, ti, txn):
                        if index is not None:
                            index.close(write=False)
            oi = OffsetIndex.create(oi_path, base_offset, max_index_bytes)
            ti = TimeIndex.create(ti_path, base_offset, max_index_bytes)
            txn = TransactionIndex.create(txn_path, base_offset)
        except BaseException:
            file.close()
            for index in (oi, ti, txn):
                if index is not None:
                    index.close(write=False)
            raise
        segment = cls(directory, base_offset, file, oi, ti, txn,
                      index_interval_bytes=index_interval_bytes, created_ms=now_ms,
                      roll_jitter_ms=roll_jitter_ms)
        segment.size = size
        return segment, segment.recover()

    def close(self) -> None:
        """Close the files (idempotent). Indexes are written and fsynced first so a clean
        close is durable (not for a detached segment: its files are gone or replaced). A
        descriptor pinned by a :class:`FileRegion` closes when the region is dropped."""
        log_file = self._log
        if log_file.closed:
            return
        write = not log_file.detached
        try:
            for index in (self.offset_index, self.time_index, self.txn_index):
                index.close(write=write)
        finally:
            log_file.close()

    def detach(self) -> None:
        """The segment's names are about to be unlinked or renamed over: from now on its
        ``.log`` is never reopened by name (an open descriptor stays until :meth:`close`)."""
        self._log.detach()

    def unlink(self) -> None:
        """Detach and remove the segment's files (see :meth:`detach`)."""
        self._log.detach()
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            unlink_quietly(path)

    def flush(self) -> None:
        """fsync the log (if written since the last fsync) and its indexes (writing their
        pending entries); no-op once closed or detached."""
        log_file = self._log
        if log_file.closed or log_file.detached:
            return
        if self._dirty:
            self._dirty = False  # cleared first: an append racing this fsync sets it again
            file = log_file.acquire()
            try:
                os.fsync(file.fileno())
            except BaseException:
                self._dirty = True
                raise
            finally:
                log_file.release()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    @property
    def closed(self) -> bool:
        return self._log.closed

    @property
    def detached(self) -> bool:
        """The segment left the log and its names are gone (see :meth:`detach`)."""
        return self._log.detached

    @property
    def log_file(self) -> PooledFile:
        """The pooled ``.log`` file (its descriptor comes and goes; see the class docstring)."""
        return self._log

    def _fd(self) -> int:
        """Pin the ``.log`` and return its descriptor; pair with ``self._log.release()``."""
        return self._log.acquire().fileno()

    # -- state loading and recovery -------------------------------------------------------
    def _load_tail_state(self) -> None:
        """Derive next offset, max timestamp and index bookkeeping from the indexes plus a scan
        of the batches after the last offset-index entry. Raises on inconsistencies."""
        last_indexed, position = self.offset_index.last_entry()
        entry = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = entry if entry else (-1, -1)
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        expected = self.base_offset
        first = True
        for header in self.headers(position):
            if first and len(self.offset_index) and header.last_offset != last_indexed:
                raise CorruptIndexError(
                    f"{self.index_path}: last entry ({last_indexed}, {position}) does not match "
                    f"the batch there (last offset {header.last_offset})"
                )
            first = False
            if header.base_offset < expected or (
                header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
            ):
                raise CorruptMessageError(f"offsets out of order at position {header.position}")
            expected = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self._bytes_since_index += header.size
        self.next_offset = expected
        if len(self.offset_index) and first:
            raise CorruptIndexError(f"{self.index_path}: last entry points past the data")
        if entry is not None and entry[1] >= self.next_offset:
            raise CorruptIndexError(f"{self.time_index_path}: entry beyond the segment's data")
        self.first_batch_timestamp = -1
        if self.size >= HEADER_SIZE:
            head = parse_header(self.read_bytes(0, HEADER_SIZE))
            self.first_batch_timestamp = head.max_timestamp

    def recover(self) -> RecoveryResult:
        """Validate every batch (CRC, offsets), cut the file after the valid prefix, rebuild
        the offset and time indexes and the in-memory state; empty the transaction index
        (rebuilding it needs producer state: the log does it from the returned headers)."""
        fd = self._fd()
        try:
            return self._recover(fd)
        finally:
            self._log.release()

    def _recover(self, fd: int) -> RecoveryResult:
        size = os.fstat(fd).st_size
        headers: list[BatchHeader] = []
        valid = 0
        if size:
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    headers, valid = scan_valid_prefix(view)
                finally:
                    view.release()
        expected = self.base_offset
        for i, header in enumerate(headers):
            if header.base_offset < expected or (
                header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
            ):
                valid = header.position
                del headers[i:]
                break
            expected = header.next_offset
        truncated = size - valid
        if truncated:
            log.warning("%s: truncating %d invalid bytes at position %d", self.log_path,
                        truncated, valid)
            os.ftruncate(fd, valid)
            self._dirty = True
        self.size = valid
        self.next_offset = expected
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = headers[0].max_timestamp if headers else -1
        self._bytes_since_index = 0
        index_entries, time_entries = self._track(headers, 0, -1)
        self.offset_index.replace_all(index_entries)
        self.time_index.replace_all(time_entries)
        self.txn_index.replace_all([])
        return RecoveryResult(headers, truncated)

    def _track(
        self, headers: list[BatchHeader], base_position: int, last_time_entry: int
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Update max-timestamp / index bookkeeping for appended batches; return the new
        offset-index and time-index entries they call for."""
        index_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        interval = self.index_interval_bytes
        for header in headers:
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            if self._bytes_since_index > interval:
                index_entries.append((header.last_offset, base_position + header.position))
                if self.max_timestamp > last_time_entry:
                    time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))
                    last_time_entry = self.max_timestamp
                self._bytes_since_index = 0
            self._bytes_since_index += header.size
        return index_entries, time_entries

    # -- appends --------------------------------------------------------------------------
    def append(self, buf: memoryview, headers: list[BatchHeader]) -> None:
        """Append ``buf`` (whole batches, offsets already assigned) at the end of the file.

        ``headers`` describe the batches in ``buf`` (positions relative to ``buf``, offsets and
        timestamps as written). Nothing is visible (``size``) until every byte is written.
        """
        position = self.size
        if position == 0:  # a lazily created segment gets its index files with its data
            self.offset_index.ensure_file()
            self.time_index.ensure_file()
        fd = self._fd()
        try:
            write_fully(fd, buf, position)
        except BaseException:
            os.ftruncate(fd, position)  # no torn batch left behind on ENOSPC / EIO
            raise
        finally:
            self._log.release()
        self._dirty = True
        if position == 0:
            self.first_batch_timestamp = headers[0].max_timestamp
        last = self.time_index.last_entry()
        index_entries, time_entries = self._track(headers, position, last[0] if last else -1)
        for offset, pos in index_entries:
            self.offset_index.append(offset, pos)
        for timestamp, offset in time_entries:
            self.time_index.maybe_append(timestamp, offset)
        self.size = position + len(buf)
        self.next_offset = headers[-1].next_offset

    def should_roll(
        self,
        incoming_bytes: int,
        last_offset: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Kafka's roll rules: size, age (first batch's timestamp, else creation time, minus
        jitter), a full index, or offsets that no longer fit a 32-bit relative offset."""
        if self.size == 0:
            return False
        if self.size > segment_bytes - incoming_bytes:
            return True
        since = self.first_batch_timestamp if self.first_batch_timestamp >= 0 else self.created_ms
        if now_ms - since > segment_ms - self.roll_jitter_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > MAX_RELATIVE_OFFSET

    def on_inactive(self) -> None:
        """A newer segment became active: record the final max timestamp in the time index."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # -- reads ----------------------------------------------------------------------------
    def read(
        self, offset: int, upper: int, max_bytes: int, min_one: bool,
        inline_below: int = INLINE_READ_BYTES,
    ) -> FileRegion | bytes | Literal[False] | None:
        """What to serve for a fetch from ``offset``: the batches from the one holding it,
        stopping before ``upper`` (the first offset not to serve), after ``max_bytes`` (cut at
        a batch boundary; the first batch whole if it alone is larger and ``min_one``) and at
        the segment's end.

        ``None`` if no batch here holds ``offset`` or a later one (the caller tries the next
        segment); ``False`` if there is nothing to serve. The bytes themselves below
        ``inline_below`` (:data:`INLINE_READ_BYTES`) or when the file pool has no room (more
        pinned files than its capacity); otherwise a region that keeps the pin taken for the
        lookups, so its descriptor stays open until the region is dropped.
        """
        log_file = self._log
        file = log_file.acquire()
        lease: FileLease | None = None
        try:
            fd = file.fileno()
            found = self._find_region(fd, offset, upper, max_bytes, min_one)
            if found is None or found is False:
                return found
            position, size = found
            pool = log_file.pool
            if size < inline_below or pool.pinned_files > pool.capacity:
                return read_fully(fd, size, position)
            lease = FileLease(log_file, file)  # takes this pin over
        finally:
            if lease is None:
                log_file.release()
        return FileRegion(file, position, size, lease)

    def _find_region(
        self, fd: int, offset: int, upper: int, max_bytes: int, min_one: bool
    ) -> tuple[int, int] | Literal[False] | None:
        """(position, size) for :meth:`read`, or its ``None`` / ``False``."""
        _, position = self.offset_index.lookup(offset)
        header = _find_batch(fd, position, self.size, offset)
        if header is None:
            return None
        position = header.position
        if header.base_offset >= upper:
            return False
        end = self.size
        if upper < self.next_offset:
            _, indexed = self.offset_index.lookup(upper)
            bound = _find_batch(fd, max(indexed, position), self.size, upper)
            if bound is not None:
                end = bound.position
        available = end - position
        if available <= 0:
            return False
        if available <= max_bytes:
            return position, available
        if header.size > max_bytes:
            return (position, min(header.size, available)) if min_one else False
        limit = position + max_bytes
        best = position + header.size  # the first batch fits: cut at the last one that does
        if best < limit:
            best = max(best, self.offset_index.floor_position(limit))
            best = _last_batch_end(fd, best, self.size, limit, _BOUNDARY_SCAN_LIMIT)
        return position, best - position

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``.

        Index lookup, then a header scan with ``pread``. None if no such batch is here.
        """
        _, position = self.offset_index.lookup(offset)
        fd = self._fd()
        try:
            header = _find_batch(fd, max(position, start_position), self.size, offset)
        finally:
            self._log.release()
        return None if header is None else (header.position, header)

    def read_bytes(self, position: int, size: int) -> bytes:
        fd = self._fd()
        try:
            return read_fully(fd, size, position)
        finally:
            self._log.release()

    def base_offset_at(self, position: int) -> int:
        """The base offset of the batch starting at ``position`` (a batch boundary)."""
        return int(_INT64.unpack(self.read_bytes(position, _INT64.size))[0])

    def read_marker(self, header: BatchHeader) -> EndTxnMarker | None:
        """The commit / abort marker of the control batch ``header`` (a header of this
        segment); None for an emptied control batch or an unreadable marker (logged)."""
        data = self.read_bytes(header.position, header.size)
        try:
            return read_end_txn_marker(data, replace(header, position=0))
        except KafkaError as exc:
            log.warning("%s: unreadable transaction marker at offset %d: %s", self.log_path,
                        header.base_offset, exc)
            return None

    def headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches from ``start_position`` to the end (structure-checked); the
        file stays pinned until the iterator is exhausted or closed."""
        fd = self._fd()
        try:
            yield from iter_headers(fd, start_position, self.size)
        finally:
            self._log.release()

    def largest_timestamp(self) -> int:
        """For retention: the max record timestamp, else the file's modification time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        fd = self._fd()
        try:
            return os.fstat(fd).st_mtime_ns // 1_000_000
        finally:
            self._log.release()

    # -- truncation -----------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove the batches whose last offset is >= ``offset``; returns the bytes removed."""
        if offset >= self.next_offset:
            return 0
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        fd = self._fd()
        try:
            os.ftruncate(fd, position)
        finally:
            self._log.release()
        self._dirty = True
        self.size = position
        self._load_tail_state()
        return removed
