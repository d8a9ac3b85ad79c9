"""The controller's leadership decisions (:mod:`strom.controller.decisions`): each rule on a
hand-built image, then written to the in-memory store (whose checks — leader in the ISR,
leader epochs never going down — every decision must pass) and re-run to show it is done."""

from __future__ import annotations

import uuid

import pytest

from strom.controller.decisions import (
    ElectionOutcome,
    ElectionType,
    elect_leaders,
    imbalanced,
    reconcile,
    remaining_after_shutdown,
)
from strom.metadata.changes import PutTopic, SetPartitions
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from strom.testing.metadata import MemoryMetadataStore

T = "orders"


def store_with(*partitions: tuple[int, int, tuple[int, ...], tuple[int, ...]],
               brokers: tuple[int, ...] = (1, 2, 3)) -> MemoryMetadataStore:
    """A store holding topic ``orders`` with (leader, epoch, replicas, isr) per partition."""
    store = MemoryMetadataStore()
    for b in brokers:
        store.register_broker(BrokerInfo(b, "127.0.0.1", 9000 + b))
    parts = tuple(PartitionInfo(i, leader, epoch, replicas, isr)
                  for i, (leader, epoch, replicas, isr) in enumerate(partitions))
    store.write(store.image.epoch, [PutTopic(TopicInfo(T, uuid.uuid4(), parts))])
    return store


def state(image: MetadataImage, partition: int = 0) -> tuple[int, int, tuple[int, ...]]:
    p = image.topics[T].partitions[partition]
    return p.leader, p.leader_epoch, p.isr


def settle(store: MemoryMetadataStore, **kwargs: object) -> MetadataImage:
    """Write what reconcile decides, and check that it then has nothing more to say."""
    image = store.image
    changes = reconcile(image, image.brokers, **kwargs)  # type: ignore[arg-type]
    assert changes, "expected a decision"
    image = store.write(image.epoch, changes)
    assert reconcile(image, image.brokers, **kwargs) == []  # type: ignore[arg-type]
    return image


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_with_a_new_epoch() -> None:
    store = store_with((1, 4, (1, 2, 3), (1, 3, 2)))
    store.unregister_broker(1)
    # replica order, not ISR order: 2 comes before 3 among the replicas
    assert state(settle(store)) == (2, 5, (3, 2))


def test_a_dead_follower_leaves_the_isr_without_an_epoch_bump() -> None:
    store = store_with((1, 4, (1, 2, 3), (1, 2, 3)))
    store.unregister_broker(3)
    assert state(settle(store)) == (1, 4, (1, 2))


def test_all_isr_dead_goes_offline_keeping_the_last_leader_in_the_isr() -> None:
    store = store_with((1, 4, (1, 2, 3), (1, 2)))
    store.unregister_broker(1)
    store.unregister_broker(2)
    # 3 is live but out of sync: not eligible without unclean election
    assert state(settle(store)) == (-1, 5, (1,))


def test_unclean_election_gives_a_live_out_of_sync_replica_the_partition() -> None:
    store = store_with((1, 4, (1, 2, 3), (1, 2)))
    store.unregister_broker(1)
    store.unregister_broker(2)
    assert state(settle(store, unclean=lambda topic: True)) == (3, 5, (3,))


def test_unclean_off_then_on_later_elects_from_the_offline_state() -> None:
    store = store_with((1, 4, (1, 3), (1,)))
    store.unregister_broker(1)
    assert state(settle(store)) == (-1, 5, (1,))
    assert state(settle(store, unclean=lambda topic: True)) == (3, 6, (3,))


def test_a_returning_isr_member_brings_an_offline_partition_back() -> None:
    store = store_with((1, 4, (1, 2), (1, 2)))
    store.unregister_broker(2)
    store.unregister_broker(1)
    offline = settle(store)
    assert state(offline) == (-1, 5, (1,))
    store.register_broker(BrokerInfo(2, "127.0.0.1", 9002))  # not in the ISR: stays offline
    assert reconcile(store.image, store.image.brokers) == []
    store.register_broker(BrokerInfo(1, "127.0.0.1", 9001))
    assert state(settle(store)) == (1, 6, (1,))


def test_controlled_shutdown_moves_leadership_and_leaves_isrs() -> None:
    store = store_with((1, 4, (1, 2), (1, 2)),   # led by 1: moves to 2
                       (2, 7, (2, 1), (2, 1)),   # followed by 1: leaves the ISR
                       (1, 2, (1,), (1,)),       # only replica: stays, does not hold it back
                       (1, 3, (1, 3), (1,)))     # no other ISR member: stays, remaining
    image = settle(store, shutting_down={1})
    assert [state(image, i) for i in range(4)] == [
        (2, 5, (2,)), (2, 7, (2,)), (1, 2, (1,)), (1, 3, (1,))]
    assert remaining_after_shutdown(image, 1) == [(T, 3)]
    # once it has gone for good the last one goes offline
    store.unregister_broker(1)
    assert state(settle(store), 3) == (-1, 4, (1,))


def test_preferred_election() -> None:
    store = store_with((2, 1, (1, 2), (1, 2)),   # elected
                       (1, 1, (1, 2), (1, 2)),   # not needed
                       (2, 1, (1, 2), (2,)),     # preferred out of sync
                       (2, 1, (3, 2), (3, 2)))   # preferred dead
    store.unregister_broker(3)
    image = store.image
    election = elect_leaders(image, image.brokers, ElectionType.PREFERRED,
                             [(T, 0), (T, 1), (T, 2), (T, 3), (T, 9), ("nope", 0)])
    assert election.outcomes == {
        (T, 0): ElectionOutcome.ELECTED, (T, 1): ElectionOutcome.NOT_NEEDED,
        (T, 2): ElectionOutcome.PREFERRED_NOT_AVAILABLE,
        (T, 3): ElectionOutcome.PREFERRED_NOT_AVAILABLE,
        (T, 9): ElectionOutcome.UNKNOWN_PARTITION, ("nope", 0): ElectionOutcome.UNKNOWN_PARTITION}
    image = store.write(image.epoch, election.changes)
    assert state(image, 0) == (1, 2, (1, 2))
    again = elect_leaders(image, image.brokers, ElectionType.PREFERRED, None)
    assert again.changes == [] and again.outcomes[(T, 0)] == ElectionOutcome.NOT_NEEDED


def test_unclean_election_by_request() -> None:
    store = store_with((-1, 3, (1, 2), (1,)),    # ISR dead, 2 live: elected unclean
                       (2, 1, (1, 2), (2,)),     # has a live leader
                       (-1, 1, (3, 1), (3,)))    # nobody live
    store.unregister_broker(1)
    store.unregister_broker(3)
    image = store.image
    election = elect_leaders(image, image.brokers, ElectionType.UNCLEAN)
    assert election.outcomes == {(T, 0): ElectionOutcome.ELECTED,
                                 (T, 1): ElectionOutcome.NOT_NEEDED,
                                 (T, 2): ElectionOutcome.NO_ELIGIBLE_LEADER}
    assert election.changes == [SetPartitions(T, (PartitionInfo(0, 2, 4, (1, 2), (2,)),))]
    store.write(image.epoch, election.changes)


@pytest.mark.parametrize(("percentage", "due"), [
    (10, [(T, 0), (T, 1), (T, 4)]),  # both brokers above 10 %
    (50, [(T, 0), (T, 1)]),          # broker 2 at exactly 50 %: not above
    (100, [])])
def test_imbalance_triggers_preferred_elections_above_the_percentage(
        percentage: int, due: list[tuple[str, int]]) -> None:
    # broker 1 prefers partitions 0-2 and leads none (100 %; partition 2 has it out of sync,
    # so its election could not succeed); broker 2 prefers 3-4 and leads 3 (50 %)
    store = store_with((2, 1, (1, 2), (1, 2)), (3, 1, (1, 3), (1, 3)), (2, 1, (1, 2), (2,)),
                       (2, 1, (2, 1), (2, 1)), (1, 1, (2, 1), (1, 2)))
    image = store.image
    assert imbalanced(image, image.brokers, percentage) == due
