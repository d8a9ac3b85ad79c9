"""The sparse time index of one segment (Kafka's ``.timeindex`` file format)."""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import ClassVar

from strom.storage.index_base import (
    Columns,
    FixedEntryIndex,
    check_relative_offsets,
    check_strictly_increasing,
)

_ENTRY = struct.Struct(">qi")
ENTRY_SIZE = _ENTRY.size  # 12


class TimeIndex(FixedEntryIndex):
    """Maps timestamps to offsets in a segment, sampled with the offset index.

    On disk: ``<base offset, 20 digits>.timeindex``, a bare sequence of 12-byte big-endian
    entries ``(int64 timestamp, int32 offset - base_offset)``; no header, no preallocation
    (the file mechanics are :class:`~strom.storage.index_base.FixedEntryIndex`'s).
    An entry ``(T, o)`` says: the largest timestamp among the segment's batches up to the one
    holding offset ``o`` is ``T``, and ``o`` is the last offset of the batch whose max timestamp
    is ``T`` — so every record at an offset <= ``o`` has a timestamp <= ``T``. Entries are added
    when the offset index gets one (only if the timestamp grew) and once more when the segment
    stops being active, so the last entry holds the segment's max timestamp after a clean close.

    Invariants: timestamps strictly increase, offsets never decrease, offsets are >= the base
    offset; :meth:`load` raises :class:`CorruptIndexError` otherwise (the segment rebuilds it).

    Thread-safety: as :class:`~strom.storage.offset_index.OffsetIndex` — mutated and queried by
    the appending thread (the event loop), :meth:`flush` from any thread.
    """

    ENTRY: ClassVar[struct.Struct] = _ENTRY
    TYPECODES: ClassVar[str] = "qi"  # timestamp, relative offset
    OFFSET_FIELD: ClassVar[int] = 1

    __slots__ = ()

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> TimeIndex:
        """Open and sanity-check an existing time index; CorruptIndexError if unsound."""

        def check(columns: Columns) -> None:
            timestamps, offsets = columns
            check_strictly_increasing(path, "timestamps", timestamps)
            check_relative_offsets(path, offsets, strictly=False)

        return cls._load(path, base_offset, max_index_bytes, check)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, or None."""
        timestamps, offsets = self._columns
        if not timestamps:
            return None
        return timestamps[-1], self.base_offset + offsets[-1]

    def lookup(self, timestamp: int, *, strict: bool = False) -> tuple[int, int] | None:
        """The entry with the largest timestamp <= ``timestamp`` (< with ``strict``).

        Returns (timestamp, absolute offset) or None when no entry qualifies.
        """
        timestamps, offsets = self._columns
        if strict:
            slot = bisect_left(timestamps, timestamp) - 1
        else:
            slot = bisect_right(timestamps, timestamp) - 1
        if slot < 0:
            return None
        return timestamps[slot], self.base_offset + offsets[slot]

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (timestamp, absolute offset)."""
        base = self.base_offset
        timestamps, offsets = self._columns
        return [(t, base + o) for t, o in zip(timestamps, offsets, strict=True)]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if the timestamp exceeds the last entry's; True if added."""
        timestamps, offsets = self._columns
        if timestamps and timestamp <= timestamps[-1]:
            return False
        relative = offset - self.base_offset
        if relative < 0 or (offsets and relative < offsets[-1]):
            raise ValueError(f"time index offset {offset} goes backwards")
        self._append_entry(timestamp, relative)
        return True

    def replace_all(self, entries: list[tuple[int, int]]) -> None:
        """Rewrite the whole index from (timestamp, absolute offset) pairs (index rebuild)."""
        base = self.base_offset
        self._replace_entries([(t, o - base) for t, o in entries])
