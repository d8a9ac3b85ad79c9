"""The controller driver on the in-memory store: a broker reported dead (its listener
refuses connections) loses leadership and ISR membership at once, while still registered;
its registration of that epoch is removed when it is reported again after the grace period;
a new registration of the id is live again; a report of an old epoch, or while not the
controller, changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence

import pytest

from strom.common.config import BrokerConfig, TopicConfig
from strom.controller import driver as driver_module
from strom.controller.driver import ControllerDriver
from strom.metadata.changes import MetadataChange, PutTopic
from strom.metadata.image import BrokerInfo, PartitionInfo, TopicInfo
from strom.testing.metadata import MemoryMetadataStore

EPOCHS = {0: 10, 1: 11, 2: 12}


class LoopCommitter:
    """The driver's committer over the in-memory store: each write (from the driver's writer
    thread) is applied on the event loop, as the ZooKeeper store's refresh installs it."""

    def __init__(self, store: MemoryMetadataStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store, self.loop = store, loop
        self.removed: list[tuple[int, int]] = []

    def _on_loop(self, call: Callable[[], object]) -> object:
        async def run() -> object:
            return call()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)

    def commit(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> None:
        self._on_loop(lambda: self.store.write(expected_epoch, changes))

    def remove_dead_broker(self, broker_id: int, epoch: int) -> bool:
        def remove() -> bool:
            info = self.store.image.brokers.get(broker_id)
            if info is None or info.epoch != epoch:
                return False
            self.removed.append((broker_id, epoch))
            self.store.unregister_broker(broker_id)
            return True
        return bool(self._on_loop(remove))


def cluster() -> MemoryMetadataStore:
    store = MemoryMetadataStore(controller_id=0)
    for node, epoch in EPOCHS.items():
        store.register_broker(BrokerInfo(node, "127.0.0.1", 9000 + node, epoch=epoch))
    store.write(store.image.epoch, [PutTopic(TopicInfo("t", uuid.uuid4(), (
        PartitionInfo(0, 1, 3, (1, 2, 0), (1, 2, 0)),
        PartitionInfo(1, 0, 5, (0, 1, 2), (0, 1, 2))), {}))])
    return store


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def driver_on(store: MemoryMetadataStore) -> tuple[ControllerDriver, LoopCommitter]:
    committer = LoopCommitter(store, asyncio.get_running_loop())
    driver = ControllerDriver(store, committer, BrokerConfig,
                              lambda topic: TopicConfig(BrokerConfig(), {}))
    return driver, committer


def test_a_dead_broker_leaves_leadership_and_isrs_then_its_registration(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "REGISTRATION_GRACE_S", 0.2)

    async def scenario() -> None:
        store = cluster()
        driver, committer = driver_on(store)
        driver.elected(1)
        await until(lambda: driver.active)
        await asyncio.sleep(0.1)
        assert store.image.topics["t"].partitions[0].leader == 1  # nothing to do before

        driver.broker_died(1, EPOCHS[1])
        await until(lambda: store.image.topics["t"].partitions[0].leader == 2)
        p0, p1 = store.image.topics["t"].partitions
        assert (p0.leader, p0.leader_epoch, p0.isr) == (2, 4, (2, 0))
        assert (p1.leader, p1.leader_epoch, p1.isr) == (0, 5, (0, 2))  # no epoch bump
        driver.broker_died(1, EPOCHS[1])  # reported again within the grace period
        await asyncio.sleep(0.1)
        assert 1 in store.image.brokers and committer.removed == []
        await asyncio.sleep(0.2)
        driver.broker_died(1, EPOCHS[1])  # and after it: the registration goes
        await until(lambda: committer.removed == [(1, EPOCHS[1])])
        assert 1 not in store.image.brokers

        # the broker comes back (a restart: a new epoch): live again, joins nothing by itself
        store.register_broker(BrokerInfo(1, "127.0.0.1", 9001, epoch=21))
        assert driver.alive(store.image) == {0, 1, 2}
        driver.close()

    asyncio.run(scenario())


def test_reports_of_another_epoch_change_nothing() -> None:
    async def scenario() -> None:
        store = cluster()
        driver, committer = driver_on(store)
        before = store.image
        driver.elected(1)
        await until(lambda: driver.active)
        driver.broker_died(1, EPOCHS[1] + 100)  # an epoch this broker does not have
        driver.broker_died(7, 1)  # not registered
        await asyncio.sleep(0.3)
        assert store.image.topics == before.topics and committer.removed == []
        assert driver.alive(store.image) == {0, 1, 2}
        driver.close()

    asyncio.run(scenario())


def test_a_death_seen_before_the_election_counts_from_it() -> None:
    """A broker that saw the controller die (and deposed it) and is then elected moves the
    dead broker's leadership in its first reconciliation."""
    async def scenario() -> None:
        store = cluster()
        driver, committer = driver_on(store)
        driver.broker_died(1, EPOCHS[1])  # not the controller (yet): nothing is written
        await asyncio.sleep(0.2)
        assert store.image.topics["t"].partitions[0].leader == 1 and committer.removed == []
        driver.elected(2)
        await until(lambda: store.image.topics["t"].partitions[0].leader == 2)
        assert store.image.topics["t"].partitions[1].isr == (0, 2)
        driver.close()

    asyncio.run(scenario())


def test_a_dead_broker_that_is_the_only_isr_member_keeps_the_partition_offline() -> None:
    """No live ISR member: the partition goes offline (leader -1) with the dead broker as
    its last ISR member, as on a session expiry — never an unclean election."""
    async def scenario() -> None:
        store = cluster()
        store.write(store.image.epoch, [PutTopic(TopicInfo("solo", uuid.uuid4(), (
            PartitionInfo(0, 2, 0, (2, 1), (2,)),), {}))])
        driver, _committer = driver_on(store)
        driver.elected(1)
        await until(lambda: driver.active)
        driver.broker_died(2, EPOCHS[2])
        await until(lambda: store.image.topics["solo"].partitions[0].leader == -1)
        solo = store.image.topics["solo"].partitions[0]
        assert (solo.leader, solo.leader_epoch, solo.isr) == (-1, 1, (2,))
        driver.close()

    asyncio.run(scenario())
