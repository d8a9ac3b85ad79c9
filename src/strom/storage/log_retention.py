"""Which segments leave a log, and how they go.

Selection (pure functions over the segment list, oldest first; the active segment never
leaves): by ``retention.ms`` (:func:`expired_by_time`), by ``retention.bytes``
(:func:`over_size`) and wholly below the log start (:func:`below_log_start`).
:meth:`strom.storage.log.Log.apply_retention` applies them in that order, each to what the
previous one left.

Departure: a segment that leaves the log (retention, truncation, a cleaner swap) is detached
and unlinked at once (its ``.log`` is never reopened by name); a descriptor open at that moment
stays open in a :class:`Graveyard` for ``file.delete.delay.ms``, and regions being sent hold
their own pins (:mod:`strom.storage.file_pool`), so concurrent fsyncs and in-flight sendfiles
of it stay valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from strom.storage.segment import LogSegment


def oldest_while(
    segments: list[LogSegment], predicate: Callable[[LogSegment], bool]
) -> list[LogSegment]:
    """The longest run of non-active segments, oldest first, that all satisfy ``predicate``."""
    out = []
    for segment in segments[:-1]:
        if not predicate(segment):
            break
        out.append(segment)
    return out


def expired_by_time(
    segments: list[LogSegment], now_ms: int, retention_ms: int
) -> list[LogSegment]:
    """The oldest segments whose largest timestamp is more than ``retention_ms`` old."""
    return oldest_while(segments, lambda s: now_ms - s.largest_timestamp() > retention_ms)


def over_size(segments: list[LogSegment], retention_bytes: int) -> list[LogSegment]:
    """The oldest segments whose removal brings the log down to ``retention_bytes`` at most
    (a segment goes only if the log stays at or above the limit without it)."""
    excess = sum(segment.size for segment in segments) - retention_bytes
    doomed = []
    for segment in segments[:-1]:
        if excess - segment.size < 0:
            break
        excess -= segment.size
        doomed.append(segment)
    return doomed


def below_log_start(
    segments: list[LogSegment], bases: list[int], log_start_offset: int
) -> list[LogSegment]:
    """Non-active segments wholly below the log start (the next one starts at or below it)."""
    out = []
    for i, segment in enumerate(segments[:-1]):
        if bases[i + 1] > log_start_offset:
            break
        out.append(segment)
    return out


class Graveyard:
    """Segments that left the log, unlinked, whose descriptors close after a delay.

    Thread-safety: owned by the log and changed under its lock; :meth:`close_expired` must
    not run while a cleaning pass may still read a buried segment (the log checks).
    """

    __slots__ = ("_buried",)

    def __init__(self) -> None:
        self._buried: list[tuple[float, LogSegment]] = []

    def bury(self, segments: Iterable[LogSegment], deadline: float, *, unlink: bool) -> None:
        """Keep ``segments`` open until the monotonic time ``deadline``; with ``unlink`` their
        files are removed now (a swap has already replaced or unlinked them itself)."""
        for segment in segments:
            if unlink:
                segment.unlink()
            self._buried.append((deadline, segment))

    def close_expired(self, now: float) -> None:
        """Close the segments whose deadline passed."""
        keep = []
        for deadline, segment in self._buried:
            if deadline <= now:
                segment.close()
            else:
                keep.append((deadline, segment))
        self._buried = keep

    def close_all(self) -> None:
        for _, segment in self._buried:
            segment.close()
        self._buried = []
