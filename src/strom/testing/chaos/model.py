"""The plain values the chaos harness passes between its parts: what a reader saw, what a
replica's log holds, a partition's leader / ISR state as ZooKeeper showed it.

All frozen and JSON-friendly, so the checker stays a pure function over them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """One record as a consumer (or a replica's log) returned it; ``value`` decoded as UTF-8."""

    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """One broker's copy of one partition, read from its data directory after it stopped.

    ``records`` are the data records in offset order (control batches skipped);
    ``log_start`` the first offset the log holds (its first segment's base offset if no
    checkpoint says more); ``high_watermark`` the broker's ``replication-offset-checkpoint``
    entry (None if it has none); ``problem`` why reading stopped early (a torn tail, a CRC
    mismatch), None when every segment was read to its end; ``topic_id`` the topic id its
    ``partition.metadata`` names (Kafka's text form; None without the file); ``epochs`` the
    leader epochs of its batches as ``(leader epoch, first offset)`` runs in offset order (a
    leader-epoch cache rebuilt from the batches, control batches included): which leader
    appended each offset."""

    broker: int
    partition: int
    records: tuple[ReadRecord, ...]
    log_start: int
    high_watermark: int | None
    problem: str | None = None
    topic_id: str | None = None
    epochs: tuple[tuple[int, int], ...] = ()

    @property
    def log_end(self) -> int:
        return self.records[-1].offset + 1 if self.records else self.log_start

    def leader_epoch_at(self, offset: int) -> int | None:
        """The leader epoch of the batch holding ``offset`` (None if this copy lacks it)."""
        if not self.log_start <= offset < self.log_end:
            return None
        found = None
        for epoch, start in self.epochs:
            if start > offset:
                break
            found = epoch
        return found


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's ``/brokers/topics/<t>/partitions/<p>/state`` as observed at ``time``
    (seconds since the history began); ``version`` is the znode's version, so a jump of more
    than one means states were missed in between. ``written``: when ZooKeeper wrote it, on
    the same axis (from the znode's mtime; None when unknown) — at or before ``time``: a
    poll sees a write late, and a leader holds the ISR it wrote itself from the write on."""

    time: float
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int
    written: float | None = None
