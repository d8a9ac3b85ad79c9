"""The aborted-transaction index of one segment (Kafka's ``.txnindex`` file format)."""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path
from typing import ClassVar, NamedTuple

from strom.storage.file_pool import default_pool
from strom.storage.files import CorruptIndexError, unlink_quietly, write_fully
from strom.storage.index_base import Columns, FixedEntryIndex, check_strictly_increasing

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
#: The only entry version Kafka has written (``AbortedTxn.CURRENT_VERSION``).
ENTRY_VERSION = 0
#: The index never makes a segment roll; this only sizes the base class's soft limit.
_UNBOUNDED = 2**62


class AbortedTxn(NamedTuple):
    """A transaction ended by an abort marker (Kafka's ``AbortedTxn``).

    ``first_offset`` is the offset of the transaction's first batch in the partition (raised
    to the log start if that was cut), ``last_offset`` the offset of its abort marker, and
    ``last_stable_offset`` the partition's last stable offset once the marker was written:
    the first offset of the oldest transaction of another producer still open then, else
    ``last_offset + 1``. A reader looking for the aborted transactions overlapping offsets
    below some bound can stop at the first entry whose ``last_stable_offset`` reaches that
    bound: every transaction beginning below it had ended by then, so its entry came earlier.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex(FixedEntryIndex):
    """The aborted transactions whose abort marker lies in one segment, in marker order.

    On disk: ``<base offset, 20 digits>.txnindex``, a bare sequence of 34-byte big-endian
    entries, exactly Kafka's ``TransactionIndex`` file::

        int16 version (0)
        int64 producer id
        int64 first offset          (absolute offsets, not relative to the base)
        int64 last offset           (the abort marker's offset)
        int64 last stable offset    (see :class:`AbortedTxn`)

    Like Kafka's, the file exists only once the segment has an entry (most segments never
    get one); a missing file is an empty index. Unlike the other indexes (written at flush),
    an entry is written to the file at once, as Kafka does (without fsync: :meth:`flush`
    does it), so the file survives a kill -9 of the broker. Entries are appended when an
    abort marker of a transaction with data in this partition is written (leader, follower
    or log recovery), kept by the cleaner for the transactions whose data
    it retained, truncated with the segment (every entry whose marker is at or past the
    truncation offset goes) and deleted / renamed with it.

    Invariants: every version is 0; last offsets strictly increase and are >= the base
    offset; first offsets are <= last offsets. :meth:`load` raises :class:`CorruptIndexError`
    otherwise, and the segment is then recovered, which empties the index for the log to
    rebuild from the markers (a bad index is never trusted: a stale entry would make
    read_committed consumers drop committed records).

    Thread-safety: appended, truncated and rebuilt by the thread that appends to the log;
    :meth:`entries` / :meth:`collect` may run in another thread (the cleaner) and see a
    consistent prefix.
    """

    ENTRY: ClassVar[struct.Struct] = _ENTRY
    TYPECODES: ClassVar[str] = "hqqqq"  # version, producer id, first, last, last stable
    OFFSET_FIELD: ClassVar[int] = 3  # truncation cuts on the marker's offset

    __slots__ = ()

    # -- lifecycle: the file is created by the first entry --------------------------------
    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_bytes: int = _UNBOUNDED, *,
               lazy: bool = True, absent: bool = False) -> TransactionIndex:
        """A new, empty index; an existing file at ``path`` is removed (it is always made
        by the first entry) unless the caller knows there is none (``absent``)."""
        if not absent:
            unlink_quietly(path)
        return cls(path, base_offset, max_index_bytes)

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TransactionIndex:
        """Open and sanity-check the index at ``path`` (empty if there is no file);
        CorruptIndexError if it is not sound."""

        def check(columns: Columns) -> None:
            versions, _, firsts, lasts, _ = columns
            if any(v != ENTRY_VERSION for v in versions):
                raise CorruptIndexError(f"{path}: unknown aborted-transaction entry version")
            check_strictly_increasing(path, "last offsets", lasts)
            if lasts and lasts[0] < base_offset:
                raise CorruptIndexError(
                    f"{path}: last offset {lasts[0]} is below the base offset {base_offset}")
            if any(f > last for f, last in zip(firsts, lasts, strict=True)):
                raise CorruptIndexError(f"{path}: a first offset is past its last offset")

        try:
            return cls._load(path, base_offset, _UNBOUNDED, check)
        except FileNotFoundError:
            return cls(path, base_offset, _UNBOUNDED)

    def _write_pending(self) -> None:
        """Write the entries not yet in the file now, creating it (fsync: :meth:`flush`)."""
        with self._io_lock:
            count = len(self._columns[-1])
            written = self._written
            if self._closed or count <= written:
                return
            rows = zip(*(column[written:count] for column in self._columns), strict=True)
            data = b"".join(self.ENTRY.pack(*row) for row in rows)
            fd = default_pool().open_fd(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                write_fully(fd, data, written * self.ENTRY.size)
            finally:
                os.close(fd)
            self._written = count
            self._dirty = True

    def _stored_offset(self, offset: int) -> int:
        return offset  # absolute offsets, as Kafka stores them

    # -- mutation -------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Add an entry after the last one; ValueError if its marker is not past the last
        entry's or is below the base offset."""
        lasts = self._columns[3]
        if (lasts and txn.last_offset <= lasts[-1]) or txn.last_offset < self.base_offset:
            raise ValueError(f"aborted transaction {txn} does not follow the last entry of "
                             f"{self.path}")
        self._append_entry(ENTRY_VERSION, *txn)
        self._write_pending()

    def replace_all(self, txns: list[AbortedTxn], *, create: bool = False) -> None:
        """Rewrite the whole index (recovery empties it; the cleaner writes its own). Without
        entries the file is removed, unless ``create`` (then it is written empty)."""
        if not txns and not create:
            with self._io_lock:
                unlink_quietly(self.path)
                self._columns = tuple(array(c.typecode) for c in self._columns)
                self._written = 0
                self._dirty = False
            return
        os.close(default_pool().open_fd(self.path, os.O_WRONLY | os.O_CREAT))
        self._replace_entries([(ENTRY_VERSION, *txn) for txn in txns])

    # -- queries --------------------------------------------------------------------------
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order (safe from another thread: a consistent prefix)."""
        _, pids, firsts, lasts, stables = self._columns
        count = min(len(pids), len(firsts), len(lasts), len(stables))
        return [AbortedTxn(pids[i], firsts[i], lasts[i], stables[i]) for i in range(count)]

    def collect(self, start_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)`` (marker at or
        after the start, first offset below the bound), and whether the search is complete:
        an entry's last stable offset reached ``upper_bound``, so no later segment can hold
        another one (Kafka's ``collectAbortedTxns``)."""
        found = []
        for txn in self.entries():
            if txn.last_offset >= start_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False


def decode_entries(data: bytes) -> list[tuple[int, AbortedTxn]]:
    """(version, entry) for each whole entry in ``data``, unchecked (for ``dump-log``)."""
    return [(version, AbortedTxn(*rest))
            for version, *rest in TransactionIndex.raw_entries(data)]
