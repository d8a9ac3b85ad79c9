"""Idempotent-producer state of one partition: epochs, recent sequences, duplicate detection."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from strom.protocol.records.batch import BatchHeader, crc32c
from strom.storage.files import (
    SNAPSHOT_SUFFIX,
    CorruptFileError,
    atomic_write,
    file_name,
    offset_from_name,
    unlink_quietly,
)

log = logging.getLogger("strom.storage.producer_state")

BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
MAX_SEQUENCE = 2**31 - 1
SNAPSHOT_VERSION = 1

_PREFIX = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqb")  # producer id, epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    """One appended batch of a producer, kept to answer retries of it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer's epoch and its last (up to five) batches, oldest first."""

    producer_id: int
    epoch: int = NO_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1

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


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``next_seq`` follows ``last_seq`` (sequences wrap from 2^31-1 to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


def _metadata(header: BatchHeader) -> BatchMetadata:
    return BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset,
                         header.last_offset, header.max_timestamp)


class ProducerStateManager:
    """Per-producer state of one partition, validated on append and rebuilt after restarts.

    Rules for a client batch with ``producer_id >= 0`` (those of Kafka's broker since KIP-360):

    * the same epoch and (first, last) sequence as one of the producer's last five batches is
      a retry: nothing is written and the original offsets are returned (:meth:`find_duplicate`);
    * an epoch below the producer's current one: InvalidProducerEpochError;
    * a new epoch of a known producer must start at sequence 0;
    * within an epoch the first sequence must follow the last one (wrapping after 2^31-1),
      else OutOfOrderSequenceNumberError;
    * a producer without state (new, or its state expired / was deleted with the log) is
      accepted at any sequence.

    State changes only through :meth:`commit` (after the batches were written) and
    :meth:`replay` (rebuilding from the log), so a rejected append changes nothing.

    On disk: ``<offset, 20 digits>.snapshot`` in the partition directory holds the state of
    all batches below ``offset``; big-endian::

        int16  version (1)
        uint32 CRC-32C of everything after this field
        int32  producer count, then per producer:
            int64 producer id, int16 epoch, int64 last timestamp, int8 batch count,
            then per batch: int32 first seq, int32 last seq, int64 first offset,
                            int64 last offset, int64 max timestamp

    Snapshots are taken at segment roll and on close; after a restart the newest readable
    snapshot at or below the log end is loaded and the batch headers after it are replayed
    (headers carry producer id, epoch and sequences, so no record is decoded). A snapshot with
    a bad CRC is deleted and an older one used.

    Thread-safety: owned by the thread that appends to the log.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the state reflects every batch below this offset

    # -- validation (no state change) -----------------------------------------------------
    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The stored batch ``header`` is a retry of, if any."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(header.producer_epoch, header.base_sequence,
                                    header.last_sequence)

    def validate(self, headers: Iterable[BatchHeader]) -> dict[int, ProducerStateEntry]:
        """Check every idempotent batch in order; returns the pending updates for :meth:`commit`.

        Batch offsets in ``headers`` must already be the ones that will be written.
        """
        pending: dict[int, ProducerStateEntry] = {}
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            updated = pending.get(pid)
            if updated is None:
                # Like Kafka's updated entry: the current epoch, no batches of its own yet.
                updated = ProducerStateEntry(pid, current.epoch if current else NO_EPOCH)
                pending[pid] = updated
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            if epoch < updated.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {updated.epoch}"
                )
            if epoch != updated.epoch:
                if first_seq != 0 and updated.epoch != NO_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid} starts epoch {epoch} at sequence {first_seq}, not 0"
                    )
            else:
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
            if header.is_control:
                updated.set_epoch(epoch)
                updated.last_timestamp = header.max_timestamp
            else:
                updated.add_batch(epoch, _metadata(header))
        return pending

    # -- state changes --------------------------------------------------------------------
    def commit(self, pending: dict[int, ProducerStateEntry], end_offset: int) -> None:
        """Apply :meth:`validate`'s result once the batches are in the log."""
        for pid, update in pending.items():
            entry = self.producers.get(pid)
            if entry is None:
                self.producers[pid] = update
                continue
            entry.set_epoch(update.epoch)
            for meta in update.batches:
                entry.add_batch(update.epoch, meta)
            entry.last_timestamp = max(entry.last_timestamp, update.last_timestamp)
        self.map_end_offset = end_offset

    def replay(self, header: BatchHeader) -> None:
        """Apply a batch read back from the log (no validation: it was valid when written)."""
        if header.producer_id >= 0:
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
            if header.is_control:
                entry.set_epoch(header.producer_epoch)
                entry.last_timestamp = header.max_timestamp
            else:
                entry.add_batch(header.producer_epoch, _metadata(header))
        self.map_end_offset = header.next_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``)."""
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def evict_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch is below the new log start (DeleteRecords,
        retention)."""
        gone = [pid for pid, e in self.producers.items()
                if e.batches and e.last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]

    def clear(self, offset: int) -> None:
        self.producers.clear()
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
        """Write the state at :attr:`map_end_offset` to its snapshot file (atomically)."""
        path = self.snapshot_path(self.map_end_offset)
        atomic_write(path, encode_snapshot(self.producers.values()), sync=sync)
        return path

    def load(self, log_end_offset: int) -> int:
        """Load the newest good snapshot at or below ``log_end_offset``; returns its offset
        (the point to replay the log from), or -1 if there is none (state is then empty).

        Snapshots above ``log_end_offset`` describe data that is gone and are deleted.
        """
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > log_end_offset:
                unlink_quietly(path)
                continue
            try:
                self.producers = {e.producer_id: e for e in decode_snapshot(path.read_bytes())}
            except (CorruptFileError, OSError) as exc:
                log.warning("ignoring producer snapshot %s: %s", path, exc)
                unlink_quietly(path)
                continue
            self.map_end_offset = offset
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
    """The snapshot file bytes for ``entries`` (format in :class:`ProducerStateManager`)."""
    items = list(entries)
    body = [_COUNT.pack(len(items))]
    for e in items:
        body.append(_PRODUCER.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches)))
        for b in e.batches:
            body.append(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset,
                                    b.timestamp))
    payload = b"".join(body)
    return _PREFIX.pack(SNAPSHOT_VERSION, crc32c(payload)) + payload


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; CorruptFileError on a bad version, CRC or length."""
    if len(data) < _PREFIX.size + _COUNT.size:
        raise CorruptFileError("producer snapshot too short")
    version, crc = _PREFIX.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptFileError(f"unsupported producer snapshot version {version}")
    payload = memoryview(data)[_PREFIX.size:]
    if crc32c(payload) != crc:
        raise CorruptFileError("producer snapshot CRC mismatch")
    try:
        (count,) = _COUNT.unpack_from(payload, 0)
        pos = _COUNT.size
        entries = []
        for _ in range(count):
            pid, epoch, last_ts, n = _PRODUCER.unpack_from(payload, pos)
            pos += _PRODUCER.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_BATCH.unpack_from(payload, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(pid, epoch, batches, last_ts))
    except struct.error:
        raise CorruptFileError("producer snapshot truncated") from None
    if pos != len(payload):
        raise CorruptFileError("trailing bytes in producer snapshot")
    return entries
