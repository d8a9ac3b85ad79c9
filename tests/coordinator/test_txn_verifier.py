"""Transactions on a real 3-broker cluster whose partitions are led by brokers other than the
transaction coordinator (issue 9), with confluent-kafka and strom's own client on the wire.

KIP-890: a partition leader appends a producer's first transactional batch only once the
coordinator confirmed the partition joined the transaction. Before the remote verifier, a
leader that was not itself the coordinator answered NOT_ENOUGH_REPLICAS forever, so no
transaction spanning brokers could commit. And the first FindCoordinators, reaching several
brokers at once, raced to create the internal topic: the losers closed the client's
connection (TOPIC_ALREADY_EXISTS) instead of answering COORDINATOR_NOT_AVAILABLE."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.client.conn import Connection
from strom.common.errors import error_class
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.versions import ApiKey
from strom.testing.chaos.workload import create_topic
from strom.testing.chaos.zkview import ZooKeeperView
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available
from tests.broker.raw import RawClient
from tests.metadata.zk_helpers import wait_until

FEW_INTERNAL = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3}
COORDINATOR_NOT_AVAILABLE = error_class("COORDINATOR_NOT_AVAILABLE").code


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    """One fresh cluster for the module: the FindCoordinator race (first below) needs the
    internal topics not to exist yet; the other tests use topics and ids of their own."""
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed")
    with EmbeddedCluster(3, configs=FEW_INTERNAL) as started:
        yield started


def _leaders(cluster: EmbeddedCluster, topic: str, partitions: int) -> dict[int, int]:
    view = ZooKeeperView(cluster.zookeeper_connect)
    try:
        states = {p: view.partition_state(topic, p) for p in range(partitions)}
        return {p: int(str(s["leader"])) for p, s in states.items() if s is not None}
    finally:
        view.close()


def test_concurrent_first_find_coordinators_answer_on_every_broker(
        cluster: EmbeddedCluster) -> None:
    """The first FindCoordinator of each kind, sent to the three brokers at once: each
    answers the coordinator or COORDINATOR_NOT_AVAILABLE (15), none drops the connection."""
    async def ask_all(key_type: int) -> list[int]:
        conns = [await Connection(b.host, b.port).open() for b in cluster.brokers.values()]
        try:
            answers = await asyncio.gather(*(
                conn.request(ApiKey.FIND_COORDINATOR, {"key": "k", "key_type": key_type},
                             version=2) for conn in conns))
            return [int(a.error_code) for a in answers]
        finally:
            for conn in conns:
                await conn.close()

    for key_type in (0, 1):  # group, transactional id
        codes = asyncio.run(ask_all(key_type))
        assert set(codes) <= {0, COORDINATOR_NOT_AVAILABLE}, codes


def test_a_transaction_spanning_partitions_led_by_every_broker_commits(
        cluster: EmbeddedCluster) -> None:
    create_topic(cluster.bootstrap, "spread", 3, 3, {"min.insync.replicas": "2"})
    assert sorted(_leaders(cluster, "spread", 3).values()) == [0, 1, 2]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "spread",
                         "acks": "all"})
    producer.init_transactions(30)
    for round_ in range(3):  # commit, abort, commit: each marker reaches all three leaders
        producer.begin_transaction()
        for p in range(3):
            producer.produce("spread", value=f"{round_}-{p}".encode(), partition=p)
        if round_ == 1:
            producer.flush(10)
            producer.abort_transaction(10)
        else:
            producer.commit_transaction(10)  # NOT_ENOUGH_REPLICAS until timeout before
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": str(uuid.uuid4()),
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition("spread", p, OFFSET_BEGINNING) for p in range(3)])
    seen: list[str] = []
    ended: set[int] = set()
    for _ in range(100):
        for msg in consumer.consume(100, 0.2):
            if msg.error() is None:
                seen.append(msg.value().decode())
            else:
                ended.add(msg.partition())
        if ended == {0, 1, 2}:
            break
    consumer.close()
    assert sorted(seen) == ["0-0", "0-1", "0-2", "2-0", "2-1", "2-2"]


def test_a_leader_asks_the_remote_coordinator_and_answers_its_verdict_on_the_wire(
        cluster: EmbeddedCluster) -> None:
    """Raw requests: a transactional batch for a partition the producer never added, sent to
    a leader that is not the coordinator, is refused INVALID_TXN_STATE (48) — the remote
    coordinator's answer; once AddPartitionsToTxn added it, the same batch is appended."""
    create_topic(cluster.bootstrap, "wire", 3, 3, {"min.insync.replicas": "2"})
    leaders = _leaders(cluster, "wire", 3)
    # each leader answers from its own image, read from ZooKeeper (off its event loop) a
    # moment after the creation: wait until it names itself
    for p, node in leaders.items():
        admin = AdminClient({"bootstrap.servers": cluster.brokers[node].bootstrap})
        wait_until(lambda p=p, node=node, admin=admin: (  # type: ignore[misc]
            (t := admin.list_topics("wire", timeout=5).topics.get("wire")) is not None
            and p in t.partitions and t.partitions[p].leader == node),
            what="the leader's image holding the topic")
    any_broker = RawClient(cluster.brokers[0].bootstrap)
    found = None
    for _ in range(50):  # the first lookup creates __transaction_state
        found = any_broker.call(ApiKey.FIND_COORDINATOR, 2, {"key": "wire", "key_type": 1})
        if found.error_code == 0:
            break
        time.sleep(0.2)
    assert found is not None and found.error_code == 0
    coordinator = RawClient(f"{found.host}:{found.port}")
    init: Any = None
    for _ in range(50):  # the coordinator's shard may still be loading
        init = coordinator.call(ApiKey.INIT_PRODUCER_ID, 2, {
            "transactional_id": "wire", "transaction_timeout_ms": 60000})
        if init.error_code == 0:
            break
        time.sleep(0.2)
    assert init.error_code == 0
    partition = next(p for p, leader in leaders.items() if leader != found.node_id)
    leader = cluster.brokers[leaders[partition]]
    to_leader = RawClient(leader.bootstrap)

    def produce() -> int:
        builder = BatchBuilder(producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                               base_sequence=0, transactional=True)
        builder.append(int(time.time() * 1000), None, b"v")
        resp = to_leader.call(ApiKey.PRODUCE, 9, {
            "transactional_id": "wire", "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "wire", "partition_data": [
                {"index": partition, "records": builder.build()}]}]})
        return int(resp.responses[0].partition_responses[0].error_code)

    assert produce() == error_class("INVALID_TXN_STATE").code
    added = coordinator.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "wire",
        "v3_and_below_producer_id": init.producer_id,
        "v3_and_below_producer_epoch": init.producer_epoch,
        "v3_and_below_topics": [{"name": "wire", "partitions": [partition]}]})
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code == 0
    assert produce() == 0
    for client in (any_broker, coordinator, to_leader):
        client.close()
