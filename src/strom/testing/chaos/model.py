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
    ``partition.metadata`` names (Kafka's text form; None without the file)."""

    broker: int
    partition: int
    records: tuple[ReadRecord, ...]
    log_start: int
    high_watermark: int | None
    problem: str | None = None
    topic_id: str | None = None

    @property
    def log_end(self) -> int:
        return self.records[-1].offset + 1 if self.records else self.log_start


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's ``/brokers/topics/<t>/partitions/<p>/state`` as observed at ``time``
    (seconds since the history began); ``version`` is the znode's version, so a jump of more
    than one means states were missed in between."""

    time: float
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int
