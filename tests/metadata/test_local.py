from pathlib import Path

import pytest

from strom.common.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.metadata.image import BrokerInfo
from strom.metadata.local import LocalMetadataStore

BROKER = BrokerInfo(0, "127.0.0.1", 9092)


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    created = store.create_topic("a", 3, {"retention.ms": "1000"})
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    store.set_partition_count("a", 5)
    store.set_topic_configs("a", {"segment.ms": "5000"})
    epoch = store.image.epoch
    reopened = LocalMetadataStore(tmp_path, BROKER)
    topic = reopened.image.topics["a"]
    assert topic.topic_id == created.topic_id
    assert len(topic.partitions) == 5 and topic.configs == {"segment.ms": "5000"}
    assert reopened.image.epoch == epoch and reopened.cluster_id == store.cluster_id


def test_errors(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.create_topic("a", 1, {})
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("a", 1, {})
    with pytest.raises(InvalidPartitionsError):
        store.set_partition_count("a", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("b")
    store.delete_topic("a")
    assert "a" not in LocalMetadataStore(tmp_path, BROKER).image.topics


def test_image_is_immutable_snapshot(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    before = store.image
    store.create_topic("a", 1, {})
    assert "a" not in before.topics and "a" in store.image.topics
    assert store.image.epoch == before.epoch + 1
