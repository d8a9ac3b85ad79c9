"""Replication between real broker processes on a real ZooKeeper: followers fetch from the
leader (byte-identical logs and leader-epoch checkpoints), acks=all waits for the ISR,
consumers see only what is below the high watermark, a paused follower leaves the ISR after
``replica.lag.time.max.ms`` and rejoins, ``min.insync.replicas`` refuses acks=all with
NOT_ENOUGH_REPLICAS (19), and a leader change written through the store turns the old leader
into a follower that truncates its unreplicated tail by leader epoch."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

from strom.metadata.changes import SetPartitions
from strom.metadata.image import PartitionInfo
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol.versions import ApiKey
from strom.testing.broker import EmbeddedBroker
from strom.testing.chaos.replicas import read_replica
from strom.testing.pytest_plugin import BrokerFactory
from tests.broker.raw import RawClient
from tests.broker.test_data_path import produce as produce_raw
from tests.controller.cluster import leader_seen_by
from tests.metadata.zk_helpers import wait_until
from tests.storage.helpers import make_batch

NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


@pytest.fixture
def observer(zookeeper_connect: str) -> Iterator[ZooKeeperMetadataStore]:
    store = ZooKeeperMetadataStore(zookeeper_connect, timeout=5.0)
    yield store
    store.close()


ClusterFactory = Callable[..., list[EmbeddedBroker]]


@pytest.fixture
def cluster(zookeeper_connect: str, strom_broker_factory: BrokerFactory) -> ClusterFactory:
    def start(size: int = 3, **config: object) -> list[EmbeddedBroker]:
        # controlled shutdown retried after 100 ms (Kafka's test harness): the last broker
        # stopped at teardown has nowhere to move its leadership and retries 3 times
        settings = {"zookeeper.connect": zookeeper_connect, "replica.fetch.backoff.ms": 100,
                    "zookeeper.session.timeout.ms": 30000,
                    "controlled.shutdown.retry.backoff.ms": 100, **config}
        return [strom_broker_factory({**settings, "node.id": i}, log_level="INFO")
                for i in range(size)]
    return start


def create_topic(brokers: list[EmbeddedBroker], observer: ZooKeeperMetadataStore,
                 name: str, **configs: str) -> PartitionInfo:
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == len(brokers),
               what="every broker registered")
    admin.create_topics([NewTopic(name, 1, len(brokers), config=configs)])[name].result(15)
    wait_until(lambda: name in observer.image.topics, what="the topic in ZooKeeper")
    return observer.image.topics[name].partitions[0]


def partition_state(observer: ZooKeeperMetadataStore, topic: str) -> PartitionInfo:
    return observer.image.topics[topic].partitions[0]


def log_bytes(broker: EmbeddedBroker, topic: str) -> bytes:
    directory = broker.data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def epochs_file(broker: EmbeddedBroker, topic: str) -> str:
    return (broker.data_dir / f"{topic}-0" / "leader-epoch-checkpoint").read_text()


def wait_identical(brokers: list[EmbeddedBroker], topic: str, timeout: float = 20.0) -> bytes:
    """Wait until every replica's log holds the same bytes; returns them."""
    wait_until(lambda: len({log_bytes(b, topic) for b in brokers}) == 1, timeout=timeout,
               what="identical logs on every replica")
    return log_bytes(brokers[0], topic)


def produce(bootstrap: str, topic: str, values: list[bytes], **config: object
            ) -> list[KafkaError | None]:
    """Produce ``values`` in order; the delivery error of each (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    errors: list[KafkaError | None] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(60) == 0
    return errors


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 20.0
                ) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    seen.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return seen


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


class Paused:
    """SIGSTOP brokers for the duration of a ``with`` block (SIGCONT on the way out)."""

    def __init__(self, *brokers: EmbeddedBroker) -> None:
        self.brokers = brokers

    def __enter__(self) -> Paused:
        for broker in self.brokers:
            assert broker.process is not None
            broker.process.send_signal(signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume()

    def resume(self) -> None:
        for broker in self.brokers:
            if broker.process is not None:
                broker.process.send_signal(signal.SIGCONT)


def test_acks_all_replicates_the_same_bytes_and_consumers_stop_at_the_high_watermark(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    brokers = cluster()
    state = create_topic(brokers, observer, "rf3")
    assert state.replicas and set(state.isr) == {0, 1, 2}
    leader = brokers[state.leader]
    followers = [b for i, b in enumerate(brokers) if i != state.leader]

    values = [f"v{i}".encode() for i in range(500)]
    assert produce(leader.bootstrap, "rf3", values, acks="all") == [None] * 500
    data = wait_identical(brokers, "rf3")
    assert data.count(b"v499") == 1  # the records, not an empty log
    # followers keep the leader's epochs (from its batches) in their checkpoint
    assert {epochs_file(b, "rf3") for b in brokers} == {epochs_file(leader, "rf3")}
    assert epochs_file(leader, "rf3").splitlines()[2:] == [f"{state.leader_epoch} 0"]
    assert [v for _, v in consume_all(leader.bootstrap, "rf3", 500)] == values
    assert high_watermark(leader.bootstrap, "rf3") == 500

    # With the followers paused, acks=1 records reach only the leader: the high watermark
    # stays, and consumers do not see them until the followers have them.
    with Paused(*followers) as paused:
        assert produce(leader.bootstrap, "rf3", [b"late-1", b"late-2"], acks=1) == [None] * 2
        time.sleep(0.5)
        assert high_watermark(leader.bootstrap, "rf3") == 500
        assert len(consume_all(leader.bootstrap, "rf3", 502, timeout=2)) == 500
        paused.resume()
        wait_until(lambda: high_watermark(leader.bootstrap, "rf3") == 502,
                   what="the high watermark past the late records")
    assert consume_all(leader.bootstrap, "rf3", 502)[-2:] == [(500, b"late-1"),
                                                                (501, b"late-2")]
    wait_identical(brokers, "rf3")

    # on the wire: only the leader serves writes, replicas and epochs, checked by
    # current_leader_epoch; consumers read from followers from Fetch v11 (KIP-392)
    epoch, follower_id = state.leader_epoch, brokers.index(followers[0])
    on_follower, on_leader = RawClient(followers[0].bootstrap), RawClient(leader.bootstrap)
    try:
        assert fetch_error(on_follower, -1, epoch, version=10) == NOT_LEADER_OR_FOLLOWER
        assert fetch_error(on_follower, -1, epoch) == 0
        batch = bytes(make_batch([b"to-a-follower"]))
        assert produce_raw(on_follower, "rf3", batch, acks=1) == (NOT_LEADER_OR_FOLLOWER, -1)
        assert produce_raw(on_follower, "rf3", batch, acks=-1)[0] == NOT_LEADER_OR_FOLLOWER
        assert fetch_error(on_follower, state.leader, epoch) == NOT_LEADER_OR_FOLLOWER
        assert fetch_error(on_leader, follower_id, epoch + 1) == UNKNOWN_LEADER_EPOCH
        assert fetch_error(on_leader, -1, epoch) == 0
        assert end_offset(on_follower, follower_id, epoch) == (NOT_LEADER_OR_FOLLOWER, -1, -1)
        assert end_offset(on_leader, follower_id, epoch) == (0, epoch, 502)
        assert end_offset(on_leader, follower_id, -1) == (0, -1, -1)
        assert end_offset(on_leader, follower_id, epoch + 5) == (0, -1, -1)
        assert end_offset(on_leader, follower_id, epoch, current=epoch + 1)[0] == \
            UNKNOWN_LEADER_EPOCH
    finally:
        on_follower.close()
        on_leader.close()


def fetch_error(client: RawClient, replica_id: int, current_leader_epoch: int,
                topic: str = "rf3", version: int = 12) -> int:
    response = client.call(ApiKey.FETCH, version, {
        "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": 0, "partition_max_bytes": 1024}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return int(response.responses[0].partitions[0].error_code)


def end_offset(client: RawClient, replica_id: int, leader_epoch: int, *, current: int = -1
               ) -> tuple[int, int, int]:
    response = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": replica_id, "topics": [{"topic": "rf3", "partitions": [{
            "partition": 0, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]})
    p = response.topics[0].partitions[0]
    return int(p.error_code), int(p.leader_epoch), int(p.end_offset)


def test_a_paused_follower_leaves_the_isr_and_rejoins(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    brokers = cluster(**{"replica.lag.time.max.ms": 1500})
    state = create_topic(brokers, observer, "lag")
    leader = brokers[state.leader]
    victim_id = next(r for r in state.replicas if r != state.leader)
    victim = brokers[victim_id]
    with Paused(victim) as paused:
        started = time.monotonic()
        # acks=all completes once the ISR no longer waits for the paused follower
        assert produce(leader.bootstrap, "lag", [b"a", b"b", b"c"], acks="all") == [None] * 3
        wait_until(lambda: victim_id not in partition_state(observer, "lag").isr, timeout=15,
                   what="the paused follower out of the ISR")
        assert time.monotonic() - started >= 1.0  # not before replica.lag.time.max.ms
        after = partition_state(observer, "lag")
        assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch)
        assert produce(leader.bootstrap, "lag", [b"d"], acks="all") == [None]
        paused.resume()
        wait_until(lambda: set(partition_state(observer, "lag").isr) == {0, 1, 2},
                   timeout=15, what="the follower back in the ISR")
    assert partition_state(observer, "lag").leader_epoch == state.leader_epoch
    wait_identical(brokers, "lag")


def test_min_insync_replicas_refuses_acks_all_with_not_enough_replicas(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    brokers = cluster(**{"replica.lag.time.max.ms": 1000})
    state = create_topic(brokers, observer, "minisr", **{"min.insync.replicas": "2"})
    leader = brokers[state.leader]
    followers = [b for i, b in enumerate(brokers) if i != state.leader]
    assert produce(leader.bootstrap, "minisr", [b"ok"], acks="all") == [None]
    with Paused(*followers):
        # (as in Kafka, a follower that has everything never lags, fetching or not)
        assert produce(leader.bootstrap, "minisr", [b"behind"], acks=1) == [None]
        wait_until(lambda: partition_state(observer, "minisr").isr == (state.leader,),
                   timeout=15, what="the ISR shrunk to the leader")
        errors = produce(leader.bootstrap, "minisr", [b"refused"], acks="all", retries=0)
        assert errors[0] is not None and errors[0].code() == NOT_ENOUGH_REPLICAS
        assert produce(leader.bootstrap, "minisr", [b"one"], acks=1) == [None]
    wait_until(lambda: len(partition_state(observer, "minisr").isr) == 3, timeout=15,
               what="the ISR whole again")
    assert produce(leader.bootstrap, "minisr", [b"all"], acks="all") == [None]
    assert [v for _, v in consume_all(leader.bootstrap, "minisr", 4)] == [
        b"ok", b"behind", b"one", b"all"]


def test_a_leader_change_makes_the_old_leader_truncate_by_epoch_and_follow(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    brokers = cluster()
    state = create_topic(brokers, observer, "moved")
    old = brokers[state.leader]
    new_id = next(r for r in state.replicas if r != state.leader)
    new = brokers[new_id]
    others = [b for i, b in enumerate(brokers) if i != state.leader]
    values = [f"c{i}".encode() for i in range(100)]
    assert produce(old.bootstrap, "moved", values, acks="all") == [None] * 100
    committed = wait_identical(brokers, "moved")

    # Paused, the followers miss what the old leader acknowledges alone, which is then lost
    # when leadership moves (as in Kafka). A fetch each follower had parked at the leader is
    # answered by the first record ("maybe"), which may reach a follower when it resumes.
    # A follower that fetched the orphans before it read the new image would keep them (as
    # in Kafka; its image arrives from ZooKeeper while it goes on fetching), so the old
    # leader is held paused until the followers have moved on.
    with Paused(*others) as paused:
        assert produce(old.bootstrap, "moved", [b"maybe"], acks=1) == [None]
        time.sleep(1.0)  # parked fetches answered (replica.fetch.wait.max.ms is 500)
        assert produce(old.bootstrap, "moved", [b"orphan"] * 20, acks=1) == [None] * 20
        assert len(log_bytes(old, "moved")) > len(committed)
        image = observer.image
        current = image.topics["moved"].partitions[0]
        assert set(current.isr) == {0, 1, 2}  # sessions and ISR outlive a short pause
        moved = dataclasses.replace(current, leader=new_id,
                                    leader_epoch=current.leader_epoch + 1)
        observer.write(image.epoch, [SetPartitions("moved", (moved,))])
        with Paused(old):
            paused.resume()
            wait_until(lambda: all(leader_seen_by(f, "moved") == new_id for f in others),
                       what="the followers on the new image")

    # the old leader truncates its tail (it follows at the new epoch) and replicates
    more = [f"n{i}".encode() for i in range(30)]
    assert produce(new.bootstrap, "moved", more, acks="all") == [None] * 30
    data = wait_identical(brokers, "moved")
    assert data.startswith(committed) and b"orphan" not in data
    kept = [v for _, v in consume_all(new.bootstrap, "moved", 131, timeout=5)]
    assert kept in (values + more, [*values, b"maybe", *more])
    new_start = len(kept) - len(more)  # where the new leader's epoch starts
    lines = epochs_file(old, "moved").splitlines()[2:]
    assert lines == [f"{state.leader_epoch} 0", f"{state.leader_epoch + 1} {new_start}"]
    assert {epochs_file(b, "moved") for b in brokers} == {epochs_file(new, "moved")}
    assert any(f"truncating from 121 to {new_start}" in line for line in old.output)
    client = RawClient(new.bootstrap)
    try:  # the old leader's epoch is fenced now
        assert fetch_error(client, state.leader, state.leader_epoch, "moved") == \
            FENCED_LEADER_EPOCH
    finally:
        client.close()


def test_a_follower_stopped_under_acks_all_traffic_stops_promptly_and_stays_out_of_the_isr(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    """A clean stop ends the follower's fetchers for good: it neither hangs its shutdown (a
    cancellation lost to a racing fetch response kept the fetch loop running until the
    broker was killed after 20 s) nor goes on fetching, which put it back in the ISR."""
    brokers = cluster()
    state = create_topic(brokers, observer, "busy")
    leader = brokers[state.leader]
    victim_id = next(r for r in state.replicas if r != state.leader)
    victim = brokers[victim_id]
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "all",
                         "linger.ms": 0})
    stop_traffic = False
    isrs: list[tuple[int, ...]] = []

    def traffic() -> None:
        while not stop_traffic:
            with contextlib.suppress(BufferError):  # a full queue: delivered meanwhile
                producer.produce("busy", b"x" * 100)
            producer.poll(0.001)
        producer.flush(30)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        for _ in range(3):
            wait_until(lambda: set(partition_state(observer, "busy").isr) == {0, 1, 2},
                       timeout=20, what="a full ISR")
            time.sleep(0.5)
            started = time.monotonic()
            assert victim.stop() == 0
            assert time.monotonic() - started < 8.0  # not the 20 s kill of a hung shutdown
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                isrs.append(partition_state(observer, "busy").isr)
                time.sleep(0.05)
            victim.start()
    finally:
        stop_traffic = True
        sender.join()
    assert all(victim_id not in isr for isr in isrs), isrs


def test_a_new_replica_of_a_compacted_topic_copies_the_cleaned_log_with_its_gaps(
        cluster: ClusterFactory, observer: ZooKeeperMetadataStore) -> None:
    """The leader's cleaner leaves offset gaps; a replica added by reassignment appends the
    surviving batches at the leader's offsets, joins the ISR, and holds the same records at
    the same offsets (Kafka's follower: offsets must increase, gaps allowed)."""
    brokers = cluster(2, **{"log.cleaner.backoff.ms": 50})
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, what="both brokers")
    configs = {"cleanup.policy": "compact", "segment.bytes": "2048",
               "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic("cleaned", 1, 1, config=configs)])["cleaned"].result(15)
    wait_until(lambda: "cleaned" in observer.image.topics, what="the topic in ZooKeeper")
    first = partition_state(observer, "cleaned").leader
    leader, added = brokers[first], brokers[1 - first]
    producer = Producer({"bootstrap.servers": leader.bootstrap, "linger.ms": 5,
                         "batch.size": 1000})
    errors: list[KafkaError | None] = []
    for i in range(400):
        key = f"keep-{i}" if i % 97 == 0 else f"key-{i % 10}"  # whole batches go
        producer.produce("cleaned", f"value-{i}".encode(), key=key.encode(),
                         on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * 400

    def leader_offsets() -> list[int]:
        return [r.offset for r in read_replica(first, leader.data_dir, "cleaned", 0).records]
    wait_until(lambda: 0 < len(leader_offsets()) < 100, what="the leader's log cleaned")
    # No more cleaning from here on, on either replica: the copies stay comparable.
    delete = ConfigEntry("cleanup.policy", "delete",
                         incremental_operation=AlterConfigOpType.SET)
    alter = admin.incremental_alter_configs([
        ConfigResource("topic", "cleaned", incremental_configs=[delete])])
    next(iter(alter.values())).result(15)
    time.sleep(0.5)  # a cleaning round under way ends
    offsets = leader_offsets()
    assert offsets[:2] == [0, 97] and len(offsets) < 100  # whole batches gone: gaps

    reassigner = KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in brokers])
    try:
        tp = KafkaTopicPartition("cleaned", 0)
        assert reassigner.alter_partition_reassignments({tp: [first, 1 - first]}) == {tp: None}
    finally:
        reassigner.close()
    wait_until(lambda: set(partition_state(observer, "cleaned").isr) == {0, 1}
               and not partition_state(observer, "cleaned").adding_replicas,
               timeout=30, what="the new replica in the ISR")
    assert produce(leader.bootstrap, "cleaned", [b"after"], acks="all") == [None]
    for broker in brokers:
        broker.stop()
    copied = read_replica(1 - first, added.data_dir, "cleaned", 0)
    original = read_replica(first, leader.data_dir, "cleaned", 0)
    assert original.problem is None and copied.problem is None
    assert copied.records == original.records
    assert copied.records[-1].value == "after" and len(copied.records) < 100
