"""TopicAdmin: Kafka's validations and the metadata it writes, over the in-memory store."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from strom.common.config import BrokerConfig
from strom.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from strom.controller.topics import TopicAdmin
from strom.controller.updates import WRITE_ATTEMPTS
from strom.metadata.changes import MetadataChange
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from strom.metadata.store import StaleMetadataError
from strom.testing.metadata import MemoryMetadataStore


def cluster(*ids: int) -> MemoryMetadataStore:
    store = MemoryMetadataStore()
    for i in ids:
        store.register_broker(BrokerInfo(i, f"h{i}", 9092))
    return store


def admin(store: MemoryMetadataStore, **config: object) -> TopicAdmin:
    return TopicAdmin(store, BrokerConfig(config), rng=random.Random(1))


def test_single_broker_partitions_are_led_here_at_epoch_0() -> None:
    store = cluster(4)
    created = admin(store, **{"num.partitions": 3}).create_topic("t", configs={"retention.ms": "9"})
    assert created == store.image.topics["t"]
    assert created.partitions == tuple(PartitionInfo(p, 4, 0, (4,), (4,)) for p in range(3))
    assert created.configs == {"retention.ms": "9"} and not created.internal


def test_placement_over_several_brokers() -> None:
    store = cluster(0, 1, 2)
    created = admin(store).create_topic("t", 6, 3)
    for p in created.partitions:
        assert len(set(p.replicas)) == 3 and p.leader == p.replicas[0] and p.isr == p.replicas
        assert p.leader_epoch == 0
    assert {p.leader for p in created.partitions} == {0, 1, 2}


def test_manual_assignment() -> None:
    store = cluster(0, 1, 2)
    created = admin(store).create_topic("t", assignments={1: [2, 0], 0: [1, 2]})
    assert [(p.replicas, p.leader) for p in created.partitions] == [((1, 2), 1), ((2, 0), 2)]


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"name": "bad name"}, InvalidTopicError),
    ({"name": ""}, InvalidTopicError),
    ({"name": "exists"}, TopicAlreadyExistsError),
    ({"name": "dotted_name"}, InvalidTopicError),  # collides with dotted.name
    ({"partitions": 0}, InvalidPartitionsError),
    ({"replication_factor": 0}, InvalidReplicationFactorError),
    ({"replication_factor": 3}, InvalidReplicationFactorError),
    ({"configs": {"cleanup.policy": "shred"}}, InvalidConfigError),
    ({"configs": {"no.such.key": "1"}}, InvalidConfigError),
    ({"partitions": 1, "assignments": {0: [0]}}, InvalidRequestError),
    ({"assignments": {0: [0], 2: [1]}}, InvalidReplicaAssignmentError),
    ({"assignments": {0: [0, 0]}}, InvalidReplicaAssignmentError),
    ({"assignments": {0: []}}, InvalidReplicaAssignmentError),
    ({"assignments": {0: [0, 9]}}, InvalidReplicaAssignmentError),
    ({"assignments": {0: [0, 1], 1: [1]}}, InvalidReplicaAssignmentError),
])
def test_create_errors_write_nothing(kwargs: dict, error: type[Exception]) -> None:
    store = cluster(0, 1)
    topics = admin(store)
    topics.create_topic("exists")
    topics.create_topic("dotted.name")
    before = store.image
    args = {"name": "new", **kwargs}
    with pytest.raises(error):
        topics.create_topic(args.pop("name"), **args)
    with pytest.raises(error):
        topics.create_topic(kwargs.get("name", "new"), validate_only=True,
                            **{k: v for k, v in kwargs.items() if k != "name"})
    assert store.image is before


def test_validate_only_returns_the_topic_and_writes_nothing() -> None:
    store = cluster(0)
    before = store.image
    planned = admin(store, **{"num.partitions": 2}).create_topic("t", validate_only=True)
    assert len(planned.partitions) == 2 and store.image is before


def test_internal_topics() -> None:
    store = cluster(0)
    topics = admin(store)
    assert topics.create_topic("__consumer_offsets", 2, 1).internal
    assert topics.create_topic("__transaction_state", 1, 1).internal
    assert topics.create_topic("own", 1, 1, internal=True).internal
    assert not topics.create_topic("plain", 1, 1).internal


def test_delete() -> None:
    store = cluster(0)
    topics = admin(store)
    created = topics.create_topic("t")
    assert topics.delete_topic("t") == created and "t" not in store.image.topics
    with pytest.raises(UnknownTopicOrPartitionError):
        topics.delete_topic("t")
    topics.create_topic("kept")
    with pytest.raises(TopicDeletionDisabledError):
        admin(store, **{"delete.topic.enable": False}).delete_topic("kept")
    assert "kept" in store.image.topics


def test_internal_topics_are_neither_deleted_nor_grown() -> None:
    store = cluster(0)
    topics = admin(store)
    topics.create_topic("__consumer_offsets", 3, 1)
    with pytest.raises(InvalidTopicError, match="internal topic and cannot be deleted"):
        topics.delete_topic("__consumer_offsets")
    with pytest.raises(InvalidTopicError, match="cannot be given more partitions"):
        topics.add_partitions("__consumer_offsets", 4, validate_only=True)
    assert len(store.image.topics["__consumer_offsets"].partitions) == 3


def test_add_partitions_places_only_the_new_ones() -> None:
    store = cluster(0, 1, 2)
    topics = admin(store)
    created = topics.create_topic("t", 2, 2)
    grown = topics.add_partitions("t", 5)
    assert grown == store.image.topics["t"]
    assert grown.partitions[:2] == created.partitions and len(grown.partitions) == 5
    for p in grown.partitions[2:]:
        assert len(set(p.replicas)) == 2 and p.leader == p.replicas[0] and p.leader_epoch == 0
    manual = topics.add_partitions("t", 6, [[2, 1]])
    assert manual.partitions[5] == PartitionInfo(5, 2, 0, (2, 1), (2, 1))


@pytest.mark.parametrize(("name", "total", "assignments", "error"), [
    ("missing", 3, None, UnknownTopicOrPartitionError),
    ("t", 2, None, InvalidPartitionsError),
    ("t", 1, None, InvalidPartitionsError),
    ("t", 4, [[0, 1]], InvalidReplicaAssignmentError),  # two partitions, one assignment
    ("t", 3, [[0, 9]], InvalidReplicaAssignmentError),
    ("t", 3, [[0]], InvalidReplicaAssignmentError),  # replication factor differs
    ("t", 3, [[1, 1]], InvalidReplicaAssignmentError),
])
def test_add_partitions_errors_write_nothing(
    name: str, total: int, assignments: Sequence[Sequence[int]] | None, error: type[Exception]
) -> None:
    store = cluster(0, 1)
    topics = admin(store)
    topics.create_topic("t", 2, 2)
    before = store.image
    with pytest.raises(error):
        topics.add_partitions(name, total, assignments, validate_only=True)
    with pytest.raises(error):
        topics.add_partitions(name, total, assignments)
    assert store.image is before


def test_add_partitions_validate_only() -> None:
    store = cluster(0)
    topics = admin(store)
    topics.create_topic("t", 1, 1)
    before = store.image
    assert len(topics.add_partitions("t", 3, validate_only=True).partitions) == 3
    assert store.image is before


def test_set_topic_configs() -> None:
    store = cluster(0)
    topics = admin(store)
    topics.create_topic("t", configs={"retention.ms": "1"})
    updated = topics.set_topic_configs("t", {"segment.ms": "5000"})
    assert updated.configs == {"segment.ms": "5000"} == store.image.topics["t"].configs
    before = store.image
    with pytest.raises(InvalidConfigError):
        topics.set_topic_configs("t", {"segment.ms": "soon"})
    with pytest.raises(UnknownTopicOrPartitionError):
        topics.set_topic_configs("missing", {})
    assert topics.set_topic_configs("t", {}, validate_only=True).configs == {}
    assert store.image is before


class RacingStore(MemoryMetadataStore):
    """Another writer changes the image just before each of the next ``races`` writes."""

    def __init__(self, races: int, race: str = "broker") -> None:
        super().__init__()
        self.races = races
        self.race = race

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        if self.races > 0:
            self.races -= 1
            if self.race == "broker":
                self.register_broker(BrokerInfo(0, "moved", 9093))
            else:
                TopicAdmin(self, BrokerConfig()).create_topic("t")
        return super().write(expected_epoch, changes)


def test_a_stale_write_is_planned_again_on_the_new_image() -> None:
    store = RacingStore(races=2)
    store.register_broker(BrokerInfo(0, "h", 9092))
    assert admin(store).create_topic("t").name in store.image.topics
    assert store.races == 0


def test_replanning_sees_what_the_other_writer_did() -> None:
    store = RacingStore(races=1, race="same topic")
    store.register_broker(BrokerInfo(0, "h", 9092))
    with pytest.raises(TopicAlreadyExistsError):
        admin(store).create_topic("t")


def test_gives_up_after_a_few_stale_writes() -> None:
    store = RacingStore(races=WRITE_ATTEMPTS)
    store.register_broker(BrokerInfo(0, "h", 9092))
    with pytest.raises(StaleMetadataError):
        admin(store).create_topic("t")
    assert "t" not in store.image.topics


class LocalLogs:
    """A PartitionStorage keeping the partitions it holds in a set; ``fail_at`` makes
    preparing that partition fail (all or nothing, as the contract says)."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.held: set[tuple[str, int]] = set()
        self.fail_at = fail_at
        self.prepared: list[list[int]] = []
        self.discarded: list[tuple[str, int]] = []

    def prepare_partitions(self, topic: TopicInfo, partitions: Sequence[PartitionInfo]
                           ) -> list[tuple[str, int]]:
        self.prepared.append([p.partition for p in partitions])
        created = [(topic.name, p.partition) for p in partitions]
        if self.fail_at is not None and self.fail_at in {p.partition for p in partitions}:
            raise KafkaStorageError(f"cannot create the log of partition {topic.name}-"
                                    f"{self.fail_at}")
        self.held.update(created)
        return created

    def discard_partitions(self, prepared: list[tuple[str, int]]) -> None:
        self.discarded += prepared
        self.held.difference_update(prepared)


def test_new_partitions_get_storage_before_the_metadata_names_them() -> None:
    store = cluster(0)
    logs = LocalLogs()
    topics = TopicAdmin(store, BrokerConfig(), storage=logs)
    topics.create_topic("t", 3, validate_only=True)  # validation prepares nothing
    assert logs.prepared == []
    topics.create_topic("t", 3)
    topics.add_partitions("t", 5)
    assert logs.prepared == [[0, 1, 2], [3, 4]]  # only what each write adds
    assert logs.held == {("t", p) for p in range(5)} and not logs.discarded


def test_a_storage_failure_leaves_no_topic_and_a_retry_works() -> None:
    store = cluster(0)
    logs = LocalLogs(fail_at=2)
    topics = TopicAdmin(store, BrokerConfig(), storage=logs)
    epoch = store.image.epoch
    with pytest.raises(KafkaStorageError, match="t-2"):
        topics.create_topic("t", 4)
    assert "t" not in store.image.topics and store.image.epoch == epoch and not logs.held
    logs.fail_at = None
    assert len(topics.create_topic("t", 4).partitions) == 4  # not TOPIC_ALREADY_EXISTS
    logs.fail_at = 5
    with pytest.raises(KafkaStorageError):
        topics.add_partitions("t", 6)
    assert len(store.image.topics["t"].partitions) == 4
    assert logs.held == {("t", p) for p in range(4)}


def test_storage_prepared_for_a_write_that_did_not_happen_is_discarded() -> None:
    store = RacingStore(races=2)
    store.register_broker(BrokerInfo(0, "h", 9092))
    logs = LocalLogs()
    TopicAdmin(store, BrokerConfig(), storage=logs).create_topic("t", 2)
    # Two stale writes: prepared and discarded twice, kept the third time.
    assert logs.prepared == [[0, 1]] * 3 and logs.discarded == [("t", 0), ("t", 1)] * 2
    assert logs.held == {("t", 0), ("t", 1)}
    failing = cluster(0)
    failing.fail_next_write(OSError(28, "No space left on device"))
    logs = LocalLogs()
    with pytest.raises(OSError):
        TopicAdmin(failing, BrokerConfig(), storage=logs).create_topic("u", 2)
    assert not logs.held and logs.discarded == [("u", 0), ("u", 1)]
    assert "u" not in failing.image.topics
