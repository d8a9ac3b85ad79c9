"""Metadata snapshots: topic id rendering, leaders and merging."""

from __future__ import annotations

import uuid

from strom.client.metadata import (
    BrokerNode,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    partitions_of,
    uuid_text,
)
from strom.common.types import TopicPartition


def test_uuid_text_matches_kafka_base64() -> None:
    value = uuid.UUID("d5e804bd-576f-488b-94e0-47c960452725")
    assert uuid_text(value) == "1egEvVdvSIuU4EfJYEUnJQ"
    assert uuid_text(uuid.UUID(int=0)) is None
    assert uuid_text(None) is None


def test_leader_and_merge() -> None:
    part = PartitionMetadata("t", 0, leader=2, leader_epoch=1, replicas=(2,), isr=(2,))
    leaderless = PartitionMetadata("t", 1, leader=-1, leader_epoch=1, replicas=(2,), isr=())
    topic = TopicMetadata("t", 0, {0: part, 1: leaderless})
    meta = ClusterMetadata(topics={"t": topic})
    assert meta.leader(TopicPartition("t", 0)) == 2
    assert meta.leader(TopicPartition("t", 1)) is None
    assert meta.leader(TopicPartition("u", 0)) is None
    assert meta.partition_count("t") == 2
    other = ClusterMetadata(topics={"u": TopicMetadata("u", 3, {})}, controller_id=5)
    merged = meta.merged(other, replace_topics=False)
    assert set(merged.topics) == {"t", "u"} and merged.controller_id == 5
    assert merged.partition_count("u") is None
    assert set(meta.merged(other, replace_topics=True).topics) == {"u"}
    assert partitions_of(meta, ["t", "missing"]) == [TopicPartition("t", 0),
                                                     TopicPartition("t", 1)]


def test_a_leader_hint_moves_the_leader_only_to_a_newer_epoch_with_a_known_address() -> None:
    part = PartitionMetadata("t", 0, leader=2, leader_epoch=1, replicas=(2, 3), isr=(2, 3))
    meta = ClusterMetadata(brokers={2: BrokerNode(2, "h2", 9092)},
                           topics={"t": TopicMetadata("t", 0, {0: part})}, controller_id=2)
    tp = TopicPartition("t", 0)
    hinted = meta.with_leader_hint(tp, 3, 2, [BrokerNode(3, "h3", 9093)])
    assert hinted is not None and hinted.leader(tp) == 3
    assert hinted.topics["t"].partitions[0].leader_epoch == 2
    assert hinted.brokers[3] == BrokerNode(3, "h3", 9093) and hinted.controller_id == 2
    assert meta.leader(tp) == 2  # snapshots stay immutable
    assert meta.with_leader_hint(tp, 3, 1, [BrokerNode(3, "h3", 9093)]) is None  # not newer
    assert meta.with_leader_hint(tp, 3, 2) is None  # no address for broker 3
    assert meta.with_leader_hint(tp, -1, 2) is None
    assert meta.with_leader_hint(TopicPartition("t", 1), 2, 5) is None
