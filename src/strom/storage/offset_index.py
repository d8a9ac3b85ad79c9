"""The sparse offset index of one segment (Kafka's ``.index`` file format)."""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from strom.storage.files import CorruptIndexError, read_fully, write_fully

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")
_MAX_RELATIVE = 2**31 - 1


def _int32_array(data: bytes) -> array:
    values = array("i")
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


class OffsetIndex:
    """Maps offsets to file positions in a segment, one entry every ``index.interval.bytes``.

    On disk: ``<base offset, 20 digits>.index``, a bare sequence of 8-byte big-endian entries
    ``(int32 offset - base_offset, int32 position in the .log file)``; no header and no
    preallocation, so the file size is always ``8 * entries``. An entry records the *last*
    offset of an indexed batch and the position where that batch *starts* (as Kafka does), so
    :meth:`lookup` of any offset yields a batch start at or before the batch holding it.

    Invariants: relative offsets and positions both strictly increase; every position is
    inside the segment; a file that violates them (or whose size is not a multiple of 8) is
    reported as :class:`CorruptIndexError` by :meth:`load` and rebuilt by the segment — a bad
    index is never trusted.

    ``max_entries`` (``segment.index.bytes // 8``) is a soft limit: the segment rolls once the
    index is full, but a single multi-batch append may overshoot it slightly.

    Thread-safety: mutated only by the thread that appends to the log (the event loop);
    :meth:`flush` (fsync) may run concurrently in a worker thread.
    """

    __slots__ = ("_fd", "_offsets", "_positions", "base_offset", "max_entries", "path")

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, fd: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // ENTRY_SIZE)
        self._fd = fd
        self._offsets = array("i")  # relative offsets
        self._positions = array("i")

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_bytes: int) -> OffsetIndex:
        """A new, empty index (an existing file at ``path`` is emptied)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        return cls(path, base_offset, max_index_bytes, fd)

    @classmethod
    def load(
        cls, path: Path, base_offset: int, max_index_bytes: int, segment_size: int
    ) -> OffsetIndex:
        """Open an existing index and sanity-check it; CorruptIndexError if it is not sound.

        FileNotFoundError propagates (a missing index is rebuilt by the caller too).
        """
        fd = os.open(path, os.O_RDWR)
        index = cls(path, base_offset, max_index_bytes, fd)
        try:
            size = os.fstat(fd).st_size
            if size % ENTRY_SIZE:
                raise CorruptIndexError(f"{path}: size {size} is not a multiple of {ENTRY_SIZE}")
            values = _int32_array(read_fully(fd, size, 0))
            offsets, positions = values[0::2], values[1::2]
            _check_increasing(path, "offsets", offsets)
            _check_increasing(path, "positions", positions)
            if offsets and offsets[0] < 0:
                raise CorruptIndexError(f"{path}: negative relative offset {offsets[0]}")
            if positions and (positions[0] < 0 or positions[-1] >= segment_size):
                raise CorruptIndexError(
                    f"{path}: position {positions[-1]} outside the {segment_size}-byte segment"
                )
        except BaseException:
            os.close(fd)
            raise
        index._offsets, index._positions = offsets, positions
        return index

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    # -- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self._offsets) * ENTRY_SIZE

    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base_offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset`` as (absolute offset, position).

        (base_offset, 0) if every entry is larger (or the index is empty).
        """
        slot = bisect_right(self._offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[slot], self._positions[slot]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch start <= ``position``, or -1 if there is none."""
        slot = bisect_right(self._positions, position) - 1
        return self._positions[slot] if slot >= 0 else -1

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position)."""
        base = self.base_offset
        return [(base + o, p) for o, p in zip(self._offsets, self._positions, strict=True)]

    # -- mutation -------------------------------------------------------------------------
    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must exceed the last entry's."""
        relative = offset - self.base_offset
        if not 0 <= relative <= _MAX_RELATIVE:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        if self._offsets and (relative <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after the last one")
        write_fully(self._fd, _ENTRY.pack(relative, position), len(self._offsets) * ENTRY_SIZE)
        self._offsets.append(relative)
        self._positions.append(position)

    def replace_all(self, entries: list[tuple[int, int]]) -> None:
        """Rewrite the whole index from (absolute offset, position) pairs (index rebuild)."""
        base = self.base_offset
        offsets = array("i", [o - base for o, _ in entries])
        positions = array("i", [p for _, p in entries])
        data = b"".join(_ENTRY.pack(o, p) for o, p in zip(offsets, positions, strict=True))
        os.ftruncate(self._fd, 0)
        write_fully(self._fd, data, 0)
        self._offsets, self._positions = offsets, positions

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect_right(self._offsets, offset - self.base_offset - 1)
        if keep == len(self._offsets):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        os.ftruncate(self._fd, keep * ENTRY_SIZE)


def _check_increasing(path: Path, what: str, values: array) -> None:
    # sorted() runs in C; a set catches equal neighbours (entries must strictly increase).
    items = values.tolist()
    if items != sorted(items) or len(set(items)) != len(items):
        raise CorruptIndexError(f"{path}: {what} are not strictly increasing")
