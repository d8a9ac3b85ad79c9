"""Loading a partition directory and recovering it after a crash.

The steps :meth:`strom.storage.log.Log.open` runs, as functions of what they read and write
(no :class:`~strom.storage.log.Log` object): which segment files are there
(:func:`scan_directory`), which must be recovered (:func:`recovery_start`), opening them —
cutting a torn tail and dropping what follows it (:func:`open_segments`) — and bringing the
leader-epoch cache (:func:`reconcile_leader_epochs`) and the producer state
(:func:`rebuild_producer_state`, also used after truncation) in line with the segments.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from strom.protocol.records.batch import BatchHeader
from strom.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_name,
    unlink_quietly,
)
from strom.storage.leader_epoch import LeaderEpochCache
from strom.storage.log_settings import LogSettings
from strom.storage.producer_state import ProducerStateManager
from strom.storage.segment import LogSegment
from strom.storage.swap import recover_interrupted_swaps, remove_segment_files

log = logging.getLogger("strom.storage.log")


@dataclass(slots=True)
class LoadedSegments:
    """What :func:`open_segments` found: the segments kept, oldest first, their base offsets,
    the headers of every batch recovery validated (in offset order) and the base offsets of
    the recovered segments (their transaction indexes are empty until rebuilt)."""

    segments: list[LogSegment] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    recovered: list[BatchHeader] = field(default_factory=list)
    recovered_bases: list[int] = field(default_factory=list)


def scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segments present, ascending, after removing leftovers of crashed
    writes (``.tmp`` files, indexes without a log) and completing interrupted cleaner swaps
    (:mod:`strom.storage.swap`)."""
    recover_interrupted_swaps(directory)
    bases = []
    for name in os.listdir(directory):
        path = directory / name
        if name.endswith(TMP_SUFFIX):
            unlink_quietly(path)
            continue
        base = offset_from_name(name, LOG_SUFFIX)
        if base is not None:
            bases.append(base)
    bases.sort()
    present = set(bases)
    for name in os.listdir(directory):  # indexes without a log file are orphans
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            base = offset_from_name(name, suffix)
            if base is not None and base not in present:
                unlink_quietly(directory / name)
    return bases


def recovery_start(bases: list[int], recovery_point: int) -> int:
    """Base offset of the first segment to recover: the one holding the recovery point."""
    slot = bisect_right(bases, recovery_point) - 1
    return bases[slot] if slot >= 0 else -1


def open_segments(
    directory: Path, bases: list[int], settings: LogSettings, now_ms: int,
    recover_from: int | None,
) -> LoadedSegments:
    """Open the segments at ``bases``; those from ``recover_from`` on (None: none) are
    validated batch by batch (CRC), the others only have their indexes checked.

    After a segment whose tail recovery cut, the later segments are not trustworthy and are
    deleted. A segment starting inside the previous one can only be left by a cleaner swap
    whose unlinks a crash lost; it is deleted too (the cleaned segment holds what survives).
    The caller owns the returned segments (and closes them if it fails).
    """
    loaded = LoadedSegments()
    truncated_at: int | None = None
    try:
        for base in bases:
            if truncated_at is not None:  # after a torn segment: the rest is not trustworthy
                log.warning("%s: deleting segment %d after a truncated one", directory, base)
                remove_segment_files(directory, base)
                continue
            needs_recovery = recover_from is not None and base >= recover_from
            segment, result = LogSegment.open(
                directory, base, index_interval_bytes=settings.index_interval_bytes,
                max_index_bytes=settings.max_index_bytes, now_ms=now_ms,
                recover=needs_recovery, roll_jitter_ms=settings.roll_jitter_ms(),
            )
            if loaded.segments and base < loaded.segments[-1].next_offset:
                log.warning("%s: deleting segment %d, superseded by a cleaned segment",
                            directory, base)
                segment.close()
                remove_segment_files(directory, base)
                continue
            loaded.segments.append(segment)
            loaded.bases.append(base)
            if result is not None:
                loaded.recovered.extend(result.headers)
                loaded.recovered_bases.append(base)
                if result.truncated_bytes and needs_recovery:
                    truncated_at = base
    except BaseException:
        for segment in loaded.segments:
            segment.close()
        raise
    return loaded


def reconcile_leader_epochs(
    epochs: LeaderEpochCache, recovered: list[BatchHeader], log_start_offset: int,
    log_end_offset: int,
) -> None:
    """Bring the epoch cache in line with the log: the checkpoint may be ahead of it (written
    before the append), or miss newer epochs of recovered batches. Checkpoints only if it
    changed, and only if recovered batches added an epoch: entries that merely go (past
    the log end, below the log start — every load of an empty log drops its epoch's entry)
    are dropped again at the next load, so the file is rewritten before the next append
    instead (``dirty``), not once per log at every start."""
    loaded = epochs.entries()
    epochs.truncate_from_end(log_end_offset, flush=False)
    added = False
    for header in recovered:  # epochs the checkpoint missed (only ever newer ones)
        if header.partition_leader_epoch > epochs.latest_epoch:
            epochs.assign(header.partition_leader_epoch, header.base_offset, flush=False)
            added = True
    epochs.truncate_from_start(log_start_offset, flush=False)
    if epochs.entries() != loaded:
        if added:
            epochs.flush()
        else:
            epochs.dirty = True


def rebuild_producer_state(
    state: ProducerStateManager, segments: list[LogSegment], bases: list[int],
    log_start_offset: int, log_end_offset: int, rebuild_txn_indexes: Collection[int] = (),
) -> None:
    """Newest snapshot <= the log end, then replay the batch headers after it (markers
    decoded from their batches).

    ``rebuild_txn_indexes``: base offsets of segments whose (emptied) transaction index must
    be rebuilt, as Kafka's segment recovery does: the replay then starts from a snapshot at
    or below the first of them, and every transaction aborted by a marker in one of them is
    appended to its index with the last stable offset producer state computes then.
    """
    rebuild = set(rebuild_txn_indexes)
    start = state.load(log_end_offset, min(rebuild) if rebuild else None)
    if start < 0:
        start = bases[0]
        state.clear(start)
    if start >= log_end_offset:
        state.map_end_offset = log_end_offset
        return
    first = max(0, bisect_right(bases, start) - 1)
    for segment in segments[first:]:
        found = segment.translate_offset(start)
        if found is None:
            continue
        index = segment.txn_index if segment.base_offset in rebuild else None
        for header in segment.headers(found[0]):
            if header.base_offset >= start:
                marker = segment.read_marker(header) if header.is_control else None
                aborted = state.replay(header, marker)
                if aborted is not None and index is not None:
                    index.append(aborted)
    state.map_end_offset = log_end_offset
    state.evict_before(log_start_offset)
