"""Metadata snapshots: topic id rendering, leaders and merging."""

from __future__ import annotations

import uuid

from strom.client.metadata import (
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
