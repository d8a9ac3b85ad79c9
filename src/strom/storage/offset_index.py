"""The sparse offset index of one segment (Kafka's ``.index`` file format)."""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

from strom.storage.files import CorruptIndexError
from strom.storage.index_base import (
    Columns,
    FixedEntryIndex,
    check_relative_offsets,
    check_strictly_increasing,
)

_ENTRY = struct.Struct(">ii")
ENTRY_SIZE = _ENTRY.size  # 8
_MAX_RELATIVE = 2**31 - 1


class OffsetIndex(FixedEntryIndex):
    """Maps offsets to file positions in a segment, one entry every ``index.interval.bytes``.

    On disk: ``<base offset, 20 digits>.index``, a bare sequence of 8-byte big-endian entries
    ``(int32 offset - base_offset, int32 position in the .log file)``; no header and no
    preallocation, so the file size is always ``8 * entries`` (the file mechanics are
    :class:`~strom.storage.index_base.FixedEntryIndex`'s). An entry records the *last* offset
    of an indexed batch and the position where that batch *starts* (as Kafka does), so
    :meth:`lookup` of any offset yields a batch start at or before the batch holding it.

    Invariants: relative offsets and positions both strictly increase; every position is
    inside the segment; a file that violates them (or whose size is not a multiple of 8) is
    reported as :class:`CorruptIndexError` by :meth:`load` and rebuilt by the segment — a bad
    index is never trusted.

    ``max_entries`` (``segment.index.bytes // 8``) is a soft limit: the segment rolls once the
    index is full, but a single multi-batch append may overshoot it slightly.

    Thread-safety: mutated and queried only by the thread that appends to the log (the event
    loop); :meth:`flush` (fsync) may run concurrently in a worker thread.
    """

    ENTRY: ClassVar[struct.Struct] = _ENTRY
    TYPECODES: ClassVar[str] = "ii"  # relative offset, position
    OFFSET_FIELD: ClassVar[int] = 0

    __slots__ = ()

    @classmethod
    def load(
        cls, path: Path, base_offset: int, max_index_bytes: int, segment_size: int
    ) -> OffsetIndex:
        """Open an existing index and sanity-check it; CorruptIndexError if it is not sound.

        FileNotFoundError propagates (a missing index is rebuilt by the caller too).
        """

        def check(columns: Columns) -> None:
            offsets, positions = columns
            check_relative_offsets(path, offsets, strictly=True)
            check_strictly_increasing(path, "positions", positions)
            if positions and (positions[0] < 0 or positions[-1] >= segment_size):
                raise CorruptIndexError(
                    f"{path}: position {positions[-1]} outside the {segment_size}-byte segment"
                )

        return cls._load(path, base_offset, max_index_bytes, check)

    # -- queries --------------------------------------------------------------------------
    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base_offset, 0) when empty."""
        offsets, positions = self._columns
        if not offsets:
            return self.base_offset, 0
        return self.base_offset + offsets[-1], positions[-1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset`` as (absolute offset, position).

        (base_offset, 0) if every entry is larger (or the index is empty).
        """
        offsets, positions = self._columns
        slot = bisect_right(offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + offsets[slot], positions[slot]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch start <= ``position``, or -1 if there is none."""
        positions = self._columns[1]
        slot = bisect_right(positions, position) - 1
        return positions[slot] if slot >= 0 else -1

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position)."""
        base = self.base_offset
        offsets, positions = self._columns
        return [(base + o, p) for o, p in zip(offsets, positions, strict=True)]

    # -- mutation -------------------------------------------------------------------------
    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must exceed the last entry's."""
        offsets, positions = self._columns
        relative = offset - self.base_offset
        if not 0 <= relative <= _MAX_RELATIVE:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        if offsets and (relative <= offsets[-1] or position <= positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after the last one")
        self._append_entry(relative, position)

    def replace_all(self, entries: list[tuple[int, int]]) -> None:
        """Rewrite the whole index from (absolute offset, position) pairs (index rebuild)."""
        base = self.base_offset
        self._replace_entries([(o - base, p) for o, p in entries])
