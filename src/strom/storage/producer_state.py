"""Producer state of one partition: epochs, recent sequences, duplicate detection, the first
offsets of ongoing transactions, and the transactions markers end (commit or abort)."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from strom.protocol.records.batch import BatchHeader, crc32c
from strom.protocol.records.control import ControlType, EndTxnMarker
from strom.storage.files import (
    SNAPSHOT_SUFFIX,
    CorruptFileError,
    atomic_write,
    file_name,
    offset_from_name,
    unlink_quietly,
)
from strom.storage.txn_index import AbortedTxn
from strom.storage.txn_verification import VerificationGuards

log = logging.getLogger("strom.storage.producer_state")

BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
MAX_SEQUENCE = 2**31 - 1
SNAPSHOT_VERSION = 2  # written; version 1 (before transactions) is still read
NO_OFFSET = -1

_PREFIX = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
# Per producer. v1: producer id, epoch, last timestamp, batch count.
# v2: producer id, epoch, last timestamp, coordinator epoch, ongoing txn first offset, count.
_PRODUCER = {1: struct.Struct(">qhqb"), 2: struct.Struct(">qhqiqb")}
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    """One appended batch of a producer, kept to answer retries of it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


#: Decodes the commit / abort marker of a control batch (None: an emptied batch, or not a
#: marker); supplied by the log, which holds the batch's bytes.
MarkerReader = Callable[[BatchHeader], EndTxnMarker | None]


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction ended by a control batch (commit or abort marker) of its producer."""

    producer_id: int
    first_offset: int  # of its first transactional batch (raised to the log start if cut)
    last_offset: int  # of the marker
    aborted: bool = False


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer's epoch, its last (up to five) batches, oldest first, and its transaction.

    ``txn_first_offset`` is the first offset of the producer's ongoing transaction (its first
    transactional batch since its last marker), or None. ``coordinator_epoch`` is the epoch of
    the transaction coordinator that wrote the producer's last marker, -1 while unknown: a
    marker from an older coordinator is fenced (TRANSACTION_COORDINATOR_FENCED).
    """

    producer_id: int
    epoch: int = NO_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1
    txn_first_offset: int | None = None
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def set_epoch(self, epoch: int) -> None:
        """A different epoch starts over: its batches replace the old epoch's."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = []

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        self.set_epoch(epoch)
        self.batches.append(meta)
        if len(self.batches) > BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = meta.timestamp

    def apply(self, header: BatchHeader, marker: EndTxnMarker | None = None
              ) -> CompletedTxn | None:
        """Take ``header``'s batch (already validated) into this state; returns the transaction
        it ends, if it is a marker (``marker``, decoded by the caller) of an ongoing one.

        A transactional data batch starts a transaction unless one is ongoing; a commit or
        abort marker ends the ongoing one and records its coordinator's epoch. A control
        batch without a marker (its record was removed by compaction) ends nothing, as in
        Kafka.
        """
        if header.is_control:
            self.set_epoch(header.producer_epoch)
            self.last_timestamp = header.max_timestamp
            if marker is None:
                return None
            self.coordinator_epoch = marker.coordinator_epoch
            first = self.txn_first_offset
            if first is None:
                return None  # a marker of a transaction without data here: nothing to end
            self.txn_first_offset = None
            return CompletedTxn(self.producer_id, first, header.base_offset,
                                marker.control_type is ControlType.ABORT)
        self.add_batch(header.producer_epoch, _metadata(header))
        if header.is_transactional and self.txn_first_offset is None:
            self.txn_first_offset = header.base_offset
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``next_seq`` follows ``last_seq`` (sequences wrap from 2^31-1 to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


def _metadata(header: BatchHeader) -> BatchMetadata:
    return BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset,
                         header.last_offset, header.max_timestamp)


@dataclass(slots=True)
class PendingUpdate:
    """:meth:`ProducerStateManager.validate`'s result, applied by ``commit`` once written."""

    entries: dict[int, ProducerStateEntry] = field(default_factory=dict)
    completed: list[CompletedTxn] = field(default_factory=list)
    #: producers with a transactional batch (data or marker) in the append
    transactional: set[int] = field(default_factory=set)


class ProducerStateManager:
    """Per-producer state of one partition, validated on append and rebuilt after restarts.

    Rules for a client batch with ``producer_id >= 0`` (those of Kafka's broker since KIP-360):

    * the same epoch and (first, last) sequence as one of the producer's last five batches is
      a retry: nothing is written and the original offsets are returned (:meth:`find_duplicate`);
    * an epoch below the producer's current one: InvalidProducerEpochError (data and markers);
    * a new epoch of a known producer must start at sequence 0;
    * within an epoch the first sequence must follow the last one (wrapping after 2^31-1),
      else OutOfOrderSequenceNumberError;
    * a producer without state (new, or its state expired / was deleted with the log) is
      accepted at any sequence;
    * control batches (transaction markers, base sequence -1) have no sequence to check; a
      marker whose coordinator epoch is older than the one of the producer's last marker:
      TransactionCoordinatorFencedError (Kafka's ``appendEndTxnMarker``: producer epoch
      first, then coordinator epoch);
    * a non-transactional data batch from a producer with an ongoing transaction:
      InvalidTxnStateError.

    Transactions (Kafka's ``ongoingTxns`` / ``unreplicatedTxns``): a producer's first
    transactional data batch after its last marker starts a transaction at that batch's base
    offset; the producer's next control batch ends it. :meth:`ongoing_transactions` maps each
    producer with an open transaction to its first offset. A transaction ended by a marker
    stays *unstable* until the owner reports a high watermark above the marker
    (:meth:`on_high_watermark`): until then the decision could still be lost with this replica.
    :meth:`first_unstable_offset` is the smallest first offset of an ongoing or unstable
    transaction; the last stable offset is ``min(high watermark, first_unstable_offset())``.
    A transaction ended by an *abort* marker is returned as an
    :class:`~strom.storage.txn_index.AbortedTxn` by :meth:`commit` / :meth:`replay`, for the
    log's transaction index, with the last stable offset Kafka records there: the first
    offset of the oldest transaction of another producer still open, else the marker's
    offset + 1 (Kafka's ``lastStableOffset(completedTxn)``). Markers are decoded by the
    caller (a :data:`MarkerReader`): producer state only sees batch headers.
    When the log start passes a transaction's first offset the transaction stays open and its
    first offset becomes the log start (what is left of it); a producer with an open
    transaction never expires and is not evicted with its batches (its marker is still due).

    KIP-890 verification (:mod:`strom.storage.txn_verification`): :attr:`verifications` holds
    the guard of each producer whose first transactional batch here is being verified with
    its coordinator; every transactional batch of the producer committed or replayed clears
    it, and :meth:`remove_expired` drops guards never used.

    State changes only through :meth:`commit` (after the batches were written) and
    :meth:`replay` (rebuilding from the log, and follower appends), so a rejected append
    changes nothing. Mutate :attr:`producers` only through these methods: the transaction
    maps are derived from it.

    On disk: ``<offset, 20 digits>.snapshot`` in the partition directory holds the state of
    all batches below ``offset``; big-endian::

        int16  version (2; version 1 files are read too)
        uint32 CRC-32C of everything after this field
        int32  producer count, then per producer:
            int64 producer id, int16 epoch, int64 last timestamp,
            [v2 only: int32 coordinator epoch (-1 unknown),
                      int64 first offset of the ongoing transaction (-1 none)]
            int8 batch count,
            then per batch: int32 first seq, int32 last seq, int64 first offset,
                            int64 last offset, int64 max timestamp

    Transactions completed but still unstable are not in the snapshot (as in Kafka): the
    owner re-reports its high watermark after a restart or truncation.

    Snapshots are taken at segment roll and on close; after a restart the newest readable
    snapshot at or below the log end is loaded and the batch headers after it are replayed
    (headers carry producer id, epoch, sequences and the transactional / control bits, so no
    record is decoded). A snapshot with a bad CRC is deleted and an older one used.

    Thread-safety: owned by the thread that appends to the log.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the state reflects every batch below this offset
        # producer id -> first offset, for each entry whose txn_first_offset is set
        self._ongoing: dict[int, int] = {}
        # ended transactions whose marker is not yet below the reported high watermark,
        # in marker-offset order
        self._unstable: deque[CompletedTxn] = deque()
        self.verifications = VerificationGuards()
        # the snapshot file known to be durable (found at load, or written with fsync)
        self._durable: int | None = None

    # -- transactions ---------------------------------------------------------------------
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction with no marker yet (a copy)."""
        return dict(self._ongoing)

    def is_ongoing(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has a transaction with no marker yet in this partition."""
        return producer_id in self._ongoing

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of a transaction that is ongoing, or ended by a marker
        not yet below the high watermark reported to :meth:`on_high_watermark`; None if no
        transaction is either."""
        if not self._ongoing and not self._unstable:
            return None
        first = min(self._ongoing.values(), default=None)
        for txn in self._unstable:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def on_high_watermark(self, high_watermark: int) -> None:
        """The replica's high watermark moved: transactions whose marker is below it are
        decided for good and stop holding the first unstable offset back."""
        unstable = self._unstable
        while unstable and unstable[0].last_offset < high_watermark:
            unstable.popleft()

    def _track(self, entry: ProducerStateEntry) -> None:
        """Mirror ``entry``'s transaction into :attr:`_ongoing`."""
        if entry.txn_first_offset is None:
            self._ongoing.pop(entry.producer_id, None)
        else:
            self._ongoing[entry.producer_id] = entry.txn_first_offset

    def _reset_transactions(self) -> None:
        self._ongoing = {pid: e.txn_first_offset for pid, e in self.producers.items()
                         if e.txn_first_offset is not None}
        self._unstable = deque()

    # -- validation (no state change) -----------------------------------------------------
    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The stored batch ``header`` is a retry of, if any."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(header.producer_epoch, header.base_sequence,
                                    header.last_sequence)

    def validate(self, headers: Iterable[BatchHeader], read_marker: MarkerReader | None = None,
                 *, check_sequences: bool = True
                 ) -> PendingUpdate:
        """Check every idempotent batch in order; returns the pending updates for :meth:`commit`.

        Batch offsets in ``headers`` must already be the ones that will be written.
        ``read_marker`` decodes control batches (without it they end nothing).
        ``check_sequences`` False for a coordinator's batches (Kafka checks sequences for
        client appends only; epochs are checked for every origin).
        """
        pending = PendingUpdate()
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            updated = pending.entries.get(pid)
            if updated is None:
                # Like Kafka's updated entry: the current epoch and transaction, no batches of
                # its own yet.
                updated = ProducerStateEntry(pid)
                if current is not None:
                    updated.epoch = current.epoch
                    updated.txn_first_offset = current.txn_first_offset
                    updated.coordinator_epoch = current.coordinator_epoch
                pending.entries[pid] = updated
            epoch = header.producer_epoch
            if epoch < updated.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {updated.epoch}"
                )
            marker = None
            if header.is_control:
                marker = read_marker(header) if read_marker is not None else None
                if marker is not None and marker.coordinator_epoch < updated.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"marker of producer {pid} at offset {header.base_offset} comes from "
                        f"coordinator epoch {marker.coordinator_epoch}, older than "
                        f"{updated.coordinator_epoch}"
                    )
            elif check_sequences:
                self._check_sequence(header, current, updated)
                if updated.txn_first_offset is not None and not header.is_transactional:
                    raise InvalidTxnStateError(
                        f"producer {pid} sent a non-transactional batch at offset "
                        f"{header.base_offset} during its transaction"
                    )
            completed = updated.apply(header, marker)
            if completed is not None:
                pending.completed.append(completed)
            if header.is_transactional:
                pending.transactional.add(pid)
        return pending

    @staticmethod
    def _check_sequence(header: BatchHeader, current: ProducerStateEntry | None,
                        updated: ProducerStateEntry) -> None:
        pid = header.producer_id
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        if epoch != updated.epoch:
            if first_seq != 0 and updated.epoch != NO_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} starts epoch {epoch} at sequence {first_seq}, not 0"
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif current is not None and epoch == current.epoch:
            last_seq = current.last_seq
        else:
            last_seq = -1
        known = current is not None and current.epoch != NO_EPOCH
        if known and not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"producer {pid} sent sequence {first_seq} after {last_seq}"
            )

    # -- state changes --------------------------------------------------------------------
    def commit(self, pending: PendingUpdate, end_offset: int) -> list[AbortedTxn]:
        """Apply :meth:`validate`'s result once the batches are in the log; returns the
        transactions it aborted, for the transaction index."""
        for pid, update in pending.entries.items():
            entry = self.producers.get(pid)
            if entry is None:
                self.producers[pid] = entry = update
            else:
                entry.set_epoch(update.epoch)
                for meta in update.batches:
                    entry.add_batch(update.epoch, meta)
                entry.last_timestamp = max(entry.last_timestamp, update.last_timestamp)
                entry.txn_first_offset = update.txn_first_offset
                entry.coordinator_epoch = update.coordinator_epoch
            self._track(entry)
        for pid in pending.transactional:
            # the transaction is open here now (data) or over (marker): no guard needed
            self.verifications.clear(pid)
        completed = pending.completed
        self._unstable.extend(completed)
        self.map_end_offset = end_offset
        if not completed:
            return []
        return [self._aborted(txn, completed[i + 1:]) for i, txn in enumerate(completed)
                if txn.aborted]

    def replay(self, header: BatchHeader, marker: EndTxnMarker | None = None
               ) -> AbortedTxn | None:
        """Apply a batch read back from the log, or appended as a follower (no validation:
        it was valid when the leader wrote it; ``marker`` is a control batch's decoded
        marker). Returns the transaction it aborted, for the transaction index."""
        aborted = None
        if header.producer_id >= 0:
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
            completed = entry.apply(header, marker)
            self._track(entry)
            if header.is_transactional:
                self.verifications.clear(header.producer_id)
            if completed is not None:
                self._unstable.append(completed)
                if completed.aborted:
                    aborted = self._aborted(completed)
        self.map_end_offset = header.next_offset
        return aborted

    def _aborted(self, txn: CompletedTxn, still_open: Iterable[CompletedTxn] = ()
                 ) -> AbortedTxn:
        """``txn`` as a transaction-index entry; ``still_open``: transactions ended later in
        the same append (still ongoing when ``txn``'s marker was written)."""
        pid = txn.producer_id
        firsts = [first for other, first in self._ongoing.items() if other != pid]
        firsts.extend(t.first_offset for t in still_open if t.producer_id != pid)
        return AbortedTxn(pid, txn.first_offset, txn.last_offset,
                          min(firsts, default=txn.last_offset + 1))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``), except
        those with an ongoing transaction, and verification guards taken that long ago."""
        self.verifications.expire(now_ms, expiration_ms)
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms and e.txn_first_offset is None]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def evict_before(self, log_start_offset: int) -> None:
        """The log start moved up (DeleteRecords, retention): forget producers whose last batch
        is below it, unless their transaction is ongoing; transactions that began below it now
        begin at it; ended transactions whose marker is below it are no longer unstable."""
        gone = [pid for pid, e in self.producers.items()
                if e.batches and e.last_offset < log_start_offset and e.txn_first_offset is None]
        for pid in gone:
            del self.producers[pid]
        for entry in self.producers.values():
            first = entry.txn_first_offset
            if first is not None and first < log_start_offset:
                entry.txn_first_offset = log_start_offset
                self._ongoing[entry.producer_id] = log_start_offset
        self._unstable = deque(
            CompletedTxn(t.producer_id, max(t.first_offset, log_start_offset), t.last_offset,
                         t.aborted)
            for t in self._unstable if t.last_offset >= log_start_offset
        )

    def clear(self, offset: int) -> None:
        self.producers.clear()
        self._reset_transactions()
        self.map_end_offset = offset

    # -- snapshots ------------------------------------------------------------------------
    def snapshot_path(self, offset: int) -> Path:
        return self.directory / file_name(offset, SNAPSHOT_SUFFIX)

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        offsets = []
        for name in os.listdir(self.directory):
            offset = offset_from_name(name, SNAPSHOT_SUFFIX)
            if offset is not None:
                offsets.append(offset)
        return sorted(offsets)

    def take_snapshot(self, *, sync: bool = True) -> Path:
        """Write the state at :attr:`map_end_offset` to its snapshot file (atomically).

        A durable snapshot that already holds exactly this state (a log closed as it was
        opened) is left as it is, and a log that never held a record gets none: closing many
        idle or new logs costs no fsync each."""
        offset = self.map_end_offset
        path = self.snapshot_path(offset)
        if offset == 0 and not self.producers and not self.snapshot_offsets():
            return path  # an empty log's state: nothing to replay without it either
        data = encode_snapshot(self.producers.values())
        if sync and self._durable == offset:
            with contextlib.suppress(OSError):
                if path.read_bytes() == data:
                    return path
        atomic_write(path, data, sync=sync)
        self._durable = offset if sync else None
        return path

    def load(self, log_end_offset: int, at_or_below: int | None = None) -> int:
        """Load the newest good snapshot at or below ``log_end_offset`` (and ``at_or_below``,
        when the replay must start there or earlier); returns its offset (the point to replay
        the log from), or -1 if there is none (state is then empty).

        Snapshots above ``log_end_offset`` describe data that is gone and are deleted.
        Ongoing transactions come back with their producers; none is unstable after a load.
        """
        self.producers = {}
        self._reset_transactions()
        limit = log_end_offset if at_or_below is None else min(log_end_offset, at_or_below)
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > log_end_offset:
                unlink_quietly(path)
                continue
            if offset > limit:
                continue
            try:
                self.producers = {e.producer_id: e for e in decode_snapshot(path.read_bytes())}
            except (CorruptFileError, OSError) as exc:
                log.warning("ignoring producer snapshot %s: %s", path, exc)
                unlink_quietly(path)
                continue
            self._reset_transactions()
            self.map_end_offset = offset
            self._durable = offset  # it was on disk at open
            return offset
        self.map_end_offset = 0
        return -1

    def delete_snapshots_after(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap > offset:
                unlink_quietly(self.snapshot_path(snap))

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap < offset:
                unlink_quietly(self.snapshot_path(snap))


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The snapshot file bytes for ``entries`` (format in :class:`ProducerStateManager`;
    always the current :data:`SNAPSHOT_VERSION`)."""
    items = list(entries)
    producer = _PRODUCER[SNAPSHOT_VERSION]
    body = [_COUNT.pack(len(items))]
    for e in items:
        txn_first = NO_OFFSET if e.txn_first_offset is None else e.txn_first_offset
        body.append(producer.pack(e.producer_id, e.epoch, e.last_timestamp,
                                  e.coordinator_epoch, txn_first, len(e.batches)))
        for b in e.batches:
            body.append(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                                    b.timestamp))
    payload = b"".join(body)
    return _PREFIX.pack(SNAPSHOT_VERSION, crc32c(payload)) + payload


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse snapshot bytes of version 1 or 2; CorruptFileError on another version, a bad CRC
    or length."""
    if len(data) < _PREFIX.size + _COUNT.size:
        raise CorruptFileError("producer snapshot too short")
    version, crc = _PREFIX.unpack_from(data, 0)
    producer = _PRODUCER.get(version)
    if producer is None:
        raise CorruptFileError(f"unsupported producer snapshot version {version}")
    payload = memoryview(data)[_PREFIX.size:]
    if crc32c(payload) != crc:
        raise CorruptFileError("producer snapshot CRC mismatch")
    try:
        (count,) = _COUNT.unpack_from(payload, 0)
        pos = _COUNT.size
        entries = []
        for _ in range(count):
            fields = producer.unpack_from(payload, pos)
            pos += producer.size
            if version == 1:
                pid, epoch, last_ts, n = fields
                coordinator_epoch, txn_first = -1, NO_OFFSET
            else:
                pid, epoch, last_ts, coordinator_epoch, txn_first, n = fields
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_BATCH.unpack_from(payload, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(
                pid, epoch, batches, last_ts,
                txn_first_offset=None if txn_first < 0 else txn_first,
                coordinator_epoch=coordinator_epoch,
            ))
    except struct.error:
        raise CorruptFileError("producer snapshot truncated") from None
    if pos != len(payload):
        raise CorruptFileError("trailing bytes in producer snapshot")
    return entries
