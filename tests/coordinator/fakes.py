"""Helpers for driving the group coordinator by hand: a manual scheduler, the in-memory
partition writer, and one-line wrappers for the callback-style operations."""

from __future__ import annotations

import asyncio

from strom.common.clock import ManualClock
from strom.coordinator.group.codes import ILLEGAL_GENERATION
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import CommittedOffset, GroupSettings, OffsetToCommit
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.runtime import ShardState
from strom.testing.partition_writer import MemoryPartitionWriter
from strom.testing.scheduler import ManualScheduler

SETTINGS = GroupSettings(partitions=5, min_session_timeout_ms=1000, initial_rebalance_delay_ms=0)


def settle(rounds: int = 5) -> None:
    """Run the current event loop until its ready callbacks are done (futures' callbacks,
    load tasks)."""
    loop = asyncio.get_event_loop()
    for _ in range(rounds):
        loop.run_until_complete(asyncio.sleep(0))


def load_all(c: GroupCoordinator, epoch: int = 0) -> None:
    for partition in range(c.settings.partitions):
        c.runtime.on_become_leader(partition, epoch)
    loop = asyncio.get_event_loop()
    for partition in range(c.settings.partitions):
        loop.run_until_complete(c.runtime.wait_loaded(partition))
        assert c.runtime.state(partition) is ShardState.ACTIVE


def make_coordinator(
    settings: GroupSettings = SETTINGS, writer: MemoryPartitionWriter | None = None,
    clock: ManualClock | None = None, *, load: bool = True,
) -> tuple[GroupCoordinator, ManualScheduler, MemoryPartitionWriter]:
    clock = clock or ManualClock()
    scheduler = ManualScheduler(clock)
    loop = asyncio.get_event_loop()
    writer = writer or MemoryPartitionWriter(loop)
    coordinator = GroupCoordinator(writer, scheduler, clock, settings, loop=loop)
    if load:
        load_all(coordinator)
    return coordinator, scheduler, writer


def commit(c: GroupCoordinator, group: str = "g", generation: int = -1, member: str = "",
           offsets: list[OffsetToCommit] | None = None, *, instance: str | None = None,
           expire: int = -1, not_found: int = ILLEGAL_GENERATION) -> list[list[int]]:
    """The commit's answers so far (empty while its write is pending)."""
    out: list[list[int]] = []
    c.commit_offsets(group_id=group, generation=generation, member_id=member,
                     group_instance_id=instance,
                     offsets=offsets or [OffsetToCommit("t", 0, 10, -1, "")],
                     expire_timestamp=expire, group_not_found_error=not_found,
                     callback=out.append)
    return out


def fetch(c: GroupCoordinator, group: str, partitions: list[tuple[str, int]] | None
          ) -> list[CommittedOffset]:
    error, offsets = c.fetch_offsets(group, partitions)
    assert error == 0
    return offsets


def fetched(c: GroupCoordinator, group: str, topic: str = "t", partition: int = 0) -> int:
    return fetch(c, group, [(topic, partition)])[0].offset


def delete_groups(c: GroupCoordinator, groups: list[str]) -> list[list[int]]:
    out: list[list[int]] = []
    c.delete_groups(groups, out.append)
    return out


def delete_offsets(c: GroupCoordinator, group: str, partitions: list[tuple[str, int]]
                   ) -> list[tuple[int, list[int]]]:
    out: list[tuple[int, list[int]]] = []
    c.delete_offsets(group, partitions, lambda top, errors: out.append((top, errors)))
    return out


def offsets_partition(c: GroupCoordinator, group: str) -> tuple[str, int]:
    return OFFSETS_TOPIC, c.partition_for(group)
