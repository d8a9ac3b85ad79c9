"""The log of one partition: segments, offsets, appends, reads, retention, recovery.

:class:`Log` is the surface the broker uses and owns the log's state (segment list, offsets,
locks). Its jobs are spread over small modules that work on explicit inputs:
:mod:`~strom.storage.log_append` (payload checks), :mod:`~strom.storage.log_loader`
(loading and crash recovery), :mod:`~strom.storage.log_retention` (which segments leave,
and the graveyard that closes them late), :mod:`~strom.storage.log_timestamps` (lookups by
time) and :mod:`~strom.storage.log_settings` (resolved topic config).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom.common.clock import Clock
from strom.common.config import TopicConfig
from strom.common.errors import (
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from strom.protocol.records.batch import (
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    iter_batches,
    patch_base_offset,
    patch_leader_epoch,
    set_log_append_time,
    set_max_timestamp,
)
from strom.protocol.records.control import EndTxnMarker, read_end_txn_marker
from strom.storage import log_maker, log_timestamps, partition_metadata
from strom.storage.file_pool import default_pool
from strom.storage.files import (
    DELETED_DIR_SUFFIX,
    LOG_SUFFIX,
    CorruptFileError,
    file_name,
    fsync_dir,
    parse_partition_dir,
    read_fully,
    unlink_quietly,
)
from strom.storage.leader_epoch import LeaderEpochCache
from strom.storage.log_append import (
    check_client_batches,
    check_replicated_batches,
)
from strom.storage.log_loader import (
    open_segments,
    rebuild_producer_state,
    reconcile_leader_epochs,
    recovery_start,
    scan_directory,
)
from strom.storage.log_retention import (
    Graveyard,
    below_log_start,
    expired_by_time,
    over_size,
)
from strom.storage.log_settings import LogSettings
from strom.storage.log_validator import AppendOrigin, validate_batch
from strom.storage.producer_state import ProducerStateManager
from strom.storage.segment import INLINE_READ_BYTES, FileRegion, LogSegment
from strom.storage.swap import SWAP_SUFFIX, discard_swap, rename_segment_files
from strom.storage.txn_index import AbortedTxn
from strom.storage.txn_verification import VerificationGuard

__all__ = [
    "AbortedTxn", "AppendResult", "CleanerView", "FileRegion", "Log", "LogSettings",
    "ReadResult", "parse_partition_dir",
]

log = logging.getLogger("strom.storage.log")

_READ_ATTEMPTS = 3


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool


@dataclass(slots=True)
class ReadResult:
    """What :meth:`Log.read` found: ``regions`` are the parts to send, in order — the bytes
    themselves for small reads, :class:`FileRegion` (sendfile, pinning its file until the
    region is dropped) for larger ones (see :meth:`LogSegment.read`); ``size`` their total.
    ``aborted_transactions`` is None unless asked for (read_committed): then the (producer
    id, first offset) of every aborted transaction overlapping the returned batches, for the
    consumer to drop their records."""

    regions: list[FileRegion | bytes]
    size: int
    log_start_offset: int
    log_end_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None

    def to_bytes(self) -> bytes:
        """The parts' bytes, joined (regions read with ``pread``)."""
        return b"".join(
            read_fully(part.file.fileno(), part.size, part.position)
            if isinstance(part, FileRegion) else part
            for part in self.regions
        )


@dataclass(slots=True, frozen=True)
class CleanerView:
    """What a cleaning pass works from, captured under the log's lock (:meth:`Log.begin_cleaning`).

    ``segments`` are the inactive segments, oldest first (the active one is never cleaned);
    ``producer_last_offsets`` maps each live idempotent producer to the last offset of its
    last data batch (that batch is kept, possibly emptied, so producer state survives);
    ``marker_only_producers`` maps each live producer without a data batch (its epoch was
    bumped by a marker) to its epoch: its markers of that epoch are kept (fencing survives).
    ``truncated_to`` is the lowest offset the log was truncated to since the previous pass
    (the cleaner moves its checkpoint back to it), or None.
    """

    segments: list[LogSegment]
    generation: int
    log_start_offset: int
    active_base_offset: int
    last_stable_offset: int
    producer_last_offsets: dict[int, int]
    truncated_to: int | None
    marker_only_producers: dict[int, int]


class Log:
    """A partition's log: an ordered list of :class:`LogSegment` in ``<data-dir>/<topic>-<n>/``.

    Directory contents: ``<base>.log/.index/.timeindex`` per segment (and ``.txnindex`` for
    segments holding abort markers of transactions with data here),
    ``leader-epoch-checkpoint`` (:class:`LeaderEpochCache`), ``<offset>.snapshot`` producer
    state (:class:`ProducerStateManager`) and ``partition.metadata``, the topic id
    (:mod:`strom.storage.partition_metadata`; :attr:`topic_id`, None for a log from before
    topic ids were stored until :meth:`assign_topic_id`). The last segment is the active one;
    appends go there, rolling to a new segment by ``segment.bytes`` / ``segment.ms`` / a full
    index.

    Offsets: ``log_start_offset <= log_end_offset`` (LEO, the next offset to assign);
    ``recovery_point`` is the offset below which everything is fsynced. The log does not know
    what is committed: the high watermark and last stable offset belong to the owning
    :class:`strom.replication.partition.Partition`, which passes the bound to :meth:`read` and
    keeps :attr:`stable_end` (its last stable offset) up to date for the cleaner, which never
    cleans at or past it. Truncation only ever lowers ``stable_end``.

    Two appends: :meth:`append` (leader: assigns offsets, validates producer sequences) and
    :meth:`append_as_follower` (replication: keeps the leader's offsets and leader epochs).
    Transaction markers (control batches, written only by the transaction coordinator) are
    decoded on both paths: producer state ends the transaction, and an abort adds an entry
    to the active segment's transaction index, which :meth:`read` consults for read_committed
    fetches (:meth:`aborted_transactions`) and crash recovery rebuilds.

    Appends are all-or-nothing: the whole produce payload is validated (header, CRC, sizes,
    the records' structure, keys and timestamps by :mod:`strom.storage.log_validator`,
    producer sequences) before a byte is written; keys and values are never decoded on the
    append and read paths.

    Thread-safety: owned by the event-loop thread, which appends, reads, truncates and applies
    retention. Two other threads may work on it at the same time:

    * :meth:`flush` (a worker thread) fsyncs up to the LEO it captured first, then advances
      ``recovery_point``; it holds ``_flush_lock`` and reads the segment list once.
    * The log cleaner (:mod:`strom.storage.cleaner`, its own thread) reads *inactive* segments
      with ``pread`` and writes new files; it never touches the active segment, so appends
      (which only write the active segment) never wait for it.

    Rules between the event loop and the cleaner: ``_segments`` / ``_bases`` change only under
    ``_lock`` (an RLock): the event loop takes it for rolls, retention, DeleteRecords,
    truncation and close; the cleaner takes it to capture a :class:`CleanerView` and to swap a
    cleaned segment in (:meth:`replace_segments`: validation, unlinks and renames, a new list
    pair assigned — never mutated in place by the cleaner). :meth:`read` takes it only to pick
    up the two lists consistently. The swap is refused when the segments it replaces left the
    log or the log was truncated (``_generation``) or closed in the meantime. :meth:`close`
    and :meth:`delete` abort an in-flight pass and wait for it (``_cleaning``, always taken
    before ``_lock``), so no descriptor is closed under the cleaner; the graveyard is not
    emptied while a pass runs for the same reason.

    Descriptors: each segment's ``.log`` comes from the process's
    :mod:`~strom.storage.file_pool` (opened on use, closed when idle and least recently used,
    pinned while in use), so the number of partitions is not bounded by the open-file limit.
    Segments leaving the log (retention, truncation, cleaning) are detached and unlinked (or
    renamed over) at once; a descriptor open at that moment stays open for
    ``file.delete.delay.ms`` (the :class:`~strom.storage.log_retention.Graveyard`), and a
    region being sent keeps its own pin, so in-flight reads and concurrent fsyncs complete. A
    read that picked up a segment list just before a cleaner swap and finds the old segment's
    file gone looks the offset up again in the new list.

    Lifecycle: :meth:`open` (recovering from a crash unless ``clean_shutdown``), use,
    :meth:`close` (producer snapshot, final index entries) or :meth:`delete`.
    """

    def __init__(self, directory: Path, config: TopicConfig, clock: Clock, *,
                 fresh: bool = False) -> None:
        self.directory = directory
        self.topic, self.partition = parse_partition_dir(directory.name)
        self.config = config
        self.clock = clock
        self._settings = LogSettings(config)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.stable_end = 0  # set by the owning Partition (its last stable offset)
        self.recovery_point = 0
        self.last_flush_ms = clock.now_ms()
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache(directory, load=not fresh)
        self._graveyard = Graveyard()
        self._flush_lock = threading.Lock()
        self._lock = threading.RLock()  # segment-list changes vs. the cleaner thread
        self._cleaning = threading.Lock()  # held by the cleaner for a whole pass
        self._abort_cleaning = False
        self._generation = 0  # bumped by truncation: invalidates in-flight cleaning
        self._truncated_to: int | None = None
        self._dir_dirty = False
        self._closed = False
        #: The id of the topic this log belongs to (``partition.metadata``); None: unknown
        #: (written before topic ids were stored, or the file is damaged).
        self.topic_id: uuid.UUID | None = None
        #: ``partition.metadata`` was written by :meth:`create_new` and is not durable yet;
        #: :meth:`sync_metadata` (before the first data) clears it.
        self._metadata_unsynced = False
        self._metadata_lock = threading.Lock()

    # ------------------------------------------------------------------------------------
    # opening and recovery
    # ------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: Path,
        config: TopicConfig,
        *,
        clock: Clock,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ) -> Log:
        """Open (or create) the log in ``directory``.

        Without ``clean_shutdown`` every segment from the one holding ``recovery_point`` on is
        validated batch by batch (CRC); a torn or corrupt tail is cut and any later segment
        dropped. Missing or unsound indexes are rebuilt in every case.
        """
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, config, clock)
        try:
            self.topic_id = _stored_topic_id(directory)
            self._load(recovery_point, log_start_offset, clean_shutdown)
        except BaseException:
            self._close_files()
            raise
        return self

    @classmethod
    def create_new(cls, directory: Path, config: TopicConfig, *, clock: Clock,
                   topic_id: uuid.UUID | None = None, log_start_offset: int = 0,
                   log_file: io.FileIO | None = None) -> Log:
        """Create the log in ``directory``, which the caller has just made (empty): nothing
        is read or recovered. Its first segment starts at ``log_start_offset`` with lazily
        created indexes. ``log_file``: :func:`make_new_log_files` was called already (in
        another thread, say) with the same arguments and returned it; else it is called
        here. Files made are not removed on failure: the caller removes the directory."""
        if log_file is None:
            log_file = make_new_log_files(directory, topic_id, log_start_offset)
        self = cls(directory, config, clock, fresh=True)
        try:
            self.topic_id = topic_id
            self._metadata_unsynced = topic_id is not None
            self._add_segment(log_start_offset, clock.now_ms(), lazy_indexes=True,
                              fresh_dir=True, log_file=log_file)
        except BaseException:
            if not self._segments:
                log_file.close()
            self._close_files()
            raise
        self.log_start_offset = self.log_end_offset = log_start_offset
        self.recovery_point = log_start_offset
        self.producer_state.clear(log_start_offset)
        return self

    def sync_metadata(self) -> None:
        """Make the ``partition.metadata`` :meth:`create_new` wrote durable, if it is not yet
        (file, then directory). Any thread; a no-op once done. Raises ``OSError`` if the
        fsync fails (the log is then not written to)."""
        if not self._metadata_unsynced:
            return
        with self._metadata_lock:
            if self._metadata_unsynced:
                partition_metadata.sync(self.directory)
                self._metadata_unsynced = False

    @property
    def metadata_synced(self) -> bool:
        """Whether ``partition.metadata`` (if any) is durable."""
        return not self._metadata_unsynced

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        now = self.clock.now_ms()
        bases = scan_directory(self.directory)
        recover_from = recovery_start(bases, recovery_point) if not clean_shutdown else None
        loaded = open_segments(self.directory, bases, self._settings, now, recover_from)
        self._segments, self._bases = loaded.segments, loaded.bases
        if not self._segments:
            self._add_segment(log_start_offset, now, lazy_indexes=True)  # a new log
        self.log_end_offset = self._segments[-1].next_offset
        if log_start_offset > self.log_end_offset:
            # The start offset was checkpointed but the data above it was lost in the crash.
            self._truncate_fully(log_start_offset)
        self.log_start_offset = max(log_start_offset, self._bases[0])
        for segment in self._segments[:-1]:
            segment.on_inactive()
        reconcile_leader_epochs(self.leader_epochs, loaded.recovered, self.log_start_offset,
                                self.log_end_offset)
        self._rebuild_producer_state(loaded.recovered_bases)
        if clean_shutdown:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = min(recovery_point, self.log_end_offset)
            self._dir_dirty = True
            self.flush()  # what was recovered is now durable: the next crash starts from here

    def _rebuild_producer_state(self, rebuild_txn_indexes: list[int] | None = None) -> None:
        rebuild_producer_state(self.producer_state, self._segments, self._bases,
                               self.log_start_offset, self.log_end_offset,
                               rebuild_txn_indexes or ())

    def _add_segment(self, base_offset: int, now_ms: int, *, lazy_indexes: bool = False,
                     fresh_dir: bool = False, log_file: io.FileIO | None = None
                     ) -> LogSegment:
        segment = LogSegment.create(
            self.directory, base_offset, index_interval_bytes=self._settings.index_interval_bytes,
            max_index_bytes=self._settings.max_index_bytes, now_ms=now_ms,
            roll_jitter_ms=self._settings.roll_jitter_ms(), lazy_indexes=lazy_indexes,
            fresh_dir=fresh_dir, log_file=log_file,
        )
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        return segment

    # ------------------------------------------------------------------------------------
    # appends
    # ------------------------------------------------------------------------------------
    def start_transaction_verification(self, producer_id: int) -> VerificationGuard | None:
        """KIP-890: the guard an append of the producer's first transactional batch here
        must present once its coordinator confirmed the partition is in its transaction
        (:mod:`strom.storage.txn_verification`); None when its transaction is already open
        here (nothing to verify)."""
        state = self.producer_state
        if state.is_ongoing(producer_id):
            return None
        return state.verifications.start(producer_id, self.clock.now_ms())

    def append(
        self, buf: memoryview, *, leader_epoch: int, now_ms: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendResult:
        """Validate, assign offsets to and append a leader's payload (one or more batches)
        from a client or a coordinator (``origin``: some checks are for client batches only).

        ``buf`` should be writable (a memoryview over a bytearray): base offsets, the
        partition leader epoch and, where the records say otherwise, the max timestamp are
        patched in place (a read-only buffer is copied first). A coordinator's own batches
        (transactional offset commits, markers) skip the client checks and the producer
        sequence checks, as in Kafka; control batches (transaction markers) come only from
        the transaction coordinator (a client's are refused by
        :mod:`strom.storage.log_validator`). A marker is checked against the producer's
        epoch and its coordinator's epoch, ends the producer's transaction and, for an
        abort, adds the transaction to the transaction index.

        KIP-890: a transactional data batch of a producer without a transaction open here
        starts one only with the producer's current ``verification_guard`` (taken by
        :meth:`start_transaction_verification` before its coordinator was asked, and cleared
        by any transactional batch of the producer since — its transaction's marker, say);
        otherwise INVALID_TXN_STATE and nothing is appended (Kafka's ``UnifiedLog``, client
        and coordinator origins; unless ``transaction.partition.verification.enable`` is
        off).
        """
        if self._closed:
            raise KafkaStorageError(f"log {self.directory.name} is closed")
        settings = self._settings
        now = self.clock.now_ms() if now_ms is None else now_ms
        headers = iter_batches(buf)
        if not headers:
            raise InvalidRecordError("produce payload holds no record batch")
        total = len(buf)
        record_count, has_producer = check_client_batches(headers, total, settings)
        name = f"{self.topic}-{self.partition}"
        max_timestamps = [validate_batch(buf, header, settings, now, origin, name)
                          for header in headers]

        state = self.producer_state
        from_client = origin is AppendOrigin.CLIENT
        if has_producer and from_client:
            # A client's retry of a batch still in the producer state is answered with the
            # first append's offsets. Only a client's data batches: a coordinator's own
            # writes (transactional offsets, markers) carry no sequence (-1), so each of
            # them would look like a retry of the one before (Kafka: AppendOrigin.CLIENT).
            for header in headers:
                if header.producer_id >= 0 and not header.is_control:
                    dup = state.find_duplicate(header)
                    if dup is not None:
                        return AppendResult(
                            dup.first_offset, dup.last_offset,
                            dup.timestamp if settings.log_append_time else -1,
                            self.log_start_offset, dup.last_offset - dup.first_offset + 1, True,
                        )
        if has_producer and settings.verify_transactions:
            _check_verified(headers, state, verification_guard)

        # Assign offsets (validation of producer sequences needs them).
        if buf.readonly:
            buf = memoryview(bytearray(buf))
        next_offset = self.log_end_offset
        base_offset = next_offset
        for header in headers:
            header.base_offset = next_offset
            header.partition_leader_epoch = leader_epoch
            next_offset += header.last_offset_delta + 1
        pending = (state.validate(headers, _marker_reader(buf), check_sequences=from_client)
                   if has_producer else None)

        if self._metadata_unsynced:
            self.sync_metadata()
        segment = self._segments[-1]
        if segment.should_roll(total, next_offset - 1, now, settings.segment_bytes,
                               settings.segment_ms):
            segment = self._roll(now)

        for header, max_timestamp in zip(headers, max_timestamps, strict=True):
            position = header.position
            patch_base_offset(buf, position, header.base_offset)
            patch_leader_epoch(buf, position, leader_epoch)
            if settings.log_append_time:
                set_log_append_time(buf, position, header.size, now)
                header.max_timestamp = now
            elif max_timestamp != header.max_timestamp or header.is_log_append_time:
                set_max_timestamp(buf, position, header.size, max_timestamp,
                                  log_append_time=False)
                header.max_timestamp = max_timestamp
                header.attributes &= ~TIMESTAMP_TYPE_MASK
        if leader_epoch >= 0 and leader_epoch != self.leader_epochs.latest_epoch:
            self.leader_epochs.assign(leader_epoch, base_offset)
        elif self.leader_epochs.dirty:
            self.leader_epochs.flush()
        segment.append(buf, headers)  # all or nothing
        try:
            if pending is not None:
                for aborted in state.commit(pending, next_offset):
                    segment.txn_index.append(aborted)
            else:
                state.map_end_offset = next_offset
        finally:
            # The records are in the segment: the log end says so even if the bookkeeping
            # after them failed (the caller sees the error and the log end moved).
            self.log_end_offset = next_offset
        return AppendResult(base_offset, next_offset - 1,
                            now if settings.log_append_time else -1,
                            self.log_start_offset, record_count, False)

    def append_as_follower(self, buf: memoryview) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        Offsets must increase from the log end on, gaps allowed (a compacted leader's log
        has them; see :func:`~strom.storage.log_append.check_replicated_batches`); the log
        end becomes the last offset + 1. A segment rolled for this append starts at the
        first batch's offset (Kafka's rule), so a gap wider than a 32-bit relative offset
        still fits. Header and CRC are checked, sequences are not validated (the leader did
        that), producer state and the leader-epoch cache follow the batches. All or
        nothing, like :meth:`append`.
        """
        if self._closed:
            raise KafkaStorageError(f"log {self.directory.name} is closed")
        headers = iter_batches(buf)
        if not headers:
            raise InvalidRecordError("replicated payload holds no record batch")
        expected = check_replicated_batches(headers, self.log_end_offset,
                                            f"{self.topic}-{self.partition}")
        now = self.clock.now_ms()
        if self._metadata_unsynced:
            self.sync_metadata()
        segment = self._segments[-1]
        first = headers[0].base_offset
        if segment.should_roll(len(buf), expected - 1, now, self._settings.segment_bytes,
                               self._settings.segment_ms):
            segment = self._roll(now, first)
        epochs = self.leader_epochs
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch > epochs.latest_epoch:
                epochs.assign(epoch, header.base_offset)
        segment.append(buf, headers)
        state = self.producer_state
        for header in headers:
            if header.producer_id >= 0:
                marker = read_end_txn_marker(buf, header) if header.is_control else None
                aborted = state.replay(header, marker)
                if aborted is not None:
                    segment.txn_index.append(aborted)
        state.map_end_offset = expected
        self.log_end_offset = expected
        return AppendResult(first, expected - 1, -1, self.log_start_offset,
                            sum(h.records_count for h in headers), False)

    def _roll(self, now_ms: int, next_offset: int = -1) -> LogSegment:
        """Start a new active segment at the LEO, or at ``next_offset`` past it (a follower's
        next batch after a gap: nothing lies between, so the producer state snapshotted
        there is the LEO's, and the LEO moves there even if the append then fails)."""
        base = max(self.log_end_offset, next_offset)
        with self._lock:
            self.log_end_offset = base
            old = self._segments[-1]
            old.on_inactive()
            self.producer_state.map_end_offset = base
            self.producer_state.take_snapshot(sync=False)  # CRC-protected; fsynced on close
            segment = self._add_segment(base, now_ms)
            self._prune_snapshots()
            return segment

    def _prune_snapshots(self) -> None:
        """Keep the snapshots taken at segment starts (truncation reloads from them) and the
        newest one; drop the rest (e.g. those of earlier clean shutdowns)."""
        state = self.producer_state
        offsets = state.snapshot_offsets()
        keep = set(self._bases)
        for offset in offsets[:-1]:
            if offset not in keep:
                unlink_quietly(state.snapshot_path(offset))

    def roll(self, now_ms: int | None = None) -> None:
        """Force a roll (if the active segment holds data)."""
        if self._segments[-1].size:
            self._roll(self.clock.now_ms() if now_ms is None else now_ms)

    # ------------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------------
    def _empty(self, aborted: bool = False) -> ReadResult:
        return ReadResult([], 0, self.log_start_offset, self.log_end_offset,
                          [] if aborted else None)

    def read(
        self, offset: int, max_bytes: int, *, upper_bound: int, min_one: bool = True,
        inline_below: int = INLINE_READ_BYTES,
        aborted_transactions: bool = False,
    ) -> ReadResult:
        """Bytes of the batches from the one holding ``offset``, as one part: the bytes
        themselves if fewer than ``inline_below`` (or the file pool is full of pinned files),
        else a file region (see :meth:`LogSegment.read`).

        Stops at ``max_bytes`` (cut at a batch boundary; the first batch is returned whole
        if it alone is larger and ``min_one``), at ``upper_bound`` (the caller's choice: high
        watermark, last stable offset or log end) and at the end of the segment.
        OffsetOutOfRangeError if ``offset`` is below the log start or above the LEO.
        With ``aborted_transactions`` (read_committed) the result lists the aborted
        transactions overlapping ``[offset, end of the returned batches)``.
        """
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] of "
                f"{self.topic}-{self.partition}"
            )
        upper = min(upper_bound, leo)
        if offset >= upper:
            return self._empty(aborted_transactions)
        lock = self._lock
        for _ in range(_READ_ATTEMPTS):
            lock.acquire()  # the cleaner replaces both lists; pick up a consistent pair
            segments, bases = self._segments, self._bases
            lock.release()
            slot = max(0, bisect_right(bases, offset) - 1)
            try:
                while slot < len(segments):
                    found = segments[slot].read(offset, upper, max_bytes, min_one, inline_below)
                    if found is None:  # offset falls in a gap at the end of this segment
                        slot += 1
                        continue
                    if found is False:
                        return self._empty(aborted_transactions)
                    size = len(found) if isinstance(found, bytes) else found.size
                    result = ReadResult([found], size, self.log_start_offset, leo)
                    if aborted_transactions:
                        result.aborted_transactions = self._aborted_in_read(
                            segments, slot, offset, found, upper)
                    return result
                return self._empty(aborted_transactions)
            except FileNotFoundError:
                # A segment left the log (a cleaner swap) after we picked it up and its
                # descriptor was not open: look it up again in the new list.
                if self._segments is segments or self._closed:
                    raise
        raise KafkaStorageError(f"segments of {self.topic}-{self.partition} kept changing")

    def _aborted_in_read(self, segments: list[LogSegment], slot: int, offset: int,
                         found: FileRegion | bytes, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping the read
        ``found`` of ``segments[slot]`` from ``offset`` (whole batches)."""
        if not any(len(s.txn_index) for s in segments[slot:]):
            return []  # the usual case: no abort marker from here on
        segment = segments[slot]
        if isinstance(found, bytes):
            end = min(iter_batches(found, verify_crc=False)[-1].next_offset, upper)
        elif found.position + found.size < segment.size:
            # the base offset of the first batch not returned: the exact end of the read
            end = min(segment.base_offset_at(found.position + found.size), upper)
        else:
            end = min(segment.next_offset, upper)
        return [(t.producer_id, t.first_offset)
                for t in _collect_aborted(segments, slot, offset, end)]

    def aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)`` — marker at or
        after the start, first offset below the bound — from the transaction indexes of the
        segment holding ``start_offset`` onwards (Kafka's ``collectAbortedTransactions``).
        Safe from the cleaner's thread."""
        with self._lock:
            segments, bases = self._segments, self._bases
        slot = max(0, bisect_right(bases, start_offset) - 1)
        return _collect_aborted(segments, slot, start_offset, upper_bound)

    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy)."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    # ------------------------------------------------------------------------------------
    # timestamps and epochs (ListOffsets, OffsetForLeaderEpoch)
    # ------------------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after the log start
        whose timestamp is >= ``timestamp``; None if there is none."""
        return log_timestamps.offset_for_timestamp(self._segments, self.log_start_offset,
                                                   timestamp)

    def max_timestamp(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the earliest record holding the largest
        timestamp; None for an empty log or one without timestamps."""
        return log_timestamps.max_timestamp(self._segments, self.log_start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) — see :class:`LeaderEpochCache`."""
        return self.leader_epochs.end_offset_for_epoch(leader_epoch, self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epochs.latest_epoch

    # ------------------------------------------------------------------------------------
    # log start, retention, truncation
    # ------------------------------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start up to ``offset``; returns the new log start.

        The caller (the partition) refuses offsets above its high watermark; the log only
        refuses offsets outside ``[0, log end]``."""
        if offset < 0 or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the log end offset is "
                f"{self.log_end_offset}"
            )
        if offset > self.log_start_offset:
            with self._lock:
                self._advance_log_start(offset)
                self._delete_segments(
                    below_log_start(self._segments, self._bases, self.log_start_offset))
        return self.log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.leader_epochs.truncate_from_start(offset)
        self.producer_state.evict_before(offset)

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole old segments by ``retention.ms``, ``retention.bytes`` and the log start
        (never the active segment); returns the bytes deleted. Only with ``delete`` in
        ``cleanup.policy``, except segments wholly below the log start (DeleteRecords)."""
        with self._lock:
            return self._apply_retention(now_ms)

    def _apply_retention(self, now_ms: int) -> int:
        self._close_expired_graveyard()
        settings = self._settings
        deleted = 0
        if settings.delete_policy and settings.retention_ms >= 0:
            deleted += self._delete_segments(
                expired_by_time(self._segments, now_ms, settings.retention_ms))
        if settings.delete_policy and settings.retention_bytes >= 0:
            deleted += self._delete_segments(over_size(self._segments, settings.retention_bytes))
        deleted += self._delete_segments(
            below_log_start(self._segments, self._bases, self.log_start_offset))
        return deleted

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        """Remove the oldest ``len(doomed)`` segments from the log and unlink their files."""
        if not doomed:
            return 0
        count = len(doomed)
        assert self._segments[:count] == doomed and count < len(self._segments)
        del self._segments[:count]
        del self._bases[:count]
        removed = sum(segment.size for segment in doomed)
        new_start = self._bases[0]
        if new_start > self.log_start_offset:
            self._advance_log_start(new_start)
        self._bury(doomed)
        self.producer_state.delete_snapshots_before(new_start)
        return removed

    def _bury(self, segments: list[LogSegment]) -> None:
        """Unlink now, close after file.delete.delay.ms (in-flight reads and fsyncs finish)."""
        self._graveyard.bury(segments, self._burial_deadline(), unlink=True)
        self._dir_dirty = True

    def _burial_deadline(self) -> float:
        return self.clock.monotonic() + self._settings.delete_delay_ms / 1000.0

    def _close_expired_graveyard(self) -> None:
        if self._cleaning.locked():
            return  # a cleaning pass may be reading one of them: never close under it
        self._graveyard.close_expired(self.clock.monotonic())

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget idempotent producers idle for ``producer.id.expiration.ms``."""
        return self.producer_state.remove_expired(now_ms, self._settings.producer_expiration_ms)

    def truncate_to(self, offset: int) -> None:
        """Make ``offset`` the log end: remove every batch holding an offset >= ``offset``.

        A batch straddling ``offset`` is removed whole (replication only truncates at batch
        boundaries); the LEO is ``offset`` regardless, as in Kafka, so it never drops below
        the log start."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        with self._lock:
            self._generation += 1
            if self._truncated_to is None or offset < self._truncated_to:
                self._truncated_to = offset
            if offset < self.log_start_offset or offset < self._bases[0]:
                self._truncate_fully(offset)
            else:
                self._truncate_segments(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and continue empty at ``offset`` (log start = log end =
        ``offset``): a follower whose log ends below the leader's log start."""
        if offset < 0:
            raise ValueError(f"cannot start the log at negative offset {offset}")
        with self._lock:
            self._generation += 1
            if self._truncated_to is None or offset < self._truncated_to:
                self._truncated_to = offset
            self._truncate_fully(offset)

    def _truncate_segments(self, offset: int) -> None:
        keep = bisect_right(self._bases, offset)  # segments with base <= offset stay
        doomed = self._segments[keep:]
        del self._segments[keep:]
        del self._bases[keep:]
        self._bury(doomed)
        active = self._segments[-1]
        active.truncate_to(offset)
        active.next_offset = max(active.next_offset, offset)
        self._after_truncation(offset)

    def _after_truncation(self, end: int) -> None:
        self.log_end_offset = end
        self.stable_end = min(self.stable_end, end)
        self.recovery_point = min(self.recovery_point, end)
        self.leader_epochs.truncate_from_end(end)
        self.producer_state.delete_snapshots_after(end)
        self._rebuild_producer_state()

    def _truncate_fully(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset``."""
        self._generation += 1
        doomed = self._segments
        self._segments = []
        self._bases = []
        self._bury(doomed)
        self._add_segment(offset, self.clock.now_ms())
        self.log_start_offset = offset
        self.leader_epochs.clear()
        self.producer_state.delete_snapshots_after(-1)
        self.producer_state.clear(offset)
        self._after_truncation(offset)

    # ------------------------------------------------------------------------------------
    # durability
    # ------------------------------------------------------------------------------------
    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def needs_flush(self) -> bool:
        """``flush.messages`` reached: the appended records must be fsynced before acking."""
        return self.unflushed_messages >= self._settings.flush_messages

    def time_since_flush_ms(self, now_ms: int | None = None) -> int:
        return (self.clock.now_ms() if now_ms is None else now_ms) - self.last_flush_ms

    @property
    def flush_ms(self) -> int:
        return self._settings.flush_ms

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to`` (default: the LEO) and advance
        ``recovery_point``. Safe to call from a worker thread while appends continue."""
        with self._flush_lock:
            target = self.log_end_offset  # captured first: everything below it is written
            if up_to is not None:
                target = min(target, up_to)
            start = self.recovery_point
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
            segments = list(self._segments)
            if self._closed:
                return
            try:
                self.sync_metadata()
                if dir_dirty:
                    fsync_dir(self.directory)
            except OSError:
                self._dir_dirty = True
                raise
            if target > start:
                for i, segment in enumerate(segments):
                    if segment.base_offset >= target:
                        break
                    if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                        continue
                    try:
                        segment.flush()
                    except OSError:
                        # A segment that left the log (retention, truncation, a cleaner swap)
                        # may be gone or closed under us; its data no longer matters.
                        if not (segment.closed or segment.detached or self._closed):
                            raise
            if target > self.recovery_point:
                self.recovery_point = target
            self.last_flush_ms = self.clock.now_ms()

    # ------------------------------------------------------------------------------------
    # configuration and lifecycle
    # ------------------------------------------------------------------------------------
    def assign_topic_id(self, topic_id: uuid.UUID, *, replace: bool = False) -> None:
        """Record ``topic_id`` as this log's topic (``partition.metadata``, durable on
        return). Only a log without one takes an id: a log of another topic id is a different
        topic's, never re-labelled (ValueError) — unless ``replace``, for the one case where
        the topic is the same but its id was lost (the metadata recovered from its previous
        copy re-creates the topic around its logs)."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None and not replace:
            raise ValueError(f"{self.directory.name} belongs to topic id {self.topic_id}, "
                             f"not {topic_id}")
        partition_metadata.write_topic_id(self.directory, topic_id)
        self.topic_id = topic_id

    def update_config(self, config: TopicConfig) -> None:
        self.config = config
        self._settings = LogSettings(config)
        for segment in self._segments:
            segment.index_interval_bytes = self._settings.index_interval_bytes

    def close(self) -> None:
        """Write the producer-state snapshot and final index entries; close every file.

        Does not fsync the log data (call :meth:`flush` first for a clean shutdown)."""
        if self._closed:
            return
        self._stop_cleaning()
        with self._flush_lock, self._lock:
            try:
                self.sync_metadata()
                self._segments[-1].on_inactive()
                self.producer_state.map_end_offset = self.log_end_offset
                self.producer_state.take_snapshot(sync=True)
                self._prune_snapshots()
            finally:
                self._close_files()

    def _close_files(self) -> None:
        self._closed = True
        for segment in self._segments:
            segment.close()
        self._graveyard.close_all()

    def delete(self) -> None:
        """Close and remove the partition directory (renamed first, so a crash midway leaves
        a ``-delete`` directory that the log manager removes at the next start)."""
        self._stop_cleaning()
        with self._flush_lock, self._lock:
            self._close_files()
        doomed = self.directory.with_name(
            f"{self.directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}"
        )
        try:
            os.rename(self.directory, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def settings(self) -> LogSettings:
        """The resolved topic config values (replaced whole by :meth:`update_config`)."""
        return self._settings

    # ------------------------------------------------------------------------------------
    # compaction (called from the cleaner thread; see the class docstring for the rules)
    # ------------------------------------------------------------------------------------
    def begin_cleaning(self) -> CleanerView | None:
        """Start a cleaning pass: None if the log is closed or a pass already runs.

        On success the caller owns the pass and must call :meth:`end_cleaning`."""
        if self._closed or not self._cleaning.acquire(blocking=False):
            return None
        try:
            with self._lock:
                if self._closed or self._abort_cleaning:
                    self._cleaning.release()
                    return None
                producers: dict[int, int] = {}
                marker_only: dict[int, int] = {}
                # list() of a dict's items runs in C under the GIL: safe against appends.
                for pid, entry in list(self.producer_state.producers.items()):
                    batches = entry.batches
                    if batches:
                        producers[pid] = batches[-1].last_offset
                    else:
                        marker_only[pid] = entry.epoch
                view = CleanerView(
                    segments=self._segments[:-1], generation=self._generation,
                    log_start_offset=self.log_start_offset,
                    active_base_offset=self._bases[-1],
                    last_stable_offset=self.stable_end,
                    producer_last_offsets=producers, truncated_to=self._truncated_to,
                    marker_only_producers=marker_only,
                )
                self._truncated_to = None
                return view
        except BaseException:
            self._cleaning.release()
            raise

    def end_cleaning(self) -> None:
        """End the pass :meth:`begin_cleaning` started."""
        self._cleaning.release()

    def cleaning_invalidated(self, generation: int) -> bool:
        """The pass that captured ``generation`` must stop: closing, closed or truncated."""
        return self._abort_cleaning or self._closed or generation != self._generation

    def replace_segments(
        self, old: list[LogSegment], base_offset: int, generation: int
    ) -> LogSegment | None:
        """Swap the cleaned segment whose files wait as ``<base_offset>.*.swap`` in for the
        contiguous run ``old`` (steps 3-4 of :mod:`strom.storage.swap`).

        Refused (None, the ``.swap`` files removed) when ``old`` is no longer a run of
        inactive segments of the log, or the log was truncated or closed since the pass began.
        The old segments go to the graveyard: their descriptors stay open for
        ``file.delete.delay.ms`` so in-flight reads of them complete. The caller fsyncs the
        directory and drops the range file afterwards (:func:`~strom.storage.swap.finish_swap`;
        a crash before that is handled by the load-time recovery).
        """
        with self._lock:
            segments = self._segments
            start = -1
            for i, segment in enumerate(segments):
                if segment is old[0]:
                    start = i
                    break
            end = start + len(old)
            if (self.cleaning_invalidated(generation) or start < 0
                    or end >= len(segments) or segments[start:end] != old
                    or old[0].base_offset != base_offset):
                discard_swap(self.directory, base_offset)
                return None
            old[0].detach()  # its files are replaced by the renames below: never reopen them
            for segment in old[1:]:
                segment.unlink()
            rename_segment_files(self.directory, base_offset, SWAP_SUFFIX, "")
            # The range file stays until the caller's directory fsync (finish_swap).
            settings = self._settings
            new, _ = LogSegment.open(
                self.directory, base_offset, index_interval_bytes=settings.index_interval_bytes,
                max_index_bytes=settings.max_index_bytes, now_ms=self.clock.now_ms(),
            )
            self._segments = [*segments[:start], new, *segments[end:]]
            self._bases = [*self._bases[:start], base_offset, *self._bases[end:]]
            self._graveyard.bury(old, self._burial_deadline(), unlink=False)
            self._dir_dirty = True
            return new

    def _stop_cleaning(self) -> None:
        """Abort an in-flight cleaning pass and wait until the cleaner thread dropped it."""
        self._abort_cleaning = True
        with self._cleaning:
            pass

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segments)})")



def _check_verified(headers: list[BatchHeader], state: ProducerStateManager,
                    guard: VerificationGuard | None) -> None:
    """A leader's transactional data batch either joins its producer's open transaction
    here or presents the guard of a verification (see :meth:`Log.append`)."""
    for header in headers:
        pid = header.producer_id
        if (pid >= 0 and header.is_transactional and not header.is_control
                and not state.is_ongoing(pid) and not state.verifications.verifies(pid, guard)):
            raise InvalidTxnStateError("Record was not part of an ongoing transaction")


def _marker_reader(buf: memoryview) -> Callable[[BatchHeader], EndTxnMarker | None]:
    """Decodes the markers of the control batches in ``buf`` (headers relative to it)."""
    return lambda header: read_end_txn_marker(buf, header)


def _collect_aborted(segments: list[LogSegment], slot: int, start_offset: int,
                     upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start_offset, upper_bound)`` from the transaction
    indexes of ``segments[slot:]``, until one index says the search is complete."""
    found: list[AbortedTxn] = []
    for segment in segments[slot:]:
        if not len(segment.txn_index):
            continue
        txns, complete = segment.txn_index.collect(start_offset, upper_bound)
        found.extend(txns)
        if complete:
            break
    return found


def make_new_log_files(directory: Path, topic_id: uuid.UUID | None, base_offset: int
                       ) -> io.FileIO:
    """The files of a new log in ``directory``, which the caller has just made (empty):
    ``partition.metadata`` naming ``topic_id`` (not fsynced: :meth:`Log.sync_metadata`) and
    the first segment's empty ``.log``, returned open for :meth:`Log.create_new`. System
    calls only, so any thread may make them (a busy disk then holds no event loop, and the
    thread hardly holds the GIL); the caller removes the directory if this fails."""
    if topic_id is not None:
        partition_metadata.write_new(directory, topic_id)
    path = directory / file_name(base_offset, LOG_SUFFIX)
    return default_pool().new_file(path)


def new_log_files_item(directory: Path, topic_id: uuid.UUID | None, base_offset: int
                       ) -> log_maker.Item:
    """:func:`make_new_log_files` as an item for :class:`~strom.storage.log_maker.LogMaker`
    (the directory is made there too)."""
    meta = partition_metadata.encode(topic_id) if topic_id is not None else b""
    return (str(directory),
            partition_metadata.PARTITION_METADATA_FILE if topic_id is not None else None,
            meta, file_name(base_offset, LOG_SUFFIX))


def open_made_log_file(directory: Path, base_offset: int) -> io.FileIO:
    """The first segment's ``.log`` that the log maker made in ``directory``, open as
    :func:`make_new_log_files` returns it."""
    return default_pool().new_file(directory / file_name(base_offset, LOG_SUFFIX))


def _stored_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id in ``directory``'s ``partition.metadata``; a damaged file is reported
    and read as no id (the owner adopts the log again rather than lose its records)."""
    try:
        return partition_metadata.read_topic_id(directory)
    except CorruptFileError as exc:
        log.warning("%s: ignoring a damaged %s: %s", directory.name,
                    partition_metadata.PARTITION_METADATA_FILE, exc)
        return None
