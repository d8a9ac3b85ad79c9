"""In-memory twin of the coordinator's offsets log (the manual scheduler lives in
strom.testing.scheduler)."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator

from strom.common.clock import ManualClock
from strom.coordinator.group.coordinator import GroupCoordinator, GroupSettings
from strom.coordinator.group.log import RawRecord
from strom.testing.scheduler import ManualScheduler


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
