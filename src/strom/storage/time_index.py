"""The sparse time index of one segment (Kafka's ``.timeindex`` file format)."""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from strom.storage.files import CorruptIndexError, read_fully, write_fully

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")


class TimeIndex:
    """Maps timestamps to offsets in a segment, sampled with the offset index.

    On disk: ``<base offset, 20 digits>.timeindex``, a bare sequence of 12-byte big-endian
    entries ``(int64 timestamp, int32 offset - base_offset)``; no header, no preallocation.
    An entry ``(T, o)`` says: the largest timestamp among the segment's batches up to the one
    holding offset ``o`` is ``T``, and ``o`` is the last offset of the batch whose max timestamp
    is ``T`` — so every record at an offset <= ``o`` has a timestamp <= ``T``. Entries are added
    when the offset index gets one (only if the timestamp grew) and once more when the segment
    stops being active, so the last entry holds the segment's max timestamp after a clean close.

    Invariants: timestamps strictly increase, offsets never decrease, offsets are >= the base
    offset; :meth:`load` raises :class:`CorruptIndexError` otherwise (the segment rebuilds it).

    Thread-safety: as :class:`~strom.storage.offset_index.OffsetIndex`.
    """

    __slots__ = ("_fd", "_offsets", "_timestamps", "base_offset", "max_entries", "path")

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, fd: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // ENTRY_SIZE)
        self._fd = fd
        self._timestamps = array("q")
        self._offsets = array("i")  # relative offsets

    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_bytes: int) -> TimeIndex:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        return cls(path, base_offset, max_index_bytes, fd)

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> TimeIndex:
        """Open and sanity-check an existing time index; CorruptIndexError if unsound."""
        fd = os.open(path, os.O_RDWR)
        index = cls(path, base_offset, max_index_bytes, fd)
        try:
            size = os.fstat(fd).st_size
            if size % ENTRY_SIZE:
                raise CorruptIndexError(f"{path}: size {size} is not a multiple of {ENTRY_SIZE}")
            count = size // ENTRY_SIZE
            values = struct.unpack(">" + "qi" * count, read_fully(fd, size, 0))
            timestamps = array("q", values[0::2])
            offsets = array("i", values[1::2])
            ts_list = timestamps.tolist()
            if ts_list != sorted(ts_list) or len(set(ts_list)) != len(ts_list):
                raise CorruptIndexError(f"{path}: timestamps are not strictly increasing")
            off_list = offsets.tolist()
            if off_list != sorted(off_list) or (off_list and off_list[0] < 0):
                raise CorruptIndexError(f"{path}: offsets decrease or are negative")
        except BaseException:
            os.close(fd)
            raise
        index._timestamps, index._offsets = timestamps, offsets
        return index

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, or None."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def lookup(self, timestamp: int, *, strict: bool = False) -> tuple[int, int] | None:
        """The entry with the largest timestamp <= ``timestamp`` (< with ``strict``).

        Returns (timestamp, absolute offset) or None when no entry qualifies.
        """
        if strict:
            slot = bisect_left(self._timestamps, timestamp) - 1
        else:
            slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return None
        return self._timestamps[slot], self.base_offset + self._offsets[slot]

    def entries(self) -> list[tuple[int, int]]:
        base = self.base_offset
        return [(t, base + o) for t, o in zip(self._timestamps, self._offsets, strict=True)]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if the timestamp exceeds the last entry's; True if added."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return False
        relative = offset - self.base_offset
        if relative < 0 or (self._offsets and relative < self._offsets[-1]):
            raise ValueError(f"time index offset {offset} goes backwards")
        write_fully(self._fd, _ENTRY.pack(timestamp, relative),
                    len(self._timestamps) * ENTRY_SIZE)
        self._timestamps.append(timestamp)
        self._offsets.append(relative)
        return True

    def replace_all(self, entries: list[tuple[int, int]]) -> None:
        """Rewrite the whole index from (timestamp, absolute offset) pairs (index rebuild)."""
        base = self.base_offset
        self._timestamps = array("q", [t for t, _ in entries])
        self._offsets = array("i", [o - base for _, o in entries])
        data = b"".join(_ENTRY.pack(t, o - base) for t, o in entries)
        os.ftruncate(self._fd, 0)
        write_fully(self._fd, data, 0)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect_right(self._offsets, offset - self.base_offset - 1)
        if keep == len(self._offsets):
            return
        del self._timestamps[keep:]
        del self._offsets[keep:]
        os.ftruncate(self._fd, keep * ENTRY_SIZE)
