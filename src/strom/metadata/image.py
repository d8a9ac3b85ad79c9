"""The cluster metadata image: an immutable snapshot of brokers, topics, partitions and the
dynamic broker configs.

Every change produces a new image with ``epoch`` + 1; readers hold an image and never see it
change under them. Handlers cache encoded per-topic metadata keyed by (topic, epoch).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: its id, partitions and config overrides (raw strings as set by users)."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """``broker_configs`` holds the dynamic broker configs (raw strings, as set by users) by
    resource name: ``""`` for the cluster-wide default, the broker id (``"1"``) for one broker;
    a resource without any is absent."""

    cluster_id: str
    epoch: int
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None
