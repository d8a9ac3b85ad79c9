"""What only the in-memory twin adds for simulations: several brokers, leaving, failures."""

from __future__ import annotations

import uuid

import pytest

from strom.metadata.changes import PutTopic
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from strom.metadata.store import ProducerIdBlock
from strom.testing.metadata import MemoryMetadataStore


def test_brokers_come_and_go_and_the_lowest_id_stands_in_for_the_controller() -> None:
    store = MemoryMetadataStore("cluster")
    seen: list[MetadataImage] = []
    store.subscribe(seen.append)
    assert store.image.controller_id == -1 and store.cluster_id == "cluster"
    store.register_broker(BrokerInfo(2, "b", 9092))
    store.register_broker(BrokerInfo(1, "a", 9092))
    assert sorted(store.image.brokers) == [1, 2] and store.image.controller_id == 1
    store.unregister_broker(1)
    store.unregister_broker(7)  # unknown: nothing happens
    assert list(store.image.brokers) == [2] and store.image.controller_id == 2
    assert [image.epoch for image in seen] == [1, 2, 3]


def test_fixed_controller_id() -> None:
    store = MemoryMetadataStore(controller_id=5)
    store.register_broker(BrokerInfo(1, "a", 9092))
    assert store.image.controller_id == 5


def test_fail_next_write_fails_once_and_changes_nothing() -> None:
    store = MemoryMetadataStore()
    seen: list[MetadataImage] = []
    store.subscribe(seen.append)
    store.fail_next_write(OSError("disk full"))
    change = PutTopic(TopicInfo("t", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0,)),), {}))
    with pytest.raises(OSError):
        store.write(0, [change])
    assert store.image.epoch == 0 and seen == []
    store.fail_next_write(OSError("disk full"))
    with pytest.raises(OSError):
        store.allocate_producer_id_block(10)
    assert store.allocate_producer_id_block(10) == ProducerIdBlock(0, 10)
    assert store.write(0, [change]).epoch == 1
