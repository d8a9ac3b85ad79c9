"""The MetadataStore contract, run against every implementation (strom.metadata.store doc)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.controller.election import ControllerElection
from strom.metadata.changes import (
    InvalidMetadataChangeError,
    PutTopic,
    RemoveTopic,
    SetAcls,
    SetBrokerConfigs,
    SetClientQuota,
    SetPartitions,
    SetScramCredential,
    SetTopicConfigs,
)
from strom.metadata.image import (
    BrokerInfo,
    MetadataImage,
    PartitionInfo,
    ScramCredential,
    TopicInfo,
)
from strom.metadata.local import LocalMetadataStore
from strom.metadata.store import MetadataStore, ProducerIdBlock, StaleMetadataError
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.testing.metadata import MemoryMetadataStore
from tests.metadata.zk_helpers import wait_until

BROKER = BrokerInfo(0, "127.0.0.1", 9092)
Factory = Callable[[], MetadataStore]


@pytest.fixture(params=["local", "memory", "zookeeper"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Opens the store under test; for "local", opening again is a restart on the same dir;
    "zookeeper" is a one-broker cluster (registered and elected) in a chroot of its own on a
    real ZooKeeper server, and opening again is another broker's view of it (not
    registered)."""
    if request.param == "local":
        yield lambda: LocalMetadataStore(tmp_path, BROKER)
        return
    if request.param == "zookeeper":
        connect = request.getfixturevalue("zookeeper_connect")
        opened: list[ZooKeeperMetadataStore] = []

        def zookeeper() -> MetadataStore:
            store = ZooKeeperMetadataStore(connect, timeout=5.0)
            opened.append(store)
            if len(opened) > 1:
                return store
            store.register_broker(BROKER)
            ControllerElection(store, BROKER.node_id).start()
            wait_until(lambda: store.image.controller_id == BROKER.node_id)
            return store
        yield zookeeper
        for store in opened:
            store.close()
        return

    def memory() -> MetadataStore:
        store = MemoryMetadataStore()
        store.register_broker(BROKER)
        return store
    yield memory


def partition(p: int, replicas: tuple[int, ...] = (0,), epoch: int = 0) -> PartitionInfo:
    return PartitionInfo(p, replicas[0], epoch, replicas, replicas)


def topic(name: str, partitions: int = 1, topic_id: uuid.UUID | None = None) -> TopicInfo:
    return TopicInfo(name, topic_id or uuid.uuid4(),
                     tuple(partition(p) for p in range(partitions)), {"retention.ms": "1000"})


def test_writes_make_new_images_and_leave_old_ones_alone(open_store: Factory) -> None:
    store = open_store()
    before = store.image
    assert before.topics == {} and before.cluster_id == store.cluster_id != ""
    # (the broker epoch is the store's: the registration's czxid in ZooKeeper, else -1)
    assert {n: dataclasses.replace(b, epoch=-1) for n, b in before.brokers.items()} == {
        0: BROKER} and before.controller_id == 0
    written = store.write(before.epoch, [PutTopic(topic("a", 2))])
    assert written is store.image and written.epoch == before.epoch + 1
    assert "a" not in before.topics and len(written.topics["a"].partitions) == 2
    assert written.topics["a"].configs == {"retention.ms": "1000"}


def test_every_change_kind(open_store: Factory) -> None:
    store = open_store()
    a = topic("a", 1)
    store.write(store.image.epoch, [PutTopic(a), PutTopic(topic("b"))])
    store.write(store.image.epoch, [
        SetPartitions("a", (partition(0, epoch=3), partition(1), partition(2))),
        SetTopicConfigs("a", {"cleanup.policy": "compact"}),
        RemoveTopic("b"),
    ])
    image = store.image
    assert set(image.topics) == {"a"}
    got = image.topics["a"]
    assert got.topic_id == a.topic_id and got.configs == {"cleanup.policy": "compact"}
    assert [(p.partition, p.leader_epoch) for p in got.partitions] == [(0, 3), (1, 0), (2, 0)]
    # PutTopic with the same id replaces the topic whole
    store.write(image.epoch, [PutTopic(TopicInfo("a", a.topic_id, got.partitions, {}, True))])
    assert store.image.topics["a"].internal and store.image.topics["a"].configs == {}


def test_broker_configs_are_replaced_per_resource(open_store: Factory) -> None:
    store = open_store()
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1000"}),
                                    SetBrokerConfigs("0", {"message.max.bytes": "2048"})])
    assert store.image.broker_configs == {"": {"log.retention.ms": "1000"},
                                          "0": {"message.max.bytes": "2048"}}
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.segment.bytes": "4096"}),
                                    SetBrokerConfigs("0", {})])  # an empty set removes it
    assert store.image.broker_configs == {"": {"log.segment.bytes": "4096"}}
    before = store.image
    with pytest.raises(InvalidMetadataChangeError):
        store.write(before.epoch, [SetBrokerConfigs("broker-1", {"a": "b"})])
    assert store.image is before


def test_acls_are_replaced_per_pattern(open_store: Factory) -> None:
    store = open_store()
    literal = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    prefixed = ResourcePattern(ResourceType.GROUP, "team/a%", PatternType.PREFIXED)
    read = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    deny = AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY)
    store.write(store.image.epoch, [SetAcls(literal, frozenset({read, deny})),
                                    SetAcls(prefixed, frozenset({read}))])
    assert store.image.acls == {literal: {read, deny}, prefixed: {read}}
    store.write(store.image.epoch, [SetAcls(literal, frozenset({read})),
                                    SetAcls(prefixed, frozenset())])  # empty: removed
    assert store.image.acls == {literal: {read}}


def test_client_quotas_and_scram_credentials_live_side_by_side(open_store: Factory) -> None:
    """A user's SCRAM credential and its quotas share one record in some stores (Kafka's
    /config/users/<user> znode): changing one never drops the other. Each state is checked
    on the writer's image and on what a fresh reader (a restart, another broker) reads."""
    store = open_store()
    alice, odd = (("user", "alice"),), (("user", "a b/c*~é"),)
    default_user, default_client = (("user", None),), (("client-id", None),)
    alice_app = (("client-id", "app-1"), ("user", "alice"))
    alice_default_client = (("client-id", None), ("user", "alice"))
    bob_app = (("client-id", "app 2"), ("user", "bob"))
    sha256 = ScramCredential(b"salt", b"stored", b"server", 4096)
    sha512 = ScramCredential(b"salt2", b"stored2", b"server2", 8192)

    def holds(quotas: dict, scram: dict) -> None:
        readers = [store.image]
        if not isinstance(store, MemoryMetadataStore):
            readers.append(open_store().image)
        for image in readers:
            assert image.client_quotas == quotas and image.scram_credentials == scram

    store.write(store.image.epoch, [
        SetScramCredential("alice", "SCRAM-SHA-256", sha256),
        SetClientQuota(alice, "producer_byte_rate", 1024),
        SetClientQuota(alice, "request_percentage", 12.5),
        SetClientQuota(odd, "consumer_byte_rate", 10),
        SetClientQuota(default_user, "producer_byte_rate", 2048),
        SetClientQuota(default_client, "controller_mutation_rate", 1.5),
        SetClientQuota(alice_app, "consumer_byte_rate", 4096),
        SetClientQuota(alice_default_client, "consumer_byte_rate", 512),
        SetClientQuota(bob_app, "request_percentage", 50),
    ])
    quotas = {
        alice: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        odd: {"consumer_byte_rate": 10.0},
        default_user: {"producer_byte_rate": 2048.0},
        default_client: {"controller_mutation_rate": 1.5},
        alice_app: {"consumer_byte_rate": 4096.0},
        alice_default_client: {"consumer_byte_rate": 512.0},
        bob_app: {"request_percentage": 50.0},
    }
    holds(quotas, {"alice": {"SCRAM-SHA-256": sha256}})
    # a SCRAM change keeps the user's quotas, and a quota change keeps its credentials
    store.write(store.image.epoch, [SetScramCredential("alice", "SCRAM-SHA-512", sha512)])
    store.write(store.image.epoch, [SetClientQuota(alice, "request_percentage", None)])
    del quotas[alice]["request_percentage"]
    holds(quotas, {"alice": {"SCRAM-SHA-256": sha256, "SCRAM-SHA-512": sha512}})
    # deleting every quota of a user keeps its credentials (and its per-client quotas)
    store.write(store.image.epoch, [SetClientQuota(alice, "producer_byte_rate", None),
                                    SetScramCredential("alice", "SCRAM-SHA-256", None)])
    del quotas[alice]
    holds(quotas, {"alice": {"SCRAM-SHA-512": sha512}})
    # deleting its credentials keeps the per-client quotas beneath it
    store.write(store.image.epoch, [SetScramCredential("alice", "SCRAM-SHA-512", None)])
    holds(quotas, {})
    # entities with nothing left go, a user's client entities included
    store.write(store.image.epoch, [
        SetClientQuota(alice_app, "consumer_byte_rate", None),
        SetClientQuota(alice_default_client, "consumer_byte_rate", None),
        SetClientQuota(bob_app, "request_percentage", None),
        SetClientQuota(odd, "consumer_byte_rate", None),
        SetClientQuota(default_client, "controller_mutation_rate", None),
    ])
    holds({default_user: {"producer_byte_rate": 2048.0}}, {})
    # and they can come back
    store.write(store.image.epoch, [SetClientQuota(alice_app, "consumer_byte_rate", 1),
                                    SetScramCredential("alice", "SCRAM-SHA-256", sha256)])
    holds({default_user: {"producer_byte_rate": 2048.0}, alice_app: {"consumer_byte_rate": 1.0}},
          {"alice": {"SCRAM-SHA-256": sha256}})


def test_stale_write_changes_nothing(open_store: Factory) -> None:
    store = open_store()
    seen: list[int] = []
    store.subscribe(lambda image: seen.append(image.epoch))
    old = store.image.epoch
    store.write(old, [PutTopic(topic("a"))])
    with pytest.raises(StaleMetadataError) as info:
        store.write(old, [PutTopic(topic("b"))])
    assert info.value.expected_epoch == old and info.value.current_epoch == old + 1
    assert set(store.image.topics) == {"a"} and seen == [old + 1]


@pytest.mark.parametrize("changes", [
    [PutTopic(topic("ok")), RemoveTopic("missing")],
    [PutTopic(topic("ok")), SetTopicConfigs("missing", {})],
    [PutTopic(TopicInfo("gap", uuid.uuid4(), (partition(0), partition(2)), {}))],
    [PutTopic(TopicInfo("none", uuid.uuid4(), (), {}))],
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 1, 0, (0,), (0,)),), {}))],
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0, 0), (0,)),), {}))],
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0, 1)),), {}))],
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 0, -1, (0,), (0,)),), {}))],
    # adding / removing replicas: subsets of the replicas, disjoint
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0,), (1,)),), {}))],
    [PutTopic(TopicInfo("x", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0, 1), (0,), (1,), (1,)),),
                        {}))],
])
def test_invalid_changes_are_all_or_nothing(open_store: Factory, changes: list) -> None:
    store = open_store()
    before = store.image
    with pytest.raises(InvalidMetadataChangeError):
        store.write(before.epoch, changes)
    assert store.image is before


def test_partition_rules_across_writes(open_store: Factory) -> None:
    store = open_store()
    a = topic("a", 2)
    store.write(store.image.epoch, [PutTopic(a), SetPartitions("a", (partition(0, epoch=2),))])
    before = store.image
    for bad in (
        PutTopic(topic("a")),  # another topic of the same name
        PutTopic(TopicInfo("a", a.topic_id, (partition(0, epoch=2),), {})),  # shrinks
        SetPartitions("a", (partition(0, epoch=1),)),  # leader epoch goes down
        SetPartitions("a", (partition(3),)),  # leaves a gap
        SetPartitions("b", (partition(0),)),  # no such topic
    ):
        with pytest.raises(InvalidMetadataChangeError):
            store.write(before.epoch, [bad])
        assert store.image is before


def test_empty_write_is_a_conditional_no_op(open_store: Factory) -> None:
    store = open_store()
    seen: list[MetadataImage] = []
    store.subscribe(seen.append)
    before = store.image
    assert store.write(before.epoch, []) is before
    with pytest.raises(StaleMetadataError):
        store.write(before.epoch + 1, [])
    assert seen == []


def test_listeners_get_each_new_image_in_order(open_store: Factory) -> None:
    store = open_store()
    first: list[int] = []
    second: list[int] = []
    unsubscribe = store.subscribe(lambda image: first.append(image.epoch))
    store.subscribe(lambda image: second.append(image.epoch))
    start = store.image.epoch
    store.write(start, [PutTopic(topic("a"))])
    store.register_broker(BrokerInfo(0, "localhost", 9093))
    assert store.image.brokers[0].port == 9093
    unsubscribe()
    unsubscribe()  # idempotent
    store.write(store.image.epoch, [RemoveTopic("a")])
    assert first == [start + 1, start + 2]
    assert second == [start + 1, start + 2, start + 3]


def test_a_listener_may_write_and_order_holds(open_store: Factory) -> None:
    store = open_store()
    seen_by_later: list[set[str]] = []

    def create_b_after_a(image: MetadataImage) -> None:
        if "a" in image.topics and "b" not in image.topics:
            store.write(image.epoch, [PutTopic(topic("b"))])

    store.subscribe(create_b_after_a)
    store.subscribe(lambda image: seen_by_later.append(set(image.topics)))
    store.write(store.image.epoch, [PutTopic(topic("a"))])
    assert seen_by_later == [{"a"}, {"a", "b"}]


def test_a_failing_listener_does_not_stop_the_others(open_store: Factory) -> None:
    store = open_store()
    seen: list[int] = []

    def broken(image: MetadataImage) -> None:
        raise RuntimeError("listener bug")

    store.subscribe(broken)
    store.subscribe(lambda image: seen.append(image.epoch))
    image = store.write(store.image.epoch, [PutTopic(topic("a"))])
    assert seen == [image.epoch]


def test_unsubscribe_during_delivery_takes_effect_at_once(open_store: Factory) -> None:
    store = open_store()
    calls: list[str] = []
    unsubscribe_second: list[Callable[[], None]] = []

    def first(image: MetadataImage) -> None:
        calls.append("first")
        unsubscribe_second[0]()

    store.subscribe(first)
    unsubscribe_second.append(store.subscribe(lambda image: calls.append("second")))
    store.write(store.image.epoch, [PutTopic(topic("a"))])
    assert calls == ["first"]


def test_producer_id_blocks_never_overlap(open_store: Factory) -> None:
    store = open_store()
    epoch = store.image.epoch
    blocks = [store.allocate_producer_id_block(size) for size in (1000, 1, 5)]
    assert blocks == [ProducerIdBlock(0, 1000), ProducerIdBlock(1000, 1), ProducerIdBlock(1001, 5)]
    assert blocks[0].last == 999
    assert store.image.epoch == epoch  # not part of the image
    with pytest.raises(ValueError):
        store.allocate_producer_id_block(0)


@pytest.mark.parametrize("open_store", ["local"], indirect=True)
def test_restart_keeps_everything_but_unused_producer_ids(open_store: Factory) -> None:
    store = open_store()
    a = topic("a", 2)
    store.write(store.image.epoch, [
        PutTopic(a),
        SetPartitions("a", (PartitionInfo(1, 0, 4, (0, 2, 1), (0,), (2,), (1,)),)),
    ])
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1"})])
    store.allocate_producer_id_block(1000)
    reopened = open_store()
    assert reopened.image.epoch == store.image.epoch
    assert reopened.cluster_id == store.cluster_id
    assert reopened.image.topics == store.image.topics
    assert reopened.image.topics["a"].partitions[1].adding_replicas == (2,)
    assert reopened.image.broker_configs == store.image.broker_configs
    assert reopened.allocate_producer_id_block(10) == ProducerIdBlock(1000, 10)
    assert open_store().allocate_producer_id_block(1) == ProducerIdBlock(1010, 1)
