"""An in-memory twin of :class:`strom.coordinator.runtime.PartitionWriter`.

Each partition is a list of batches with offsets assigned on append, like a log. Tests choose
how appends end:

* **committed at once** (the default): :meth:`MemoryPartitionWriter.append` returns the last
  offset, as the replica manager does when nothing needs waiting for;
* **synchronous refusal**: while :attr:`MemoryPartitionWriter.fail_appends` holds an error,
  every append raises it and nothing is appended (full disk, not the leader, too large);
* **held**: with :attr:`MemoryPartitionWriter.hold` set, appends are written to the log and
  return a future the test resolves in order with :meth:`commit`, or fails with :meth:`fail`
  — the writer giving up on a write whose fate it cannot know (fsync failure, leadership
  moved). Held writes never time out (the broker's writer has no time limit either: the
  runtime times out its answers). A write that failed stays in the log, as a locally
  appended batch does in Kafka (a later load replays it).

The KIP-890 guard each append carried is kept in :attr:`MemoryPartitionWriter.guards`.
Single-threaded; futures belong to the loop given (or the running one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from strom.common.errors import KafkaError
from strom.common.types import TopicPartition
from strom.coordinator.runtime import ReplayRecord, replay_records
from strom.protocol.records.batch import parse_header, patch_base_offset
from strom.storage.txn_verification import VerificationGuard


@dataclass(slots=True, eq=False)
class HeldWrite:
    tp: TopicPartition
    last_offset: int
    future: asyncio.Future[int]


class MemoryPartitionWriter:
    """Partitions as lists of batches; see the module docstring for the failure modes."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self.batches: dict[TopicPartition, list[bytes]] = {}
        self.fail_appends: KafkaError | None = None
        self.hold = False
        self.held: list[HeldWrite] = []
        self.appends = 0
        self.guards: list[VerificationGuard | None] = []

    def log_end(self, tp: TopicPartition) -> int:
        batches = self.batches.get(tp)
        return parse_header(batches[-1]).next_offset if batches else 0

    def append(self, tp: TopicPartition, batch: bytes, *,
               verification_guard: VerificationGuard | None = None
               ) -> int | asyncio.Future[int]:
        if self.fail_appends is not None:
            raise self.fail_appends
        data = bytearray(batch)
        patch_base_offset(data, 0, self.log_end(tp))
        self.batches.setdefault(tp, []).append(bytes(data))
        self.appends += 1
        self.guards.append(verification_guard)
        last = parse_header(data).last_offset
        if not self.hold:
            return last
        loop = self._loop or asyncio.get_running_loop()
        held = HeldWrite(tp, last, loop.create_future())
        self.held.append(held)
        return held.future

    def _take(self, count: int | None) -> list[HeldWrite]:
        count = len(self.held) if count is None else count
        taken, self.held = self.held[:count], self.held[count:]
        return taken

    def commit(self, count: int | None = None) -> None:
        """Resolve the oldest ``count`` held writes (all by default) as committed."""
        for held in self._take(count):
            if not held.future.done():
                held.future.set_result(held.last_offset)

    def fail(self, error: KafkaError, count: int | None = None) -> None:
        """Give up on the oldest ``count`` held writes (all by default) with ``error``."""
        for held in self._take(count):
            if not held.future.done():
                held.future.set_exception(error)

    def read_batches(self, tp: TopicPartition) -> Iterator[list[ReplayRecord]]:
        """To the end as it is at the last batch read (as the broker's writer)."""
        read = 0
        while read < len(self.batches.get(tp, [])):
            yield from replay_records(self.batches[tp][read])
            read += 1

    def records(self, tp: TopicPartition) -> list[ReplayRecord]:
        return [r for batch in self.read_batches(tp) for r in batch]
