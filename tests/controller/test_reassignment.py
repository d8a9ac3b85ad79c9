"""Reassignment (KIP-455): the decisions (:mod:`strom.controller.reassignment`) on the
in-memory store, whose checks (leader in the ISR, epochs never going down, adding / removing
within the replicas) every step must pass; then AlterPartitionReassignments /
ListPartitionReassignments from kafka-python's admin client on a real three-broker cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from strom.client.conn import Connection
from strom.controller.reassignment import ACCEPTED, ongoing, progress, reassign
from strom.metadata.changes import SetPartitions
from strom.metadata.image import MetadataImage, PartitionInfo
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.testing.broker import EmbeddedBroker
from strom.testing.metadata import MemoryMetadataStore
from strom.testing.pytest_plugin import BrokerFactory
from tests.controller.cluster import (
    IDS,
    create,
    leader_seen_by,
    on_two_brokers,
    start_cluster,
    wait_for,
)
from tests.controller.test_decisions import T, store_with
from tests.metadata.zk_helpers import wait_until


def start(store: MemoryMetadataStore, target: tuple[int, ...] | None,
          partition: int = 0) -> str:
    image = store.image
    decided = reassign(image, image.brokers, {(T, partition): target})
    if decided.changes:
        store.write(image.epoch, decided.changes)
    return decided.results[(T, partition)].error


def part(image: MetadataImage, partition: int = 0) -> PartitionInfo:
    return image.topics[T].partitions[partition]


def set_isr(store: MemoryMetadataStore, isr: tuple[int, ...]) -> None:
    """What the leader's ISR expansion writes: the ISR, same leader epoch."""
    p = part(store.image)
    store.write(store.image.epoch, [SetPartitions(T, (dataclasses.replace(p, isr=isr),))])


def advance(store: MemoryMetadataStore) -> MetadataImage:
    """Run the controller's progress step once (and check it then has nothing to do)."""
    image = store.image
    changes = progress(image, image.brokers)
    if changes:
        image = store.write(image.epoch, changes)
    assert progress(image, image.brokers) == []
    return image


def test_a_move_adds_the_target_waits_for_the_isr_then_moves_leadership_and_drops_the_old(
        ) -> None:
    store = store_with((1, 3, (1, 2), (1, 2)), brokers=(1, 2, 3, 4))
    assert start(store, (3, 4)) == "NONE"
    p = part(store.image)
    # full set = target then original; epoch bumped so every replica learns the new set
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((3, 4, 1, 2), (3, 4), (1, 2))
    assert (p.leader, p.leader_epoch, p.isr) == (1, 4, (1, 2))
    assert [(t, q.partition) for t, q in ongoing(store.image)] == [(T, 0)]

    assert part(advance(store)) == p  # the new replicas are not in sync yet
    set_isr(store, (1, 2, 3))
    assert part(advance(store)) == part(store.image) and part(store.image).reassigning
    set_isr(store, (1, 2, 3, 4))
    done = part(advance(store))
    # leader 1 is not in the target: the first target replica in the ISR leads
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((3, 4), (3, 4), 3, 5)
    assert not done.reassigning and ongoing(store.image) == []


def test_a_leader_in_the_target_keeps_leading_and_the_epoch_still_moves() -> None:
    store = store_with((2, 0, (1, 2), (1, 2)))
    assert start(store, (2, 3)) == "NONE"
    set_isr(store, (1, 2, 3))
    done = part(advance(store))
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((2, 3), (2, 3), 2, 2)


def test_a_target_already_in_sync_completes_at_once() -> None:
    store = store_with((1, 0, (1, 2, 3), (1, 2, 3)))
    assert start(store, (3, 2)) == "NONE"  # shrink and reorder: nothing to catch up
    p = part(store.image)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.reassigning) == (
        (3, 2), (2, 3), 3, 1, False)


def test_cancelling_reverts_to_the_original_replicas() -> None:
    store = store_with((1, 0, (1, 2), (1, 2)))
    assert start(store, (1, 3)) == "NONE"
    set_isr(store, (1, 2, 3))  # 3 caught up; cancelled before the controller moved on
    assert start(store, None) == "NONE"
    p = part(store.image)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.reassigning) == (
        (1, 2), (1, 2), 1, 2, False)
    assert start(store, None) == "NO_REASSIGNMENT_IN_PROGRESS"


def test_a_new_target_restarts_from_the_original_replicas() -> None:
    store = store_with((1, 0, (1, 2), (1, 2)), brokers=(1, 2, 3, 4))
    assert start(store, (3, 4)) == "NONE"
    assert start(store, (1, 4)) == "NONE"
    p = part(store.image)
    # 3 was only being added: it is gone at once
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 4, 2), (4,), (2,))


def test_no_live_target_replica_in_the_isr_keeps_the_reassignment_waiting() -> None:
    store = store_with((1, 0, (1, 2), (1, 2)))
    assert start(store, (3,)) == "NONE"
    set_isr(store, (1, 2, 3))
    store.unregister_broker(3)
    assert part(advance(store)).reassigning


@pytest.mark.parametrize(("target", "error", "message"), [
    ((), "INVALID_REPLICA_ASSIGNMENT",
     "Empty replica list specified in partition reassignment."),
    ((1, 1), "INVALID_REPLICA_ASSIGNMENT",
     "Duplicate replica ids in partition reassignment replica list: [1, 1]"),
    ((1, -2), "INVALID_REPLICA_ASSIGNMENT", "Invalid broker id in replica list: [1, -2]"),
    ((1, 9), "INVALID_REPLICA_ASSIGNMENT",
     "Replica assignment has brokers that are not alive. Replica list: [9], "
     "live broker list: [1, 2, 3]"),
])
def test_invalid_targets_are_refused_and_change_nothing(
        target: tuple[int, ...], error: str, message: str) -> None:
    store = store_with((1, 0, (1, 2), (1, 2)))
    image = store.image
    decided = reassign(image, image.brokers, {(T, 0): target})
    assert decided.changes == []
    assert (decided.results[(T, 0)].error, decided.results[(T, 0)].message) == (error, message)


def test_unknown_partitions_and_the_same_replicas() -> None:
    store = store_with((1, 0, (1, 2), (1, 2)))
    image = store.image
    decided = reassign(image, image.brokers, {
        (T, 5): (1, 2), ("nope", 0): (1,), ("nope", 1): None, (T, 0): (1, 2)})
    assert {tp: r.error for tp, r in decided.results.items()} == {
        (T, 5): "UNKNOWN_TOPIC_OR_PARTITION", ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION",
        ("nope", 1): "NO_REASSIGNMENT_IN_PROGRESS", (T, 0): "NONE"}
    assert decided.results[(T, 0)] == ACCEPTED and decided.changes == []


def test_a_replication_factor_change_can_be_refused() -> None:
    # AlterPartitionReassignments v1 (KIP-860) with allow_replication_factor_change false,
    # as three Kafka 4.4 nodes answer it: the replicas are checked first, then the size
    # against the partition's replicas (its original ones while it moves).
    store = store_with((1, 0, (1, 2), (1, 2)))
    image = store.image

    def refused(target: tuple[int, ...]) -> tuple[str, str | None]:
        decided = reassign(store.image, store.image.brokers, {(T, 0): target},
                           allow_replication_factor_change=False)
        result = decided.results[(T, 0)]
        if result.error != "NONE":
            assert decided.changes == []
        return result.error, result.message

    assert refused((1, 2, 3)) == ("INVALID_REPLICATION_FACTOR",
                                  "The replication factor is changed from 2 to 3")
    assert refused((3,)) == ("INVALID_REPLICATION_FACTOR",
                             "The replication factor is changed from 2 to 1")
    assert refused((1, 9)) == ("INVALID_REPLICA_ASSIGNMENT",
                               "Replica assignment has brokers that are not alive. Replica "
                               "list: [9], live broker list: [1, 2, 3]")
    assert image is store.image  # nothing written
    assert start(store, (2, 3)) == "NONE"  # the default allows any size
    assert part(store.image).reassigning and set(part(store.image).original_replicas) == {1, 2}
    assert refused((3, 1)) == ("NONE", None)  # two, as the original replicas
    assert refused((3,)) == ("INVALID_REPLICATION_FACTOR",
                             "The replication factor is changed from 2 to 1")


# -- on a real cluster: three brokers on ZooKeeper, kafka-python's admin client ------------


def kafka_python_admin(brokers: dict[int, EmbeddedBroker]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in brokers.values()],
                            request_timeout_ms=15000)


def test_a_reassignment_moves_a_partition_and_its_records_across_the_cluster(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller, a, b = on_two_brokers(cluster, observer, "moving")
    bootstrap = ",".join(broker.bootstrap for broker in cluster.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("moving", f"before-{i}".encode())
    assert producer.flush(20) == 0
    admin = kafka_python_admin(cluster)
    tp = KafkaTopicPartition("moving", 0)
    images: list[MetadataImage] = []
    observer.subscribe(images.append)
    try:
        assert admin.alter_partition_reassignments({tp: [controller, b]}) == {tp: None}
        # the new replica follows, the leader takes it into the ISR, the controller
        # completes the move: leader a is not in the target, the first target replica leads
        done = wait_for(observer, "moving", lambda p: p.replicas == (controller, b),
                        "the completed reassignment")
        assert (done.leader, sorted(done.isr), done.reassigning) == (
            controller, sorted((controller, b)), False)
        started = [p for i in images if (p := i.topics["moving"].partitions[0]).reassigning]
        assert started, "the reassignment was never seen in progress"
        assert (started[0].replicas, started[0].adding_replicas,
                started[0].removing_replicas, started[0].leader) == (
            (controller, b, a), (controller,), (a,), a)
        assert started[0].leader_epoch == 1 and done.leader_epoch == 2
        # the controller answers from its image, which reads the completion back from
        # ZooKeeper (off its event loop) a moment after the observer may have
        wait_until(lambda: admin.list_partition_reassignments() == {},
                   what="the controller's image past the reassignment")
        wait_until(lambda: not (cluster[a].data_dir / "moving-0").exists(),
                   what="the removed replica's log deleted")
        wait_until(lambda: leader_seen_by(cluster[b], "moving") == controller,
                   what="Metadata naming the new leader")
    finally:
        admin.close()
    # every acknowledged record is on the new leader, and it takes new ones
    producer.produce("moving", b"after")
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reassigned",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition("moving", 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(seen) < 21 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    assert seen == [f"before-{i}".encode() for i in range(20)] + [b"after"]


def test_reassignment_errors_and_cancellation_as_kafka_answers_them(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    # a long session: a paused broker stays registered (live) for the whole test
    brokers = start_cluster(zookeeper_connect, strom_broker_factory, observer,
                            {"zookeeper.session.timeout.ms": 30000})
    controller = observer.image.controller_id
    a, paused = [n for n in IDS if n != controller]
    create(brokers, observer, "stay", [[controller, a], [controller, a]])
    wait_for(observer, "stay", lambda p: p.leader == controller, "the first leader")
    # the controller plans against its own image, which reads the topic from ZooKeeper a
    # moment after the observer wrote it (Kafka's ZooKeeper-mode controller answers
    # UNKNOWN_TOPIC_OR_PARTITION from a context that has not yet seen the topic, too)
    wait_until(lambda: leader_seen_by(brokers[controller], "stay") == controller,
               what="the controller's image holding the topic")
    admin = kafka_python_admin(brokers)
    p0, p1 = KafkaTopicPartition("stay", 0), KafkaTopicPartition("stay", 1)
    pid = brokers[paused].pid
    assert pid is not None
    try:
        results = admin.alter_partition_reassignments({
            p0: [a, 9], p1: None, KafkaTopicPartition("stay", 7): [a],
            KafkaTopicPartition("nowhere", 0): [a]})
        assert {tp.partition if tp.topic == "stay" else -1: e.errno
                for tp, e in results.items()} == {0: 39, 1: 85, 7: 3, -1: 3}
        assert not any(p.reassigning for p in observer.image.topics["stay"].partitions)
        # a paused broker cannot catch up: the reassignment to it stays in progress
        os.kill(pid, signal.SIGSTOP)
        assert admin.alter_partition_reassignments({p0: [controller, paused]}) == {p0: None}
        wait_for(observer, "stay", lambda p: p.reassigning, "the reassignment")
        assert admin.list_partition_reassignments([p0, p1]) == {p0: {
            "replicas": [controller, paused, a], "adding_replicas": [paused],
            "removing_replicas": [a]}}
        assert admin.alter_partition_reassignments({p0: None}) == {p0: None}
        back = wait_for(observer, "stay", lambda p: not p.reassigning, "the cancellation")
        assert (back.replicas, back.leader, back.leader_epoch) == ((controller, a), controller, 2)
        assert sorted(back.isr) == sorted((controller, a))
        assert admin.list_partition_reassignments() == {}
        assert admin.alter_partition_reassignments({p0: None})[p0].errno == 85
    finally:
        os.kill(pid, signal.SIGCONT)
        admin.close()


def test_only_the_controller_answers_reassignment_requests(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    other = next(n for n in IDS if n != observer.image.controller_id)

    async def ask(broker: EmbeddedBroker) -> tuple[int, int, int]:
        conn = await Connection(broker.host, broker.port).open()
        try:
            altered = await conn.send(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, api.request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": [
                    {"name": "x", "partitions": [{"partition_index": 0, "replicas": None}]}]}))
            listed = await conn.send(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, api.request(
                ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None}))
            assert altered is not None and listed is not None
            alter = api.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, altered)
            listing = api.decode_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, listed)
            return (alter.error_code, len(alter.responses), listing.error_code)
        finally:
            await conn.close()

    assert asyncio.run(ask(cluster[other])) == (41, 0, 41)  # NOT_CONTROLLER, no partitions
    # the controller: nothing to cancel for the unknown partition (NO_REASSIGNMENT_IN_PROGRESS
    # per partition, as Kafka's check of a cancellation comes first)
    assert asyncio.run(ask(cluster[observer.image.controller_id])) == (0, 1, 0)
