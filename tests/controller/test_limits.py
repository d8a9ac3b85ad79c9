"""The per-request bounds (as Kafka 4.4 answers them) and the per-broker partition bound."""

from __future__ import annotations

import random
import uuid

import pytest

from strom.common.config import BrokerConfig
from strom.common.errors import InvalidTopicError, PolicyViolationError
from strom.controller.limits import (
    MAX_PARTITIONS_PER_REQUEST,
    TOO_MANY_ADDED_PARTITIONS,
    TOO_MANY_PARTITIONS,
    TOO_MANY_RECORDS,
    ReplicaCounter,
    check_added_partitions,
    check_new_topics,
    check_records,
    requested_partitions,
)
from strom.controller.topics import TopicAdmin, colliding_topic
from strom.metadata.changes import PutTopic, RemoveTopic
from strom.metadata.image import BrokerInfo, PartitionInfo, TopicInfo
from strom.testing.metadata import MemoryMetadataStore


def topic(name: str, partitions: int, replicas: tuple[int, ...] = (0,),
          configs: dict[str, str] | None = None) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), tuple(
        PartitionInfo(p, replicas[0], 0, replicas, replicas) for p in range(partitions)),
        configs or {})


def test_create_topics_counts_assignments_defaults_and_positive_counts() -> None:
    assert requested_partitions(5, 0, 3) == 5
    assert requested_partitions(-1, 0, 3) == 3      # the broker's num.partitions
    assert requested_partitions(-1, 7, 3) == 7      # an assignment names its partitions
    assert requested_partitions(0, 0, 3) == 0       # refused later (INVALID_PARTITIONS)
    assert requested_partitions(-5, 0, 3) == 0
    check_new_topics([(MAX_PARTITIONS_PER_REQUEST - 1, 0)])  # 10,000 records: the most that pass
    with pytest.raises(PolicyViolationError, match=TOO_MANY_PARTITIONS):
        check_new_topics([(5000, 0), (5001, 0)])
    # the sum stops at the first topic past the bound: an endless request costs nothing more
    counts = iter([(2**31 - 1, 0)] + [(1, 0)] * 10)
    with pytest.raises(PolicyViolationError):
        check_new_topics(counts)
    assert next(counts) == (1, 0)


def test_create_partitions_counts_only_what_existing_topics_gain() -> None:
    store = MemoryMetadataStore()
    store.write(0, [PutTopic(topic("a", 3)), PutTopic(topic("b", 1))])
    image = store.image
    check_added_partitions(image, [("a", 10_003), ("missing", 10**6), ("b", 1), ("a", -1)])
    with pytest.raises(PolicyViolationError, match=TOO_MANY_ADDED_PARTITIONS):
        check_added_partitions(image, [("a", 1_000_000)])
    with pytest.raises(PolicyViolationError):
        check_added_partitions(image, [("a", 6003), ("b", 4002)])


def test_records_count_the_topic_each_partition_and_each_override() -> None:
    check_records([topic("t", 9999)])
    with pytest.raises(PolicyViolationError, match=TOO_MANY_RECORDS):
        check_records([topic("t", 10_000)])
    with pytest.raises(PolicyViolationError):
        check_records([topic("t", 9998, configs={"retention.ms": "1", "a": "b"})])
    check_records([topic(f"t{i}", 1) for i in range(5000)])
    with pytest.raises(PolicyViolationError):
        check_records([topic(f"t{i}", 1) for i in range(5001)])


def test_replica_counts_follow_the_changed_topics_only() -> None:
    store = MemoryMetadataStore()
    store.write(0, [PutTopic(topic("a", 4, (0, 1))), PutTopic(topic("b", 2, (1,)))])
    counter = ReplicaCounter()
    assert counter.counts(store.image) == {0: 4, 1: 6}
    store.write(store.image.epoch, [RemoveTopic("b"), PutTopic(topic("c", 3, (2, 0)))])
    assert counter.counts(store.image) == {0: 7, 1: 4, 2: 3}


def test_a_broker_is_given_no_more_than_max_broker_partitions() -> None:
    store = MemoryMetadataStore()
    for node in (0, 1):
        store.register_broker(BrokerInfo(node, "h", 9092))
    admin = TopicAdmin(store, BrokerConfig({"max.broker.partitions": 10}),
                       rng=random.Random(3))
    admin.create_topic("a", 8, 2)  # 8 replicas on each broker
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions=10"):
        admin.create_topic("b", 3, 2)
    assert "b" not in store.image.topics
    admin.create_topic("b", 2, 2)  # exactly the limit
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions=10"):
        admin.add_partitions("b", 3)
    with pytest.raises(PolicyViolationError):
        admin.create_topic("c", 1, 1, validate_only=True)
    # the broker's own internal topics are exempt (the coordinators need them)
    admin.create_topic("__consumer_offsets", 4, 1, internal=True)


@pytest.mark.parametrize(("existing", "name", "collides"), [
    ("a.b", "a_b", "a.b"), ("a_b", "a.b", "a_b"), ("x.y_z", "x_y.z", "x.y_z"),
    ("a.b", "a.b", None), ("ab", "a_b", None), ("a.b", "a-b", None),
    ("a.b.c.d.e.f.g.h.i.j", "a_b_c_d_e_f_g_h_i_j", "a.b.c.d.e.f.g.h.i.j"),  # the long way
])
def test_collisions_between_dots_and_underscores(existing: str, name: str,
                                                 collides: str | None) -> None:
    assert colliding_topic({existing: None, "other": None}, name) == collides


def test_a_colliding_name_is_refused_without_walking_every_topic() -> None:
    store = MemoryMetadataStore()
    store.register_broker(BrokerInfo(0, "h", 9092))
    admin = TopicAdmin(store, BrokerConfig())
    admin.create_topic("metrics.cpu")
    with pytest.raises(InvalidTopicError, match=r"collides with existing topic: metrics\.cpu"):
        admin.create_topic("metrics_cpu")
