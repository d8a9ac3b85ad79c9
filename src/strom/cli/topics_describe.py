"""``strom topics describe``: kafka-topics.sh --describe's output and partition filters.

Per topic a summary line, then a line per partition (tab-separated, Kafka's layout)::

    Topic: t<TAB>TopicId: …<TAB>PartitionCount: 3<TAB>ReplicationFactor: 3<TAB>Configs: k=v,…
    <TAB>Topic: t<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1,2,0<TAB>Isr: 1,2,0

``Leader: none`` without a leader; ``Adding Replicas: …<TAB>Removing Replicas: …`` while a
reassignment runs (and ReplicationFactor then leaves the adding replicas out, as Kafka);
``Offline: …`` when Metadata reports offline replicas. ``Configs`` lists every config not at
its default (Kafka's ``!isDefault``). With a partition filter only the matching partition
lines print, no summary lines (Kafka's rule), and several filters combine with "or":

* under-replicated: fewer in-sync replicas than the replication factor;
* unavailable: no leader, or a leader that is not a live broker;
* under-min-isr: no leader, or fewer in-sync replicas than ``min.insync.replicas``;
* at-min-isr: exactly ``min.insync.replicas`` in-sync replicas.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from strom.client.admin_types import ConfigEntry, TopicDescription
from strom.client.metadata import PartitionMetadata
from strom.client.partition_admin import PartitionReassignment
from strom.common.types import TopicPartition

FILTERS = ("under_replicated_partitions", "unavailable_partitions",
           "under_min_isr_partitions", "at_min_isr_partitions")


def add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="only partitions with fewer in-sync replicas than replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="only partitions whose leader is missing or not a live broker")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="only partitions with fewer in-sync replicas than "
                             "min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="only partitions with exactly min.insync.replicas in-sync "
                             "replicas")


@dataclass(frozen=True)
class Filters:
    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Filters:
        return cls(*(bool(getattr(args, name, False)) for name in FILTERS))

    @property
    def any(self) -> bool:
        return self.under_replicated or self.unavailable or self.under_min_isr or \
            self.at_min_isr


def replication_factor(p: PartitionMetadata, reassignment: PartitionReassignment | None
                       ) -> int:
    """The replicas, less those a running reassignment is adding (Kafka's rule)."""
    adding = len(reassignment.adding_replicas) if reassignment is not None else 0
    return len(p.replicas) - adding


def selected(p: PartitionMetadata, filters: Filters, *, live: Collection[int], min_isr: int,
             reassignment: PartitionReassignment | None) -> bool:
    """Whether partition ``p`` prints under ``filters`` (every partition without one)."""
    if not filters.any:
        return True
    leaderless = p.leader < 0
    return ((filters.under_replicated and replication_factor(p, reassignment) > len(p.isr))
            or (filters.unavailable and (leaderless or p.leader not in live))
            or (filters.under_min_isr and (leaderless or len(p.isr) < min_isr))
            or (filters.at_min_isr and len(p.isr) == min_isr))


def partition_line(topic: str, p: PartitionMetadata,
                   reassignment: PartitionReassignment | None) -> str:
    leader = str(p.leader) if p.leader >= 0 else "none"
    line = (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
    if reassignment is not None:
        line += (f"\tAdding Replicas: {_ids(reassignment.adding_replicas)}"
                 f"\tRemoving Replicas: {_ids(reassignment.removing_replicas)}")
    if p.offline_replicas:
        line += f"\tOffline: {_ids(p.offline_replicas)}"
    return line


def topic_line(topic: TopicDescription, configs: list[ConfigEntry],
               first: PartitionReassignment | None) -> str:
    partitions = sorted(topic.partitions, key=lambda p: p.partition)
    rf = replication_factor(partitions[0], first) if partitions else 0
    shown = ",".join(f"{e.name}={e.value}" for e in configs if not e.is_default)
    head = [f"Topic: {topic.name}"]
    if topic.topic_id and topic.topic_id != "AAAAAAAAAAAAAAAAAAAAAA":
        head.append(f"TopicId: {topic.topic_id}")
    head += [f"PartitionCount: {len(partitions)}", f"ReplicationFactor: {rf}",
             f"Configs: {shown}"]
    return "\t".join(head)


def describe_lines(topics: list[TopicDescription], configs: Mapping[str, list[ConfigEntry]],
                   filters: Filters, *, live: Collection[int],
                   reassignments: Mapping[TopicPartition, PartitionReassignment]
                   ) -> list[str]:
    """The output lines for ``topics`` (``configs``: each topic's DescribeConfigs entries;
    ``live``: the brokers DescribeCluster lists)."""
    lines: list[str] = []
    for topic in topics:
        entries = configs.get(topic.name, [])
        partitions = sorted(topic.partitions, key=lambda p: p.partition)
        moving = {p.partition: reassignments.get(TopicPartition(topic.name, p.partition))
                  for p in partitions}
        if not filters.any:
            lines.append(topic_line(topic, entries, moving[partitions[0].partition]
                                    if partitions else None))
        min_isr = _min_isr(entries)
        lines += [partition_line(topic.name, p, moving[p.partition]) for p in partitions
                  if selected(p, filters, live=live, min_isr=min_isr,
                              reassignment=moving[p.partition])]
    return lines


def _min_isr(entries: list[ConfigEntry]) -> int:
    for entry in entries:
        if entry.name == "min.insync.replicas" and entry.value is not None:
            return int(entry.value)
    return 1


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids))
