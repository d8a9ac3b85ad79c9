"""The common base of a segment's index files: fixed-size big-endian entries, mirrored in memory.

:class:`~strom.storage.offset_index.OffsetIndex` (``.index``) and
:class:`~strom.storage.time_index.TimeIndex` (``.timeindex``) are built on it, and so is any
further per-segment index whose file is a plain sequence of equal-sized records (the
transaction index ``.txnindex`` is one).
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from strom.storage.file_pool import default_pool
from strom.storage.files import CorruptIndexError, read_fully, unlink_quietly, write_fully

log = logging.getLogger("strom.storage.index")

_Index = TypeVar("_Index", bound="FixedEntryIndex")

#: A loaded file's columns (one array per entry field), handed to a load-time sanity check.
Columns = tuple[array, ...]


class FixedEntryIndex:
    """An index file of fixed-size big-endian entries, held in memory as one array per field.

    On disk: a bare sequence of entries packed with the subclass's :attr:`ENTRY` struct
    (big-endian, ``ENTRY.size`` bytes each); no header, no preallocation, no padding, so the
    file size is always ``ENTRY.size`` times the entries written. Entry *i* is at byte
    ``i * ENTRY.size``; truncation cuts the file at an entry boundary. (Kafka preallocates and
    memory-maps ``.index`` / ``.timeindex`` and trims them on close; the bytes of a trimmed
    Kafka file and of a flushed strom file with the same entries are identical.)

    In memory: ``_columns[k]`` is an :class:`array.array` of the *k*-th field of every entry
    (typecodes :attr:`TYPECODES`, in file order), so lookups bisect one column in C. The
    arrays are the index; the file is their durable copy.

    **No open descriptor.** Appends only add to the arrays; the entries reach the file when
    the index is flushed (:meth:`flush`: open, ``pwrite`` the new entries, ``fsync``, close)
    or closed, as a memory-mapped Kafka index reaches the disk when the OS writes it back.
    Truncation and rebuilds write at once. So an index costs no file descriptor between
    flushes, whatever the number of segments (see :mod:`strom.storage.file_pool`). Crash
    safety is unchanged: the loader trusts an index only for segments below the log's
    recovery point, and the recovery point passes a segment only after :meth:`flush` wrote and
    fsynced its index; later segments are rebuilt from the log.

    What a subclass declares:

    * :attr:`ENTRY` — the entry's ``struct`` layout (must start with ``>``);
    * :attr:`TYPECODES` — one ``array`` typecode per field, of the same width as the field;
    * :attr:`OFFSET_FIELD` — the field holding offsets, which never decrease from one entry to
      the next; :meth:`truncate_to` cuts on it. :meth:`_stored_offset` maps an absolute offset
      to that field's value (default: relative to ``base_offset``, as in Kafka's ``.index`` and
      ``.timeindex``; a subclass storing absolute offsets overrides it);
    * its typed ``load`` (passing its sanity check to :meth:`_load`), ``append`` and queries.

    Invariants kept here: the file holds the first ``_written`` entries of the arrays; a
    loaded file whose size is not a multiple of the entry size, or that fails the subclass's
    check, raises :class:`~strom.storage.files.CorruptIndexError` (the owner rebuilds the index
    — a bad index is never trusted). ``max_entries`` (``max_index_bytes // ENTRY.size``, at
    least 1) is a soft limit: :attr:`is_full` tells the owner to roll; appends past it are not
    refused.

    Lifecycle: :meth:`create` (new, empty file) or ``load`` (existing file, checked); appends;
    :meth:`close` writes what is pending and ends the index's file I/O (idempotent; with
    ``write=False`` it forgets pending entries, for files that were deleted).

    Thread-safety: mutated (append, :meth:`_replace_entries`, :meth:`truncate_to`) and queried
    by the one thread that appends to the log (the event loop). :meth:`flush` may run
    concurrently in a worker thread: appends fill the columns in order, so it writes the
    entries complete in the last column, and ``_io_lock`` orders its file I/O with
    truncation, rebuilds and close. The index of a segment that is no longer active is not
    mutated, so other threads may query it.
    """

    ENTRY: ClassVar[struct.Struct]
    TYPECODES: ClassVar[str]
    OFFSET_FIELD: ClassVar[int]

    __slots__ = ("_closed", "_columns", "_dirty", "_exists", "_io_lock", "_written", "base_offset",
                 "max_entries", "path")

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        entry = cls.__dict__.get("ENTRY")
        if entry is None:
            return  # an intermediate base; its subclasses are checked
        fmt = entry.format
        widths = [struct.calcsize(">" + code) for code in fmt[1:]]
        if fmt[:1] != ">" or len(widths) != len(cls.TYPECODES) or any(
            array(code).itemsize != width
            for code, width in zip(cls.TYPECODES, widths, strict=True)
        ):
            raise TypeError(f"{cls.__name__}: TYPECODES {cls.TYPECODES!r} do not match {fmt!r}")
        if not 0 <= cls.OFFSET_FIELD < len(cls.TYPECODES):
            raise TypeError(f"{cls.__name__}: OFFSET_FIELD {cls.OFFSET_FIELD} is not a field")

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._columns: Columns = tuple(array(code) for code in self.TYPECODES)
        self._written = 0  # entries in the file (the first ones of the columns)
        self._dirty = False  # the file changed since its last fsync
        self._exists = True  # False: the first flush creates the file
        self._closed = False
        self._io_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(cls: type[_Index], path: Path, base_offset: int, max_index_bytes: int, *,
               lazy: bool = False, absent: bool = False) -> _Index:
        """A new, empty index (an existing file at ``path`` is emptied). With ``lazy`` the
        file is removed instead and made by the first :meth:`flush` that has an entry to
        write (an empty segment with no index files opens as one with empty indexes);
        ``absent``: the caller knows there is no file to remove (a directory just made)."""
        if not lazy:
            os.close(default_pool().open_fd(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            return cls(path, base_offset, max_index_bytes)
        if not absent:
            unlink_quietly(path)
        index = cls(path, base_offset, max_index_bytes)
        index._exists = False
        return index

    def ensure_file(self) -> None:
        """Make the file of a lazily created index now (empty; durable with the next
        :meth:`flush`)."""
        if self._exists:
            return
        with self._io_lock:
            if not self._exists and not self._closed:
                os.close(default_pool().open_fd(self.path, os.O_WRONLY | os.O_CREAT))
                self._exists = True
                self._dirty = True

    @classmethod
    def _load(
        cls: type[_Index],
        path: Path,
        base_offset: int,
        max_index_bytes: int,
        check: Callable[[Columns], None],
    ) -> _Index:
        """Read an existing index, decode it and run ``check`` on its columns.

        ``check`` raises CorruptIndexError when the entries are not sound. FileNotFoundError
        propagates (a missing index is rebuilt too).
        """
        fd = default_pool().open_fd(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size % cls.ENTRY.size:
                raise CorruptIndexError(
                    f"{path}: size {size} is not a multiple of {cls.ENTRY.size}"
                )
            columns = cls.decode_columns(read_fully(fd, size, 0))
        finally:
            os.close(fd)
        check(columns)
        index = cls(path, base_offset, max_index_bytes)
        index._columns = columns
        index._written = len(columns[0])
        return index

    def close(self, *, write: bool = True) -> None:
        """Write and fsync the pending entries (not with ``write=False``: the file is gone),
        then stop file I/O; idempotent."""
        if write:
            try:
                self.flush()
            except FileNotFoundError:
                log.warning("%s vanished before its last %d entries were written", self.path,
                            self.pending_entries)
        with self._io_lock:
            self._closed = True

    def flush(self) -> None:
        """Write the entries appended since the last flush and fsync the file if it changed
        (safe from a worker thread while the owner appends; nothing to do once closed)."""
        with self._io_lock:
            if self._closed:
                return
            count = len(self._columns[-1])  # appends fill the columns in order
            written = self._written
            if count <= written and not self._dirty:
                return
            if count == 0 and not self._exists:  # an empty index needs no file
                self._dirty = False
                return
            flags = os.O_WRONLY if self._exists else os.O_WRONLY | os.O_CREAT
            fd = default_pool().open_fd(self.path, flags)
            try:
                if count > written:
                    rows = zip(*(column[written:count] for column in self._columns), strict=True)
                    pack = self.ENTRY.pack
                    write_fully(fd, b"".join(pack(*row) for row in rows),
                                written * self.ENTRY.size)
                    self._written = count
                os.fsync(fd)
                self._dirty = False
                self._exists = True
            finally:
                os.close(fd)

    @property
    def pending_entries(self) -> int:
        """Entries appended but not yet in the file."""
        return len(self._columns[-1]) - self._written

    # -- decoding -------------------------------------------------------------------------
    @classmethod
    def decode_columns(cls, data: bytes) -> Columns:
        """The columns of the whole entries in ``data`` (a trailing partial entry is ignored)."""
        fields = len(cls.TYPECODES)
        count = len(data) // cls.ENTRY.size
        data = data[: count * cls.ENTRY.size]
        if len(set(cls.TYPECODES)) == 1:
            # One width: decode all fields in one pass in C, then de-interleave by stride.
            values = array(cls.TYPECODES[0])
            values.frombytes(data)
            if sys.byteorder == "little":
                values.byteswap()
            return tuple(values[k::fields] for k in range(fields))
        flat = struct.unpack(">" + cls.ENTRY.format[1:] * count, data)
        return tuple(array(code, flat[k::fields]) for k, code in enumerate(cls.TYPECODES))

    @classmethod
    def raw_entries(cls, data: bytes) -> list[tuple[int, ...]]:
        """The whole entries in ``data`` as stored (no sanity check; a partial tail is ignored)."""
        usable = len(data) - len(data) % cls.ENTRY.size
        return list(cls.ENTRY.iter_unpack(data[:usable]))

    # -- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def is_full(self) -> bool:
        """At or past ``max_entries``: the owning segment should roll."""
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.ENTRY.size

    def _stored_offset(self, offset: int) -> int:
        """The value :attr:`OFFSET_FIELD` holds for absolute ``offset``."""
        return offset - self.base_offset

    # -- mutation -------------------------------------------------------------------------
    def _append_entry(self, *values: int) -> None:
        """Add one entry (already validated by the subclass) after the last one; it reaches
        the file at the next :meth:`flush`."""
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)

    def _replace_entries(self, rows: Iterable[Sequence[int]]) -> None:
        """Rewrite the whole file from stored-form rows now (an index rebuild)."""
        rows = list(rows)
        columns = tuple(
            array(code, [row[k] for row in rows]) for k, code in enumerate(self.TYPECODES)
        )
        data = b"".join(self.ENTRY.pack(*row) for row in rows)
        with self._io_lock:
            fd = default_pool().open_fd(self.path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT)
            try:
                write_fully(fd, data, 0)
            finally:
                os.close(fd)
            self._exists = True
            self._columns = columns
            self._written = len(rows)
            self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset (:attr:`OFFSET_FIELD`) is >= ``offset``."""
        keep = bisect_left(self._columns[self.OFFSET_FIELD], self._stored_offset(offset))
        if keep == len(self):
            return
        with self._io_lock:
            for column in self._columns:
                del column[keep:]
            if keep < self._written:
                fd = default_pool().open_fd(self.path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, keep * self.ENTRY.size)
                finally:
                    os.close(fd)
                self._written = keep
                self._dirty = True


def check_strictly_increasing(path: Path, what: str, values: array) -> None:
    """CorruptIndexError unless ``values`` strictly increase."""
    # sorted() runs in C; a set catches equal neighbours.
    items = values.tolist()
    if items != sorted(items) or len(set(items)) != len(items):
        raise CorruptIndexError(f"{path}: {what} are not strictly increasing")


def check_non_decreasing(path: Path, what: str, values: array) -> None:
    """CorruptIndexError if ``values`` ever decrease."""
    items = values.tolist()
    if items != sorted(items):
        raise CorruptIndexError(f"{path}: {what} decrease")


def check_relative_offsets(path: Path, offsets: array, *, strictly: bool) -> None:
    """CorruptIndexError unless the relative offsets are >= 0 and increase (``strictly``, or
    at least never decrease)."""
    if strictly:
        check_strictly_increasing(path, "offsets", offsets)
    else:
        check_non_decreasing(path, "offsets", offsets)
    if offsets and offsets[0] < 0:
        raise CorruptIndexError(f"{path}: negative relative offset {offsets[0]}")
