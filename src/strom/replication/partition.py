"""A partition this broker leads: its log, leader epoch and the waiters for new data.

Single-broker today: the ISR is just this broker, so the high watermark follows the log end
offset after each append. The leader epoch and high-watermark handling live here so that
replication (followers, ISR changes) arrives without changing the handlers.
"""

from __future__ import annotations

import uuid

from strom.common.clock import Clock
from strom.common.types import TopicPartition
from strom.replication.purgatory import DataWaiters
from strom.storage.log import AppendResult, Log, ReadResult


class Partition:
    """Owned by the event-loop thread (the broker's ReplicaManager)."""

    __slots__ = ("clock", "high_watermark", "leader_epoch", "log", "topic_id", "tp", "waiters")

    def __init__(
        self,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        log: Log,
        leader_epoch: int,
        waiters: DataWaiters,
        clock: Clock,
    ) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.waiters = waiters
        self.clock = clock
        self.high_watermark = log.log_end_offset  # single replica: the log end
        log.stable_end = self.high_watermark

    def append_as_leader(self, records: memoryview) -> AppendResult:
        result = self.log.append(records, leader_epoch=self.leader_epoch,
                                 now_ms=self.clock.now_ms())
        if not result.duplicate:
            self.high_watermark = self.log.log_end_offset
            self.log.stable_end = self.high_watermark
            self.waiters.notify(self.tp)
        return result

    def read(
        self, offset: int, max_bytes: int, *, read_committed: bool, min_one: bool
    ) -> ReadResult:
        upper = self.last_stable_offset
        return self.log.read(offset, max_bytes, upper_bound=upper, min_one=min_one)

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark
