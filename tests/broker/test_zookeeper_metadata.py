"""A broker with ``zookeeper.connect``: its metadata lives in a real ZooKeeper (Kafka's znodes),
it registers and elects itself controller, and real clients work as against the file store."""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.testing.cluster import EmbeddedCluster
from strom.testing.pytest_plugin import BrokerFactory
from strom.testing.zookeeper import ZooKeeperServer, free_port
from tests.broker.wire_tap import _frames
from tests.metadata.zk_helpers import wait_until

NODE = 5
#: What a clean stop takes besides the controlled shutdown (closing logs, the session).
SHUTDOWN_SLACK_S = 3.0


@pytest.fixture
def observer(zookeeper_connect: str) -> Iterator[ZooKeeperMetadataStore]:
    """Another reader of the broker's chroot (as a second broker would be)."""
    store = ZooKeeperMetadataStore(zookeeper_connect, timeout=5.0)
    yield store
    store.close()


def test_a_broker_keeps_its_metadata_in_zookeeper(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    config = {"zookeeper.connect": zookeeper_connect, "node.id": NODE,
              "zookeeper.session.timeout.ms": 2000}
    broker = strom_broker_factory(config)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("zk-orders", 3, 1)])["zk-orders"].result(15)
    cluster = admin.list_topics(timeout=10)
    assert cluster.controller_id == NODE and cluster.cluster_id == observer.cluster_id
    assert (cluster.brokers[NODE].host, cluster.brokers[NODE].port) == (broker.host, broker.port)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(30):
        producer.produce("zk-orders", f"v{i}".encode(), key=str(i).encode())
    assert producer.flush(15) == 0

    # the znodes, as Kafka writes them, seen by another session
    wait_until(lambda: "zk-orders" in observer.image.topics, what="the topic in ZooKeeper")
    topic = observer.image.topics["zk-orders"]
    assert [(p.leader, p.replicas, p.isr) for p in topic.partitions] == \
        [(NODE, (NODE,), (NODE,))] * 3
    assert observer.image.controller_id == NODE
    registration = json.loads(observer.session.get(f"/brokers/ids/{NODE}")[0])
    assert registration["endpoints"] == [f"PLAINTEXT://{broker.host}:{broker.port}"]

    # a second broker with the same id is refused while the first one lives
    with pytest.raises(RuntimeError, match=f"broker id {NODE} is already registered"):
        strom_broker_factory(config)

    # a clean stop ends the session: registration and controllership go at once
    assert broker.stop() == 0
    wait_until(lambda: NODE not in observer.image.brokers
               and observer.image.controller_id == -1, what="the broker's znodes gone")

    # and a restart comes back to the same metadata and data
    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["zk-orders"])
    values: set[bytes] = set()
    try:
        wait_until(lambda: values.update(
            m.value() for m in consumer.consume(30, 1.0) if m.error() is None
        ) or len(values) == 30, timeout=30, what="all records read back")
    finally:
        consumer.close()
    wait_until(lambda: NODE in observer.image.brokers and observer.image.controller_id == NODE)


def test_a_data_directory_of_another_cluster_is_refused(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """A data directory that served a file-store cluster names that cluster in its
    meta.properties; pointed at a ZooKeeper of another cluster, the broker refuses to start."""
    data = tmp_path / "data"
    strom_broker_factory(data_dir=data).stop()
    with pytest.raises(RuntimeError, match=r"belongs to cluster .* but the ZooKeeper at"):
        strom_broker_factory({"zookeeper.connect": zookeeper_connect}, data_dir=data)


def test_an_unreachable_zookeeper_refuses_the_start(strom_broker_factory: BrokerFactory) -> None:
    with pytest.raises(RuntimeError, match=r"could not connect to ZooKeeper at 127\.0\.0\.1:"):
        strom_broker_factory({"zookeeper.connect": f"127.0.0.1:{free_port()}",
                              "zookeeper.connection.timeout.ms": 1000})


def test_quotas_and_scram_credentials_of_a_user_survive_each_other_and_a_restart(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    """Both live in Kafka's /config/users/<user>: a credential change through
    confluent-kafka keeps the quota set with AlterClientQuotas, and both come back after a
    restart (they are read from the znodes, not kept in memory)."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from tests.broker.quotas.test_client_quotas import alter, as_dict, describe
    from tests.broker.raw import RawClient

    broker = strom_broker_factory({"zookeeper.connect": zookeeper_connect, "node.id": NODE})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def upsert(mechanism: ScramMechanism) -> None:
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(mechanism, 4096), b"secret")])
        futures["alice"].result(10)

    upsert(ScramMechanism.SCRAM_SHA_256)
    client = RawClient(broker.bootstrap)
    quotas = {(("user", "alice"),): {"producer_byte_rate": 1024.0},
              (("client-id", "app"), ("user", "alice")): {"request_percentage": 25.0},
              (("client-id", None),): {"consumer_byte_rate": 2048.0}}
    for entity, values in quotas.items():
        assert alter(client, dict(entity), values).error_code == 0
    upsert(ScramMechanism.SCRAM_SHA_512)
    assert as_dict(describe(client, [])) == quotas
    wait_until(lambda: observer.image.client_quotas == quotas, what="the quotas in ZooKeeper")
    config = json.loads(observer.session.get("/config/users/alice")[0])["config"]
    assert set(config) == {"SCRAM-SHA-256", "SCRAM-SHA-512", "producer_byte_rate"}

    assert broker.stop() == 0
    broker.start()
    client = RawClient(broker.bootstrap)
    assert as_dict(describe(client, [])) == quotas
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(10)
    assert {i.mechanism for i in described.scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}


def test_a_clean_stop_without_a_reachable_controller_waits_only_the_configured_bound(
        ) -> None:
    """Controlled shutdown (``broker.zookeeper_metadata.controlled_shutdown``) is bounded:
    with the controller paused (SIGSTOP: it accepts connections and never answers) a broker
    stops after max.retries attempts of controller.socket.timeout.ms each and the backoffs
    between them; with ZooKeeper gone it does not wait for the controller at all."""
    attempt_s, retries, backoff_s = 1.5, 2, 0.5
    configs = {"controlled.shutdown.max.retries": retries,
               "controlled.shutdown.retry.backoff.ms": int(backoff_s * 1000),
               "controller.socket.timeout.ms": int(attempt_s * 1000),
               # the paused controller keeps its session: nobody else takes over meanwhile
               "zookeeper.session.timeout.ms": 30000}
    bound_s = retries * attempt_s + (retries - 1) * backoff_s
    with EmbeddedCluster(brokers=3, configs=configs) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("led", 3, 2)])["led"].result(15)  # each leads one
        controller = cluster.controller_id()
        first, second = (cluster.brokers[i] for i in sorted(cluster.brokers) if i != controller)

        cluster.pause(controller)
        try:
            began = time.monotonic()
            assert first.stop() == 0
            took = time.monotonic() - began
        finally:
            cluster.resume(controller)
        assert retries * attempt_s <= took < bound_s + SHUTDOWN_SLACK_S
        output = "".join(first.output)
        assert f"attempt {retries} of {retries}: controller {controller} did not answer " \
               f"within {attempt_s:g}s" in output

        cluster.zookeeper.stop()  # ZooKeeper gone: no controller can move anything
        time.sleep(0.5)  # the brokers' ZooKeeper connections drop
        began = time.monotonic()
        assert second.stop() == 0
        took = time.monotonic() - began
        assert took < SHUTDOWN_SLACK_S
        assert "controlled shutdown of broker" in "".join(second.output)
        assert "skipped: no ZooKeeper session" in "".join(second.output)


class StallingZooKeeper:
    """A TCP forwarder in front of ZooKeeper that, once armed with :meth:`stall_after_watch`,
    passes the next watch notification (a reply with xid -1) to the broker and then holds
    the reply after it for ``seconds`` (and so every later one): the broker learns that the
    metadata changed and finds ZooKeeper unresponsive when it reads it, as when ZooKeeper
    pauses in the middle of a refresh. Requests still reach ZooKeeper."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._armed: float | None = None
        self.stalling = threading.Event()
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def stall_after_watch(self, seconds: float) -> None:
        self.stalling.clear()
        self._armed = seconds

    def close(self) -> None:
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, upstream]
            # requests: forwarded as they are (deque(…, 0) drains the generator)
            threading.Thread(target=collections.deque, args=(_frames(client, upstream), 0),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client), daemon=True).start()

    def _replies(self, source: socket.socket, sink: socket.socket) -> None:
        """ZooKeeper's replies, frame by frame (each seen before it is forwarded); the first
        one, the session's connect reply, has no xid."""
        first, hold = True, None
        for frame in _frames(source, sink):
            if hold is not None:
                self.stalling.set()
                time.sleep(hold)
                hold = None
            if not first and self._armed is not None and struct.unpack_from(">i", frame)[0] == -1:
                hold, self._armed = self._armed, None
            first = False


def test_a_zookeeper_that_stops_answering_mid_refresh_does_not_stall_produce_or_fetch(
        zookeeper_server: ZooKeeperServer, strom_broker_factory: BrokerFactory) -> None:
    """The broker reads ZooKeeper off its event loop: while a refresh waits 5 s for
    ZooKeeper's replies, produce and fetch are answered at once (before, the loop waited
    with the refresh); the image it read is installed once ZooKeeper answers."""
    from strom.controller.updates import update
    from strom.metadata.changes import PutTopic
    from strom.metadata.image import PartitionInfo, TopicInfo
    from strom.protocol.records.reader import decode_batches
    from strom.protocol.versions import ApiKey
    from tests.broker.raw import RawClient
    from tests.broker.test_data_path import fetch, produce
    from tests.storage.helpers import make_batch

    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    proxy = StallingZooKeeper(zookeeper_server.port)
    observer = ZooKeeperMetadataStore(zookeeper_server.connect + chroot, timeout=5.0)
    try:
        broker = strom_broker_factory({
            "zookeeper.connect": f"127.0.0.1:{proxy.port}{chroot}", "node.id": NODE,
            "zookeeper.session.timeout.ms": 30000, "zookeeper.connection.timeout.ms": 20000})
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("steady", 1, 1)])["steady"].result(15)
        client = RawClient(broker.bootstrap)
        # (as on Kafka, a new partition's log may still be being created when CreateTopics
        # is answered: NOT_LEADER_OR_FOLLOWER, retriable, meanwhile)
        wait_until(lambda: produce(client, "steady", bytes(make_batch([b"before"])))[0] == 0,
                   what="the first produce")

        wait_until(lambda: "steady" in observer.image.topics, what="the topic observed")
        proxy.stall_after_watch(5.0)
        # another topic, led by a broker that does not exist
        update(observer, lambda image: ([PutTopic(TopicInfo("elsewhere", uuid.uuid4(), (
            PartitionInfo(0, 99, 0, (99,), (99,)),), {}))], None), False)
        assert proxy.stalling.wait(10), "no watch notification reached the broker"
        time.sleep(0.2)  # the reply held is the broker's refresh's first read
        started = time.monotonic()
        error, offset = produce(client, "steady", bytes(make_batch([b"during"])))
        produced = time.monotonic() - started
        read = fetch(client, "steady", 1)
        took = time.monotonic() - started
        values = [r.value for _, rs in decode_batches(read.records) for r in rs]  # type: ignore[attr-defined]
        assert (error, offset) == (0, 1), (error, offset, produced)
        assert values == [b"during"], (values, took)
        assert produced < 2.0 and took < 2.0, (produced, took)
        metadata = client.call(ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})
        assert "elsewhere" not in {t.name for t in metadata.topics}  # not read yet
        wait_until(lambda: "elsewhere" in admin.list_topics(timeout=5).topics, timeout=20,
                   what="the new image once ZooKeeper answers")
        client.close()
    finally:
        observer.close()
        proxy.close()


def test_a_broker_restarted_at_once_after_a_kill_waits_out_its_old_session(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    """kill -9 and start again at once: the id is still registered by the dead process's
    session until ZooKeeper expires it; the new process retries its registration meanwhile
    (as Kafka 4's brokers retry DUPLICATE_BROKER_REGISTRATION) instead of exiting."""
    config = {"zookeeper.connect": zookeeper_connect, "node.id": NODE + 1,
              "zookeeper.session.timeout.ms": 3000}
    broker = strom_broker_factory(config)
    wait_until(lambda: NODE + 1 in observer.image.brokers, what="the first registration")
    first_epoch = observer.image.brokers[NODE + 1].epoch
    broker.kill()
    assert NODE + 1 in observer.image.brokers  # the dead session still holds the id
    began = time.monotonic()
    broker.start()
    waited = time.monotonic() - began
    wait_until(lambda: NODE + 1 in observer.image.brokers
               and observer.image.brokers[NODE + 1].epoch != first_epoch,
               what="the new registration")
    assert "retrying until that session has expired" in "".join(broker.output)
    assert waited < 3.0 + 3.0 + 5.0  # the session timeout and the slack, with room
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("after-kill", 1, 1)])["after-kill"].result(15)
