"""A broker with ``zookeeper.connect``: its metadata lives in a real ZooKeeper (Kafka's znodes),
it registers and elects itself controller, and real clients work as against the file store."""

from __future__ import annotations

import json
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
from strom.testing.zookeeper import free_port
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
