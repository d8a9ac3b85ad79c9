"""ISR proposals reach the metadata store as conditional writes made off the event loop:
written when the partition is still this broker's at that epoch with the ISR the proposal
replaces, reported as failed otherwise, retried after losing a race to another write."""

from __future__ import annotations

import asyncio
import uuid

from strom.common.types import TopicPartition
from strom.metadata.changes import PutTopic, SetTopicConfigs
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.metadata.store import MetadataStore
from strom.replication.isr_writer import StoreIsrWriter
from strom.replication.partition import IsrChange
from strom.testing.metadata import MemoryMetadataStore

TP = TopicPartition("t", 0)
ALL = frozenset({1, 2, 3})


def store_with_topic(leader: int = 1, epoch: int = 4) -> MemoryMetadataStore:
    store = MemoryMetadataStore()
    topic = TopicInfo("t", uuid.UUID(int=1), (PartitionInfo(0, leader, epoch, (3, 1, 2),
                                                            (3, 1, 2)),))
    store.write(store.image.epoch, [PutTopic(topic)])
    return store


def run(store: MetadataStore, *changes: IsrChange,
        written: list[tuple[IsrChange, int]] | None = None) -> list[IsrChange]:
    failed: list[IsrChange] = []
    reported = written if written is not None else []

    async def main() -> None:
        writer = StoreIsrWriter(store, 1, failed.append, lambda c, e: reported.append((c, e)))
        for change in changes:
            writer.submit(change)
        await asyncio.sleep(0.2)
        await writer.close()

    asyncio.run(main())
    return failed


def test_a_proposal_is_written_with_the_same_leader_and_epoch() -> None:
    store = store_with_topic()
    assert run(store, IsrChange(TP, 4, frozenset({1, 3}), ALL)) == []
    assert store.image.topics["t"].partitions[0] == PartitionInfo(0, 1, 4, (3, 1, 2), (3, 1))


def test_a_proposal_no_longer_ours_or_based_on_an_old_isr_is_not_written() -> None:
    store = store_with_topic()
    stale_epoch = IsrChange(TP, 3, frozenset({1, 3}), ALL)
    stale_isr = IsrChange(TP, 4, frozenset({1}), frozenset({1, 2}))  # controller's ISR differs
    assert run(store, stale_epoch, stale_isr) == [stale_epoch, stale_isr]
    assert store.image.topics["t"].partitions[0].isr == (3, 1, 2)
    other = store_with_topic(leader=2)
    change = IsrChange(TP, 4, frozenset({1, 3}), ALL)
    assert run(other, change) == [change]


class RacingStore(MemoryMetadataStore):
    """Another writer wins the first race."""

    raced = False

    def write(self, expected_epoch, changes):  # type: ignore[no-untyped-def]
        if not self.raced and any(type(c).__name__ == "SetPartitions" for c in changes):
            self.raced = True
            super().write(self.image.epoch, [SetTopicConfigs("t", {"retention.ms": "1"})])
        return super().write(expected_epoch, changes)


def test_a_lost_race_is_retried_against_the_new_image() -> None:
    store = RacingStore()
    topic = TopicInfo("t", uuid.UUID(int=1), (PartitionInfo(0, 1, 4, (3, 1, 2), (3, 1, 2)),))
    store.write(store.image.epoch, [PutTopic(topic)])
    assert run(store, IsrChange(TP, 4, frozenset({1, 2}), ALL)) == []
    assert store.raced and store.image.topics["t"].partitions[0].isr == (1, 2)
    assert store.image.topics["t"].configs == {"retention.ms": "1"}


class FlakyStore(MemoryMetadataStore):
    """The first ISR write raises, having been applied (``applied``) or not: a connection
    lost mid-write, whose outcome the writer cannot know."""

    def __init__(self, applied: bool) -> None:
        super().__init__()
        self.applied = applied
        self.raised = False

    def write(self, expected_epoch, changes):  # type: ignore[no-untyped-def]
        if not self.raised and any(type(c).__name__ == "SetPartitions" for c in changes):
            self.raised = True
            if self.applied:
                super().write(expected_epoch, changes)
            raise ConnectionError("connection lost")
        return super().write(expected_epoch, changes)


def test_a_write_with_an_unknown_outcome_is_retried_not_reported_failed() -> None:
    # Reported failed, the leader would drop its pending expansion and advance the high
    # watermark without replica 2, which the store may already have in the ISR.
    expand = IsrChange(TP, 4, ALL, frozenset({1, 3}))
    for applied in (True, False):
        store = FlakyStore(applied)
        topic = TopicInfo("t", uuid.UUID(int=1), (PartitionInfo(0, 1, 4, (3, 1, 2), (3, 1)),))
        store.write(store.image.epoch, [PutTopic(topic)])
        assert run(store, expand) == []
        assert store.raised and store.image.topics["t"].partitions[0].isr == (3, 1, 2)


def test_a_write_is_reported_with_the_first_epoch_holding_it() -> None:
    store = store_with_topic()
    base = store.image.epoch
    change = IsrChange(TP, 4, frozenset({1, 3}), ALL)
    written: list[tuple[IsrChange, int]] = []
    assert run(store, change, written=written) == []
    assert written == [(change, base + 1)] and store.image.epoch == base + 1
    written.clear()
    assert run(store, change, written=written) == []  # found already written: that image
    assert written == [(change, base + 1)] and store.image.epoch == base + 1
    stale = IsrChange(TP, 3, frozenset({1}), ALL)
    written.clear()
    assert run(store, stale, written=written) == [stale] and written == []
