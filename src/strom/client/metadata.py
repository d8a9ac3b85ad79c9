"""The client's view of cluster metadata: brokers, topics and partition leaders (immutable).

Built from a Metadata response by :func:`from_response`; :class:`~strom.client.cluster.Cluster`
replaces its snapshot on every refresh, so readers never see a half-updated view.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from strom.common.types import TopicPartition


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A broker as metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: its leader (-1 when none), leader epoch, replicas and in-sync replicas."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic; ``error_code`` is non-zero when the broker could not describe it."""

    name: str
    error_code: int
    partitions: Mapping[int, PartitionMetadata]
    is_internal: bool = False
    topic_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """A snapshot of the cluster as of one Metadata response (merged over earlier ones)."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None

    def leader(self, tp: TopicPartition) -> int | None:
        """The leader's node id, or None when the partition or its leader is unknown."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return None
        part = topic.partitions.get(tp.partition)
        if part is None or part.leader < 0:
            return None
        return part.leader

    def partition_count(self, topic: str) -> int | None:
        meta = self.topics.get(topic)
        if meta is None or meta.error_code or not meta.partitions:
            return None
        return len(meta.partitions)

    def merged(self, newer: ClusterMetadata, replace_topics: bool) -> ClusterMetadata:
        """``newer``'s brokers and controller; its topics over ours unless ``replace_topics``."""
        topics = dict(newer.topics) if replace_topics else {**self.topics, **newer.topics}
        return ClusterMetadata(newer.brokers, topics, newer.controller_id, newer.cluster_id)

    def with_leader_hint(self, tp: TopicPartition, leader: int, leader_epoch: int,
                         endpoints: Iterable[BrokerNode] = ()) -> ClusterMetadata | None:
        """This snapshot with ``tp`` led by ``leader`` at ``leader_epoch`` (a KIP-951 hint
        from a Produce / Fetch answer; ``endpoints`` the answer's node endpoints, added for
        brokers not known yet); None when the hint teaches nothing usable: the partition is
        unknown, the epoch is not newer than the known one, or the leader's address is
        unknown (then metadata must be refreshed, as before hints)."""
        topic = self.topics.get(tp.topic)
        known = topic.partitions.get(tp.partition) if topic is not None else None
        if topic is None or known is None or leader < 0 or leader_epoch <= known.leader_epoch:
            return None
        brokers = {**{e.node_id: e for e in endpoints}, **self.brokers}
        if leader not in brokers:
            return None
        partitions = {**topic.partitions, tp.partition: replace(
            known, leader=leader, leader_epoch=leader_epoch)}
        topics = {**self.topics, tp.topic: replace(topic, partitions=partitions)}
        return ClusterMetadata(brokers, topics, self.controller_id, self.cluster_id)


def uuid_text(value: Any) -> str | None:
    """A topic id as Kafka prints it (URL-safe base64 of the 16 bytes, no padding); None for
    the all-zero id."""
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        if value.int == 0:
            return None
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")
    text = str(value)
    return None if text in ("", "AAAAAAAAAAAAAAAAAAAAAA") else text


def from_response(response: Any) -> ClusterMetadata:
    """Build a snapshot from a decoded Metadata response (any version)."""
    brokers = {
        b.node_id: BrokerNode(b.node_id, b.host, b.port, getattr(b, "rack", None))
        for b in response.brokers
    }
    topics: dict[str, TopicMetadata] = {}
    for t in response.topics:
        if t.name is None:
            continue
        partitions = {
            p.partition_index: PartitionMetadata(
                topic=t.name,
                partition=p.partition_index,
                leader=p.leader_id,
                leader_epoch=getattr(p, "leader_epoch", -1),
                replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes),
                offline_replicas=tuple(getattr(p, "offline_replicas", None) or ()),
                error_code=p.error_code,
            )
            for p in t.partitions
        }
        topics[t.name] = TopicMetadata(
            name=t.name,
            error_code=t.error_code,
            partitions=dict(sorted(partitions.items())),
            is_internal=bool(getattr(t, "is_internal", False)),
            topic_id=uuid_text(getattr(t, "topic_id", None)),
        )
    return ClusterMetadata(
        brokers=brokers,
        topics=topics,
        controller_id=getattr(response, "controller_id", -1),
        cluster_id=getattr(response, "cluster_id", None),
    )


def partitions_of(meta: ClusterMetadata, topics: Iterable[str]) -> list[TopicPartition]:
    """Every known partition of ``topics``, in topic then partition order."""
    out: list[TopicPartition] = []
    for name in topics:
        topic = meta.topics.get(name)
        if topic is not None:
            out.extend(TopicPartition(name, p) for p in topic.partitions)
    return out
