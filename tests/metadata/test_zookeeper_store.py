"""ZooKeeperMetadataStore against real ZooKeeper servers: what only a shared store has —
other writers, watches, races, sessions that expire, servers that go away. (The store
contract itself runs in test_store_contract.py.)"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from strom.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.metadata import zk_layout as zk
from strom.metadata import zookeeper as zk_store
from strom.metadata.changes import (
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
    Endpoint,
    MetadataImage,
    PartitionInfo,
    ScramCredential,
    TopicInfo,
)
from strom.metadata.store import StaleMetadataError
from strom.metadata.zk_layout import kafka_uuid
from strom.metadata.zk_session import ZooKeeperUnavailableError
from strom.metadata.zookeeper import BrokerIdAlreadyRegisteredError, ZooKeeperMetadataStore
from strom.testing.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperServer,
    expire_session,
    free_port,
)
from tests.metadata.zk_helpers import wait_until

Opener = Callable[..., ZooKeeperMetadataStore]


@pytest.fixture
def open_store(zookeeper_connect: str) -> Iterator[Opener]:
    """Opens stores ("brokers") on this test's chroot; all closed at the end."""
    stores: list[ZooKeeperMetadataStore] = []

    def open_(**kwargs: object) -> ZooKeeperMetadataStore:
        kwargs.setdefault("timeout", 5.0)
        kwargs.setdefault("session_timeout", 1.0)
        store = ZooKeeperMetadataStore(zookeeper_connect, **kwargs)  # type: ignore[arg-type]
        stores.append(store)
        return store

    yield open_
    for store in stores:
        store.close()


def topic(name: str, partitions: int = 1, replicas: tuple[int, ...] = (0,)) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), tuple(
        PartitionInfo(p, replicas[0], 0, replicas, replicas) for p in range(partitions)), {})


def session_id(store: ZooKeeperMetadataStore) -> int | None:
    """The store's current session id (None while it has none)."""
    client_id = store.session.client.client_id
    return client_id[0] if client_id else None


def raw(store: ZooKeeperMetadataStore, path: str) -> dict:
    return json.loads(store.session.get(path)[0])


def test_two_brokers_see_each_others_writes_through_watches(open_store: Opener) -> None:
    a, b = open_store(), open_store()
    assert a.cluster_id == b.cluster_id
    seen_by_b: list[MetadataImage] = []
    b.subscribe(seen_by_b.append)
    a.register_broker(BrokerInfo(1, "10.0.0.1", 9092, rack="r1"))
    b.register_broker(BrokerInfo(2, "10.0.0.2", 9092, rack="r2", endpoints=(
        Endpoint("CLIENT", "public.example", 19092, "SASL_SSL"),
        Endpoint("REPLICATION", "10.0.0.2", 9092))))
    wait_until(lambda: set(a.image.brokers) == {1, 2}, what="a sees broker 2")
    assert a.image.brokers[2] == b.image.brokers[2]
    assert a.image.brokers[2].address("CLIENT") == ("public.example", 19092)

    credential = ScramCredential(b"salt", b"stored", b"server", 4096)
    pattern = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    acl = frozenset({AccessControlEntry("User:bob", "*", AclOperation.READ,
                                        AclPermissionType.ALLOW)})
    t = topic("orders", 2, (1, 2))
    a.write(a.image.epoch, [PutTopic(t), SetBrokerConfigs("", {"log.retention.ms": "5"}),
                            SetScramCredential("alice", "SCRAM-SHA-256", credential),
                            SetClientQuota((("user", "alice"),), "producer_byte_rate", 100),
                            SetAcls(pattern, acl)])
    wait_until(lambda: "orders" in b.image.topics, what="b sees the topic")
    assert b.image.topics == a.image.topics
    assert b.image.broker_configs == {"": {"log.retention.ms": "5"}}
    assert b.image.scram_credentials == {"alice": {"SCRAM-SHA-256": credential}}
    assert b.image.acls == a.image.acls == {pattern: acl}
    assert b.image.client_quotas == {(("user", "alice"),): {"producer_byte_rate": 100.0}}
    assert seen_by_b[-1] is b.image  # delivered to b's listeners

    # and back: b changes partition state and configs, removes a credential; a follows
    moved = PartitionInfo(1, 2, 3, (1, 2), (2,))
    b.write(b.image.epoch, [SetPartitions("orders", (moved,)),
                            SetTopicConfigs("orders", {"cleanup.policy": "compact"}),
                            SetScramCredential("alice", "SCRAM-SHA-256", None)])
    wait_until(lambda: a.image.topics["orders"].partitions[1] == moved, what="a sees the move")
    assert a.image.topics == b.image.topics and a.image.scram_credentials == {}
    assert a.image.client_quotas == {(("user", "alice"),): {"producer_byte_rate": 100.0}}
    b.write(b.image.epoch, [RemoveTopic("orders")])
    wait_until(lambda: "orders" not in a.image.topics, what="a sees the removal")


def test_znodes_are_kafkas(open_store: Opener) -> None:
    store = open_store()
    store.register_broker(BrokerInfo(3, "h3", 9093, rack="rack-a"))
    t = topic("events", 2, (3,))
    store.write(store.image.epoch, [PutTopic(TopicInfo(
        t.name, t.topic_id, t.partitions, {"retention.ms": "60000"})),
        SetBrokerConfigs("3", {"message.max.bytes": "2048"})])
    assert raw(store, "/brokers/topics/events") == {
        "version": 3, "topic_id": kafka_uuid(t.topic_id), "partitions": {"0": [3], "1": [3]},
        "adding_replicas": {}, "removing_replicas": {}}
    assert raw(store, "/brokers/topics/events/partitions/1/state") == {
        "version": 1, "leader": 3, "leader_epoch": 0, "isr": [3], "controller_epoch": 0}
    # a reassignment in progress: only the partitions being reassigned are listed
    store.write(store.image.epoch, [SetPartitions("events", (
        PartitionInfo(1, 3, 1, (4, 3), (3,), adding_replicas=(4,), removing_replicas=(3,)),))])
    assert raw(store, "/brokers/topics/events") == {
        "version": 3, "topic_id": kafka_uuid(t.topic_id), "partitions": {"0": [3], "1": [4, 3]},
        "adding_replicas": {"1": [4]}, "removing_replicas": {"1": [3]}}
    assert open_store().image.topics["events"].partitions[1].removing_replicas == (3,)
    assert raw(store, "/config/topics/events") == {"version": 1,
                                                   "config": {"retention.ms": "60000"}}
    assert raw(store, "/config/brokers/3") == {"version": 1,
                                               "config": {"message.max.bytes": "2048"}}
    broker = raw(store, "/brokers/ids/3")
    assert {k: broker[k] for k in ("version", "host", "port", "rack", "endpoints",
                                   "listener_security_protocol_map")} == {
        "version": 5, "host": "h3", "port": 9093, "rack": "rack-a",
        "endpoints": ["PLAINTEXT://h3:9093"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}}
    assert store.session.get("/brokers/ids/3")[1].ephemeralOwner == session_id(store)
    write_pattern = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "app/", PatternType.PREFIXED)
    store.write(store.image.epoch, [SetAcls(write_pattern, frozenset({AccessControlEntry(
        "User:app", "*", AclOperation.WRITE, AclPermissionType.ALLOW)})),
        SetAcls(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                frozenset({AccessControlEntry("User:app", "*", AclOperation.IDEMPOTENT_WRITE,
                                              AclPermissionType.DENY)}))])
    assert raw(store, "/kafka-acl-extended/prefixed/TransactionalId/app%2F") == {
        "version": 1, "acls": [{"principal": "User:app", "permissionType": "Allow",
                                "operation": "Write", "host": "*"}]}
    assert raw(store, "/kafka-acl/Cluster/kafka-cluster")["acls"] == [
        {"principal": "User:app", "permissionType": "Deny", "operation": "IdempotentWrite",
         "host": "*"}]
    credential = ScramCredential(b"salt", b"stored", b"server", 4096)
    store.write(store.image.epoch, [
        SetScramCredential("a b*~é", "SCRAM-SHA-256", credential),
        SetClientQuota((("user", "a b*~é"),), "producer_byte_rate", 1024),
        SetClientQuota((("user", "a b*~é"),), "request_percentage", 50),
        SetClientQuota((("client-id", "app/1"), ("user", None)), "consumer_byte_rate", 2048),
        SetClientQuota((("client-id", None),), "controller_mutation_rate", 1.5)])
    assert raw(store, "/config/users/a%20b%2A%7E%C3%A9") == {"version": 1, "config": {
        "SCRAM-SHA-256": "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,"
                         "iterations=4096",
        "producer_byte_rate": "1024", "request_percentage": "50.0"}}
    assert raw(store, "/config/users/<default>") == {"version": 1, "config": {}}
    assert raw(store, "/config/users/<default>/clients/app%2F1") == {
        "version": 1, "config": {"consumer_byte_rate": "2048"}}
    assert raw(store, "/config/clients/<default>") == {
        "version": 1, "config": {"controller_mutation_rate": "1.5"}}
    store.write(store.image.epoch, [
        SetClientQuota((("ip", "10.0.0.1"),), "connection_creation_rate", 10),
        SetClientQuota((("ip", None),), "connection_creation_rate", 50)])
    assert raw(store, "/config/ips/10.0.0.1") == {  # Kafka's layout
        "version": 1, "config": {"connection_creation_rate": "10"}}
    assert raw(store, "/config/ips/<default>") == {
        "version": 1, "config": {"connection_creation_rate": "50"}}
    store.allocate_producer_id_block(1000)
    assert raw(store, "/latest_producer_id_block") == {
        "version": 1, "broker": 3, "block_start": "0", "block_end": "999"}
    assert raw(store, "/cluster/id")["id"] == store.cluster_id


def test_quotas_written_by_kafka_are_read(open_store: Opener) -> None:
    """Kafka creates the parents of /config/users/<u>/clients/<c> without data, and keeps
    emptied config znodes; other keys beside quotas and credentials are left alone."""
    writer = open_store()
    for path, data in (
            ("/config/users/bob", b""),
            ("/config/users/bob/clients", b""),
            ("/config/users/bob/clients/my%20app", b'{"version":1,"config":'
                                                   b'{"producer_byte_rate":"10"}}'),
            ("/config/users/carol", b'{"version":1,"config":{}}'),
            ("/config/clients/%3Cdefault%3E", b'{"version":1,"config":'
                                              b'{"request_percentage":"1.0E2","x":"y"}}'),
            ("/config/ips/::1", b'{"version":1,"config":{"connection_creation_rate":"7"}}'),
            ("/config/ips/<default>", b'{"version":1,"config":'
                                      b'{"connection_creation_rate":"50"}}')):
        writer.session.client.create(path, data, makepath=True)
    image = open_store().image
    assert image.client_quotas == {
        (("client-id", "my app"), ("user", "bob")): {"producer_byte_rate": 10.0},
        (("client-id", "<default>"),): {"request_percentage": 100.0},
        (("ip", "::1"),): {"connection_creation_rate": 7.0},
        (("ip", None),): {"connection_creation_rate": 50.0}}
    assert image.scram_credentials == {}


def test_a_writer_behind_the_latest_write_is_refused_by_zookeeper(open_store: Opener) -> None:
    """b has not yet heard of a's write (its worker is held), so its own epoch check passes;
    the version check in ZooKeeper refuses it, and b re-reads the image."""
    a, b = open_store(), open_store()
    stale = b.image.epoch
    hold = threading.Event()
    b.session.submit(hold.wait)  # b's watch-driven refresh cannot run
    try:
        a.write(a.image.epoch, [PutTopic(topic("first"))])
        time.sleep(0.2)
        assert b.image.epoch == stale and "first" not in b.image.topics
        with pytest.raises(StaleMetadataError) as info:
            b.write(stale, [PutTopic(topic("second"))])
        assert info.value.current_epoch == b.image.epoch > stale
        assert set(b.image.topics) == {"first"}
    finally:
        hold.set()
    b.write(b.image.epoch, [PutTopic(topic("second"))])
    wait_until(lambda: set(a.image.topics) == {"first", "second"})


def test_racing_read_modify_writes_lose_no_update(open_store: Opener) -> None:
    """Three brokers each add 15 to a counter kept in a topic config, re-reading on
    StaleMetadataError: the counter ends at exactly 45."""
    first = open_store()
    first.write(first.image.epoch, [PutTopic(topic("counter"))])
    stores = [first, open_store(), open_store()]
    wait_until(lambda: all("counter" in s.image.topics for s in stores))
    stale_seen = [0]

    def add(store: ZooKeeperMetadataStore) -> None:
        for _ in range(15):
            while True:
                image = store.image
                n = int(image.topics["counter"].configs.get("n", "0"))
                try:
                    store.write(image.epoch, [SetTopicConfigs("counter", {"n": str(n + 1)})])
                    break
                except StaleMetadataError:
                    stale_seen[0] += 1

    threads = [threading.Thread(target=add, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    wait_until(lambda: all(s.image.topics["counter"].configs == {"n": "45"} for s in stores),
               what="every broker sees n=45")
    assert stale_seen[0] > 0  # they did race


def test_producer_id_blocks_are_disjoint_across_brokers(open_store: Opener) -> None:
    stores = [open_store() for _ in range(3)]
    blocks: list[tuple[int, int]] = []
    lock = threading.Lock()

    def allocate(store: ZooKeeperMetadataStore) -> None:
        for _ in range(20):
            block = store.allocate_producer_id_block(10)
            with lock:
                blocks.append((block.first, block.last))

    threads = [threading.Thread(target=allocate, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(blocks) == [(i, i + 9) for i in range(0, 600, 10)]


def test_an_id_that_is_live_cannot_register_twice(open_store: Opener) -> None:
    a, b = open_store(), open_store()
    a.register_broker(BrokerInfo(1, "a", 9092))
    with pytest.raises(BrokerIdAlreadyRegisteredError, match="broker id 1 is already registered"):
        b.register_broker(BrokerInfo(1, "b", 9092))
    a.register_broker(BrokerInfo(1, "a", 9093))  # the owner may update its registration
    wait_until(lambda: (got := b.image.brokers.get(1)) is not None
               and (got.host, got.port) == ("a", 9093))
    a.close()
    wait_until(lambda: 1 not in b.image.brokers, what="the registration goes with a's session")
    b.register_broker(BrokerInfo(1, "b", 9092))
    assert b.image.brokers[1].host == "b"


def test_registration_is_recreated_after_a_session_expiry(
        open_store: Opener, zookeeper_server: ZooKeeperServer) -> None:
    broker, observer = open_store(), open_store()
    broker.register_broker(BrokerInfo(4, "h", 9092))
    wait_until(lambda: 4 in observer.image.brokers)
    # the broker epoch is the registration znode's czxid (Kafka's ZooKeeper mode)
    first_epoch = observer.image.brokers[4].epoch
    assert first_epoch == observer.session.get("/brokers/ids/4")[1].czxid > 0
    brokers_seen: list[set[int]] = []
    observer.subscribe(lambda image: brokers_seen.append(set(image.brokers)))
    old_session = session_id(broker)
    expire_session(broker.session.client, zookeeper_server.connect)

    def registered_by_a_new_session() -> bool:
        now = session_id(broker)
        got = observer.session.get_or_none("/brokers/ids/4")
        return got is not None and now not in (None, old_session) \
            and got[1].ephemeralOwner == now
    wait_until(registered_by_a_new_session, what="a new session and registration")
    wait_until(lambda: bool(brokers_seen) and 4 in brokers_seen[-1])
    # registered again: a new, greater broker epoch
    wait_until(lambda: observer.image.brokers[4].epoch > first_epoch, what="a new epoch")
    # the broker's own image too: its watch may deliver the registration after the
    # observer's, and a write against the image before it is (rightly) stale
    wait_until(lambda: 4 in broker.image.brokers
               and broker.image.brokers[4].epoch > first_epoch, what="the broker's own image")
    broker.write(broker.image.epoch, [PutTopic(topic("after-expiry"))])  # still usable
    wait_until(lambda: "after-expiry" in observer.image.topics)


def test_a_zookeeper_restart_keeps_the_store_usable() -> None:
    with ZooKeeperServer() as server:
        store = ZooKeeperMetadataStore(server.connect + "/restart", timeout=10.0,
                                       session_timeout=6.0)
        try:
            store.register_broker(BrokerInfo(1, "h", 9092))
            store.write(store.image.epoch, [PutTopic(topic("before"))])
            server.stop()
            server.start()
            # the session survives a quick restart, or (on a slow machine) a new one
            # replaces it: either way the store writes again, and is registered
            wait_until(lambda: write_or_none(store, topic("after")), timeout=20,
                       what="a write after the restart")
            assert set(store.image.topics) == {"before", "after"}
            wait_until(lambda: store.session.exists("/brokers/ids/1") is not None)
        finally:
            store.close()


def write_or_none(store: ZooKeeperMetadataStore, t: TopicInfo) -> MetadataImage | None:
    try:
        return store.write(store.image.epoch, [PutTopic(t)])
    except (ZooKeeperUnavailableError, StaleMetadataError):
        return None


@pytest.mark.parametrize("outage", ["killed", "paused"])
def test_calls_fail_with_a_clear_error_within_the_timeout_when_zookeeper_is_gone(
        outage: str) -> None:
    with ZooKeeperServer() as server:
        store = ZooKeeperMetadataStore(server.connect + "/gone", timeout=10.0,
                                       session_timeout=4.0)
        store.session.timeout = 1.0  # connecting may take longer on a busy machine
        try:
            if outage == "killed":
                server.stop()
            else:
                server.pause()  # the quorum is there but answers nothing
            calls: list[Callable[[], object]] = [
                lambda: store.write(store.image.epoch, [PutTopic(topic("t"))]),
                lambda: store.allocate_producer_id_block(10),
                lambda: store.register_broker(BrokerInfo(1, "h", 9092)),
            ]
            for call in calls:
                started = time.monotonic()
                with pytest.raises(ZooKeeperUnavailableError, match=r"ZooKeeper at 127\.0\.0\.1"):
                    call()
                assert time.monotonic() - started < 3.0
        finally:
            server.resume() if outage == "paused" else None
            store.close()


def test_closing_while_a_background_job_waits_on_a_gone_zookeeper_returns_at_once() -> None:
    """A broker's clean stop closes its store: with ZooKeeper gone, a refresh waiting on it
    can only run out the timeout, and close() does not wait for that."""
    with ZooKeeperServer() as server:
        store = ZooKeeperMetadataStore(server.connect + "/closing", timeout=10.0,
                                       session_timeout=4.0)
        try:
            server.stop()
            wait_until(lambda: not store.session.connected, what="the connection drop")
            waiting = threading.Event()

            def read() -> None:
                waiting.set()
                store.session.get("/")

            store.session.submit(read)
            assert waiting.wait(5)
        finally:
            started = time.monotonic()
            store.close()
        assert time.monotonic() - started < 3.0


def test_connecting_to_no_zookeeper_fails_within_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailableError, match="could not connect"):
        ZooKeeperMetadataStore(f"127.0.0.1:{free_port()}", timeout=1.0)
    assert time.monotonic() - started < 3.0


def test_an_ensemble_that_loses_its_quorum_fails_calls_in_time_and_recovers() -> None:
    """Three servers; with two of them down the third serves nothing: calls fail within the
    timeout (kazoo's synchronous calls would wait forever); with one back they work again."""
    with ZooKeeperEnsemble(3) as ensemble:
        store = ZooKeeperMetadataStore(ensemble.connect + "/quorum", timeout=10.0,
                                       session_timeout=6.0)
        try:
            store.write(store.image.epoch, [PutTopic(topic("before"))])
            first, second, _ = ensemble.servers
            first.stop()
            second.stop()
            store.session.timeout = 1.0
            started = time.monotonic()
            with pytest.raises(ZooKeeperUnavailableError):
                store.write(store.image.epoch, [PutTopic(topic("during"))])
            assert time.monotonic() - started < 3.0
            first.start()
            after = topic("after")  # the same topic on every try: a retry may find it there
            written: list[MetadataImage] = []

            def write_after() -> bool:
                image = write_or_none(store, after)
                written.extend([image] if image else [])
                return image is not None
            wait_until(write_after, timeout=30, what="a write once the quorum is back")
            # "during" failed with an unknown outcome: a proposal the old leader logged may
            # still commit after the election. Either way the image is what ZooKeeper holds.
            assert {"before", "after"} <= set(written[0].topics)
            assert set(store.session.children("/brokers/topics")) == set(written[0].topics)
        finally:
            store.close()


def test_with_install_reads_are_handed_over_and_a_late_read_never_moves_the_image_back(
        open_store: Opener) -> None:
    """A broker's store (``install=loop.call_soon_threadsafe``) reads ZooKeeper on its
    worker thread and hands each image to ``install``; installing a read that began before
    the one already installed changes nothing."""
    handed: queue.Queue[Callable[[], None]] = queue.Queue()
    store = open_store(install=handed.put)
    writer = open_store()
    time.sleep(0.5)  # the first connection's refresh, if any
    while not handed.empty():
        handed.get()()
    writer.write(writer.image.epoch, [PutTopic(topic("first"))])
    early = handed.get(timeout=10)
    assert "first" not in store.image.topics  # read, not installed: the owner installs
    writer.write(writer.image.epoch, [PutTopic(topic("second"))])
    late = handed.get(timeout=10)
    late()
    image = store.image
    assert {"first", "second"} <= set(image.topics)
    early()  # began before the installed read: nothing moves back
    assert store.image is image


# -- change hints: a write costs the readers what it changed, not the whole metadata ---------

def test_other_brokers_read_only_the_topics_a_write_changed(
        open_store: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = open_store(), open_store()
    a.write(a.image.epoch, [PutTopic(topic(f"t{i}", 2)) for i in range(20)])
    wait_until(lambda: len(b.image.topics) == 20, what="b sees the 20 topics")
    kept = b.image.topics["t5"]
    read: list[list[str]] = []
    original = zk_store._read_topics

    def spy(session: object, names: list[str]) -> object:
        read.append(list(names))
        return original(session, names)  # type: ignore[arg-type]

    monkeypatch.setattr(zk_store, "_read_topics", spy)
    a.write(a.image.epoch, [PutTopic(topic("new", 3)), RemoveTopic("t1")])
    wait_until(lambda: "new" in b.image.topics and "t1" not in b.image.topics,
               what="b sees the change")
    a.write(a.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "7"})])
    wait_until(lambda: b.image.broker_configs == {"": {"log.retention.ms": "7"}},
               what="b sees the broker config")
    monkeypatch.undo()
    assert read and all(names == [] for names in read)  # the deltas had them
    assert b.image.topics["t5"] is kept  # unchanged topics keep their objects
    assert b.image.topics == a.image.topics


def test_readers_take_what_the_deltas_hold_and_read_the_rest(
        open_store: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader several writes behind applies each write's delta in order and reads from the
    znodes only the topics of writes without one (too large here); it ends with the writer's
    image either way."""
    a, b = open_store(), open_store()
    a.write(a.image.epoch, [PutTopic(topic(f"t{i}", 2)) for i in range(5)])
    wait_until(lambda: len(b.image.topics) == 5, what="b sees the 5 topics")
    base = a._data
    monkeypatch.setattr(zk, "DELTA_PARTITIONS", 10)
    a.write(a.image.epoch, [PutTopic(topic("big", 11)), RemoveTopic("t1")])  # no delta
    monkeypatch.setattr(zk, "DELTA_PARTITIONS", 2_000)
    a.write(a.image.epoch, [PutTopic(topic("t1", 3)), PutTopic(topic("small"))])
    a.write(a.image.epoch, [SetTopicConfigs("big", {"cleanup.policy": "compact"}),
                            RemoveTopic("t3")])
    assert a.session.get_or_none(zk.delta_path(base.version + 1)) is None
    assert a.session.get_or_none(zk.delta_path(base.version + 3)) is not None
    read: list[list[str]] = []
    original = zk_store._read_topics

    here = threading.get_ident()

    def spy(session: object, names: list[str]) -> object:
        if threading.get_ident() == here:  # not b's own refreshes
            read.append(list(names))
        return original(session, names)  # type: ignore[arg-type]

    monkeypatch.setattr(zk_store, "_read_topics", spy)
    data = b._read_data(base)
    assert data is not None and data.version == base.version + 3
    assert data.topics == a.image.topics
    assert data.topics["t0"] is base.topics["t0"]
    assert read == [["big", "t1"]]  # the write without a delta's topics, read at the end


def test_a_delta_is_the_topics_as_their_znodes_read() -> None:
    moving = PartitionInfo(1, 2, 4, (2, 3, 4), (2, 3), adding_replicas=(4,),
                           removing_replicas=(2,))
    topics: dict[str, TopicInfo | None] = {
        "a": TopicInfo("a", uuid.uuid4(), (PartitionInfo(0, 3, 7, (3, 2), (3,)), moving),
                       {"cleanup.policy": "compact", "retention.ms": "5"}),
        "__consumer_offsets": TopicInfo("__consumer_offsets", uuid.uuid4(),
                                        (PartitionInfo(0, -1, 0, (1,), ()),), {}, True),
        "gone": None}
    data = zk.encode_delta(12, topics, controller_epoch=3)
    assert data is not None
    assert zk.decode_delta(data, 12) == topics
    assert zk.decode_delta(data, 13) is None  # not this version's
    assert zk.decode_delta(b"{garbled", 12) is None
    assert zk.decode_delta(b'{"data_version":12,"topics":{"a":{}}}', 12) is None
    many = {f"t{i}": topic(f"t{i}", 1) for i in range(zk.DELTA_PARTITIONS + 1)}
    assert zk.encode_delta(1, many, 0) is None  # over the partition bound
    long = {"t": TopicInfo("t", uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0,)),),
                           {"x": "y" * zk.DELTA_BYTES})}
    assert zk.encode_delta(1, long, 0) is None  # over the size bound


def test_old_deltas_are_deleted_and_a_stale_one_does_not_stop_writes(
        open_store: Opener) -> None:
    a = open_store()
    for i in range(2 * zk.DELTA_KEEP + 1):
        a.write(a.image.epoch, [PutTopic(topic(f"t{i}"))])
    version = a._data.version

    def kept() -> list[int]:
        return sorted(int(n) for n in a.session.children(zk.METADATA_DELTAS))
    wait_until(lambda: kept()[0] >= version - 2 * zk.DELTA_KEEP,
               what="the oldest deltas deleted")
    assert len(kept()) <= 2 * zk.DELTA_KEEP and kept()[-1] == version
    # a delta already at the next version's path (a tree whose epoch znode was made anew)
    a.session.wait(a.session.client.create_async(zk.delta_path(version + 1), b"{}"), "plant")
    a.write(a.image.epoch, [PutTopic(topic("after"))])
    got = a.session.get_or_none(zk.delta_path(version + 1))
    assert got is not None and zk.decode_delta(got[0], version + 1) == {
        "after": a.image.topics["after"]}


def test_a_write_without_hints_makes_readers_read_everything(open_store: Opener) -> None:
    """A write by an older strom leaves the epoch znode empty: the next readers cannot know
    what changed and read all of it."""
    a, b = open_store(), open_store()
    a.write(a.image.epoch, [PutTopic(topic("x"))])
    wait_until(lambda: "x" in b.image.topics)
    observer = a.session
    data, stat = observer.get("/strom/metadata_epoch")
    assert json.loads(data)["changes"][-1] == [stat.version, False, ["x"]]
    tx = observer.transaction()  # as an older strom writes: topic znodes, then the epoch
    added = topic("legacy")
    tx.create(zk.topic_path("legacy"), zk.encode_topic(added.topic_id, added.partitions, False))
    tx.create(zk.partitions_path("legacy"))
    tx.create(zk.partition_path("legacy", 0))
    tx.create(zk.state_path("legacy", 0), zk.encode_state(added.partitions[0], 0))
    tx.create(zk.topic_config_path("legacy"), zk.encode_config({}))
    tx.set_data("/strom/metadata_epoch", b"", version=stat.version)
    observer.commit(tx, "a write without hints")
    wait_until(lambda: "legacy" in b.image.topics and "legacy" in a.image.topics)
    a.write(a.image.epoch, [PutTopic(topic("after"))])  # hints again, from scratch
    wait_until(lambda: "after" in b.image.topics)
    assert json.loads(observer.get("/strom/metadata_epoch")[0])["changes"] == [
        [stat.version + 2, False, ["after"]]]


def test_change_hints_stay_small() -> None:
    hints: list[zk.ChangeHint] = []
    for version in range(1, 400):
        data, hints = zk.encode_change_hints(
            hints, version, False, [f"topic-{version}-{i:03d}" for i in range(50)])
        assert len(data) <= zk.CHANGE_HINT_BYTES
    assert [h[0] for h in hints] == list(range(hints[0][0], 400))  # contiguous, newest kept
    assert zk.changed_since(hints, 398, 399) == ({f"topic-399-{i:03d}" for i in range(50)},
                                                 False)
    assert zk.changed_since(hints, 1, 399) is None  # older than the hints reach
    data, hints = zk.encode_change_hints(hints, 400, True, ["t" * 200] * 1000)
    assert hints[-1] == (400, True, None) and zk.changed_since(hints, 399, 400) is None
    assert zk.decode_change_hints(b"") == [] and zk.decode_change_hints(b"{garbled") == []


# -- ZooKeeper's request bound: a topic write's batch fits, with its delta ---------------------

class _Ops:
    """A multi-op that only collects its operations (kazoo's own request classes, with its
    default ACL), under a 40-character chroot."""

    def __init__(self) -> None:
        from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData
        from kazoo.security import OPEN_ACL_UNSAFE
        root = "/" + "c" * 39
        self.operations: list[object] = []
        self.create = lambda path, data=b"": self.operations.append(
            Create(root + path, data, OPEN_ACL_UNSAFE, 0))
        self.set_data = lambda path, data, version=-1: self.operations.append(
            SetData(root + path, data, version))
        self.delete = lambda path, version=-1: self.operations.append(
            Delete(root + path, version))
        self.check = lambda path, version: self.operations.append(
            CheckVersion(root + path, version))


@pytest.mark.parametrize("name_length", [1, 20, 249])
@pytest.mark.parametrize("partitions", [1, 7, 100])
def test_the_topic_write_queues_estimate_is_over_the_request(name_length: int,
                                                              partitions: int) -> None:
    from kazoo.protocol.serialization import Transaction

    from strom.controller.topic_writes import write_bytes
    name = "t" * name_length
    new = topic(name, partitions, (1001, 1002, 1003))
    before = MetadataImage("c", 1, -1, {}, {})
    after = MetadataImage("c", 2, -1, {}, {name: new})
    ops = _Ops()
    zk_store._diff_ops(ops, before, after, 7)  # type: ignore[arg-type]
    sent = len(Transaction(ops.operations).serialize())
    assert sent <= zk_store._request_bytes(ops)  # type: ignore[arg-type]
    assert sent <= write_bytes(name, partitions, new=True)


def test_the_largest_topic_batch_fits_zookeepers_bound_with_its_delta(
        open_store: Opener) -> None:
    from strom.controller.topic_writes import MAX_BATCH_BYTES, write_bytes
    a, b = open_store(), open_store()
    names = [f"{i:04d}" + "n" * 245 for i in range(MAX_BATCH_BYTES // write_bytes(
        "n" * 249, 1, new=True))]
    a.write(a.image.epoch, [PutTopic(topic(n, 1, (1, 2, 3))) for n in names])
    assert a.session.get_or_none(zk.delta_path(a._data.version)) is not None
    wait_until(lambda: b.image.topics == a.image.topics, what="b reads them")


def test_a_write_over_zookeepers_bound_is_refused_before_it_is_sent(open_store: Opener) -> None:
    a = open_store()
    session = a.session
    with pytest.raises(zk_store.MetadataWriteRefusedError, match="request bound"):
        a.write(a.image.epoch, [PutTopic(topic("huge", 4_000, (1, 2, 3)))])
    assert "huge" not in a.image.topics
    a.write(a.image.epoch, [PutTopic(topic("fine", 2_000, (1, 2, 3)))])  # same connection
    assert a.session is session and "fine" in a.image.topics
