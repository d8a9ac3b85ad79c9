"""``strom topics describe`` formatting and partition filters on crafted metadata (Kafka's
kafka-topics.sh --describe layout and rules)."""

from __future__ import annotations

import argparse

import pytest

from strom.cli.topics_describe import Filters, add_filters, describe_lines
from strom.client.admin_types import ConfigEntry, TopicDescription
from strom.client.metadata import PartitionMetadata
from strom.client.partition_admin import PartitionReassignment
from strom.common.config import ConfigSource
from strom.common.types import TopicPartition


def part(partition: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...],
         offline: tuple[int, ...] = ()) -> PartitionMetadata:
    return PartitionMetadata("t", partition, leader, 0, replicas, isr, offline)


def entry(name: str, value: str, source: ConfigSource) -> ConfigEntry:
    return ConfigEntry(name, value, int(source), False, False)


TOPIC = TopicDescription("t", (
    part(2, -1, (2, 0, 1), (2,)),              # no leader
    part(0, 1, (1, 2, 0), (1, 2, 0)),          # healthy
    part(1, 2, (2, 0, 1), (2, 0), (1,)),       # one replica out of the ISR (and offline)
    part(3, 5, (5, 0, 1), (5, 0, 1)),          # leader 5 is no live broker
), topic_id="Q2hhbmdlZFRvcGljSWQxMg")
CONFIGS = {"t": [entry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                 entry("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
                 entry("segment.bytes", "1048576", ConfigSource.STATIC_BROKER_CONFIG)]}
LIVE = {0, 1, 2}


NO_FILTER = Filters()


def lines(filters: Filters = NO_FILTER,
          reassignments: dict[TopicPartition, PartitionReassignment] | None = None
          ) -> list[str]:
    return describe_lines([TOPIC], CONFIGS, filters, live=LIVE,
                          reassignments=reassignments or {})


def test_kafkas_layout() -> None:
    assert lines() == [
        "Topic: t\tTopicId: Q2hhbmdlZFRvcGljSWQxMg\tPartitionCount: 4\tReplicationFactor: 3\t"
        "Configs: min.insync.replicas=2,segment.bytes=1048576",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,2,0",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,0,1\tIsr: 2,0\tOffline: 1",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 2,0,1\tIsr: 2",
        "\tTopic: t\tPartition: 3\tLeader: 5\tReplicas: 5,0,1\tIsr: 5,0,1",
    ]


def test_a_reassignment_shows_adding_and_removing_and_not_in_the_factor() -> None:
    moving = PartitionReassignment((1, 2, 0, 3), (3,), (0,))
    topic = TopicDescription("t", (part(0, 1, (1, 2, 0, 3), (1, 2, 0)),))
    out = describe_lines([topic], {}, Filters(), live=LIVE,
                         reassignments={TopicPartition("t", 0): moving})
    assert out == [
        "Topic: t\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,0,3\tIsr: 1,2,0"
        "\tAdding Replicas: 3\tRemoving Replicas: 0",
    ]
    # RF 3 while adding one: three in sync is not under-replicated
    assert describe_lines([topic], {}, Filters(under_replicated=True), live=LIVE,
                          reassignments={TopicPartition("t", 0): moving}) == []


@pytest.mark.parametrize("filters, partitions", [
    (Filters(under_replicated=True), [1, 2]),
    (Filters(unavailable=True), [2, 3]),
    (Filters(under_min_isr=True), [2]),        # min.insync.replicas=2: one in sync, or none
    (Filters(at_min_isr=True), [1]),
    (Filters(under_replicated=True, unavailable=True), [1, 2, 3]),  # filters add up
])
def test_filters_print_only_matching_partitions(filters: Filters, partitions: list[int]
                                                ) -> None:
    out = lines(filters)
    assert [int(line.split("Partition: ")[1].split("\t")[0]) for line in out] == partitions
    assert all(line.startswith("\tTopic: t\tPartition: ") for line in out)  # no summary


def test_min_isr_defaults_to_one_without_the_config() -> None:
    out = describe_lines([TOPIC], {}, Filters(at_min_isr=True), live=LIVE, reassignments={})
    assert [line.split("\t")[2] for line in out] == ["Partition: 2"]


def test_flags_map_to_filters() -> None:
    parser = argparse.ArgumentParser()
    add_filters(parser)
    args = parser.parse_args(["--unavailable-partitions", "--at-min-isr-partitions"])
    assert Filters.from_args(args) == Filters(unavailable=True, at_min_isr=True)
    assert not Filters.from_args(parser.parse_args([])).any
