"""In-memory twins for the coordinator's seams: a manual scheduler and an offsets log."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable, Iterator

from strom.common.clock import ManualClock
from strom.coordinator.group.coordinator import GroupCoordinator, GroupSettings
from strom.coordinator.group.log import RawRecord


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Timers that fire only when :meth:`advance` moves the clock past them."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._timers: list[tuple[int, int, Callable[[], None], Handle]] = []
        self._seq = itertools.count()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        due = self.clock.now_ms() + max(0, delay_ms)
        heapq.heappush(self._timers, (due, next(self._seq), callback, handle))
        return handle

    def advance(self, ms: int) -> None:
        target = self.clock.now_ms() + ms
        while self._timers and self._timers[0][0] <= target:
            due, _, callback, handle = heapq.heappop(self._timers)
            self.clock.advance(max(0, due - self.clock.now_ms()))
            if not handle.cancelled:
                callback()
        self.clock.advance(target - self.clock.now_ms())


class MemoryOffsetsLog:
    def __init__(self) -> None:
        self.partitions: dict[int, list[RawRecord]] = {}
        self.fail = False

    def append(self, partition: int, records: list[RawRecord], now_ms: int) -> (
        Awaitable[None] | None
    ):
        if self.fail:
            from strom.common.errors import KafkaStorageError

            raise KafkaStorageError("disk gone")
        self.partitions.setdefault(partition, []).extend(records)
        return None

    def read(self, partition: int) -> Iterator[RawRecord]:
        yield from self.partitions.get(partition, [])


SETTINGS = GroupSettings(partitions=5, min_session_timeout_ms=1000, initial_rebalance_delay_ms=0)


def make_coordinator(
    settings: GroupSettings = SETTINGS, log: MemoryOffsetsLog | None = None,
    clock: ManualClock | None = None,
) -> tuple[GroupCoordinator, ManualScheduler, MemoryOffsetsLog]:
    clock = clock or ManualClock()
    scheduler = ManualScheduler(clock)
    log = log or MemoryOffsetsLog()
    coordinator = GroupCoordinator(log, scheduler, clock, settings)
    coordinator.load()
    return coordinator, scheduler, log
