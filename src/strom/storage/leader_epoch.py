"""The leader-epoch cache of one partition: which offset each leader epoch started at."""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from pathlib import Path

from strom.storage.checkpoint import read_checkpoint, write_checkpoint
from strom.storage.files import CorruptFileError

log = logging.getLogger("strom.storage.leader_epoch")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """Epoch -> start offset entries, both strictly increasing (KIP-101).

    On disk: ``leader-epoch-checkpoint`` in the partition directory, Kafka's checkpoint text
    format (see :mod:`strom.storage.checkpoint`) with ``<epoch> <start offset>`` lines; it is
    rewritten atomically (tmp + fsync + rename) whenever the entries change — rare, once per
    leader change — and before the batch that opened the epoch is appended, so after a crash
    the file may only be ahead of the log; :meth:`truncate_from_end` at load trims it. A
    rewrite that fails (a full disk) leaves the entries changed in memory and :attr:`dirty`
    set: the log rewrites the file before its next append (which fails while the disk is
    full), so no batch is appended ahead of the file.

    Thread-safety: owned by the thread that appends to the log.
    """

    def __init__(self, directory: Path, *, load: bool = True) -> None:
        """The cache of ``directory``'s file (none: empty); ``load`` False for a directory
        known to hold none (a log being created), which skips the read."""
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        #: The entries changed since the file was last written (its rewrite failed).
        self.dirty = False
        if not load:
            return
        try:
            entries = read_checkpoint(self.path, 2)
            pairs = [(int(e), int(o)) for e, o in entries]
        except (CorruptFileError, ValueError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            pairs = []
        for epoch, offset in pairs:
            self.assign(epoch, offset, flush=False)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def flush(self) -> None:
        """Rewrite the file; on failure (``OSError``) :attr:`dirty` stays set."""
        self.dirty = True
        write_checkpoint(self.path, self.entries())
        self.dirty = False

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        A new entry that is not above the existing ones removes those it contradicts (entries
        with an epoch or a start offset >= the new one), as happens after a truncation.
        """
        if epoch < 0:
            return False
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        if flush:
            self.flush()
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect_left(self._offsets, end_offset)
        if keep < len(self._offsets):
            del self._epochs[keep:]
            del self._offsets[keep:]
            if flush:
                self.flush()

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly below it and move the
        start of the epoch containing it up to it."""
        slot = bisect_right(self._offsets, start_offset) - 1
        if slot < 0 or (slot == 0 and self._offsets[0] == start_offset):
            return
        del self._epochs[:slot]
        del self._offsets[:slot]
        self._offsets[0] = start_offset
        if flush:
            self.flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self.flush()

    def epoch_for_offset(self, offset: int) -> int:
        slot = bisect_right(self._offsets, offset) - 1
        return self._epochs[slot] if slot >= 0 else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= ``epoch``, its end offset).

        The end offset of an epoch is the start offset of the next higher epoch, or the log
        end for the latest epoch. (-1, -1) if ``epoch`` is undefined or above every entry.
        """
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]
