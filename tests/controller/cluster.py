"""Helpers for controller tests on a real cluster: ZooKeeper and three broker processes
(the ``cluster`` / ``observer`` fixtures in this package's conftest), observed through
another ZooKeeper session's metadata image."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from confluent_kafka.admin import AdminClient

from strom.metadata.changes import PutTopic
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.testing.broker import EmbeddedBroker
from strom.testing.pytest_plugin import BrokerFactory
from tests.metadata.zk_helpers import wait_until

IDS = (1, 2, 3)
FAILOVER_S = 10.0


def start_cluster(connect: str, factory: BrokerFactory, observer: ZooKeeperMetadataStore,
                  extra: Mapping[str, object] | None = None) -> dict[int, EmbeddedBroker]:
    """Brokers :data:`IDS` on ``connect`` (automatic rebalance off unless ``extra`` says
    otherwise), once all are registered and one is the controller."""
    config: Mapping[str, object] = {
        "zookeeper.connect": connect, "zookeeper.session.timeout.ms": 1000,
        "auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": 200,
        **(extra or {})}
    brokers = {node: factory({**config, "node.id": node}) for node in IDS}
    wait_until(lambda: set(observer.image.brokers) == set(IDS)
               and observer.image.controller_id in IDS, what="three brokers and a controller")
    return brokers


def create(brokers: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore, name: str,
           assignment: list[list[int]], configs: dict[str, str] | None = None) -> AdminClient:
    """Topic ``name`` with these replicas per partition, written to ZooKeeper as a topic
    creation writes it (first replica leading, epoch 0, ISR = replicas); an AdminClient."""
    image = observer.image
    observer.write(image.epoch, [PutTopic(TopicInfo(name, uuid.uuid4(), tuple(
        PartitionInfo(i, replicas[0], 0, tuple(replicas), tuple(replicas))
        for i, replicas in enumerate(assignment)), dict(configs or {})))])
    return AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})


def partition(observer: ZooKeeperMetadataStore, name: str, index: int = 0
              ) -> PartitionInfo | None:
    topic = observer.image.topics.get(name)
    return None if topic is None else topic.partitions[index]


def leader_seen_by(broker: EmbeddedBroker, name: str) -> int:
    """The partition's leader in a Metadata response of ``broker`` (librdkafka)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.list_topics(name, timeout=10).topics[name].partitions[0].leader


def wait_for(observer: ZooKeeperMetadataStore, name: str,
             test: Callable[[PartitionInfo], bool], what: str, index: int = 0,
             timeout: float = FAILOVER_S) -> PartitionInfo:
    wait_until(lambda: (p := partition(observer, name, index)) is not None and test(p),
               timeout=timeout, what=what)
    found = partition(observer, name, index)
    assert found is not None
    return found


def on_two_brokers(brokers: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore,
                   name: str, partitions: int = 1) -> tuple[int, int, int]:
    """Topic ``name`` on the two brokers that are not the controller (replicas [a, b], a
    leading every partition); ``(controller, a, b)`` once the leader is seen."""
    controller = observer.image.controller_id
    a, b = [n for n in IDS if n != controller]
    create(brokers, observer, name, [[a, b]] * partitions)
    wait_for(observer, name, lambda p: p.leader == a, "the first leader")
    return controller, a, b
