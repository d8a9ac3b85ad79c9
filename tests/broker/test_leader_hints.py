"""KIP-951 current-leader hints and Fetch diverging epochs, on the wire of a real cluster
(ZooKeeper and three broker processes) after the controller moved leadership with a
preferred-leader election (ElectLeaders).

Produce v10+ answers NOT_LEADER_OR_FOLLOWER with ``current_leader`` (the new leader and its
epoch) and the leader's endpoint in ``node_endpoints``; Fetch v16+ does the same for
NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH; older versions carry neither. A broker that
does not host a partition the metadata has answers NOT_LEADER_OR_FOLLOWER (with the hint)
rather than UNKNOWN_TOPIC_OR_PARTITION, as Kafka. A fetch whose ``last_fetched_epoch`` shows
a diverged log gets ``diverging_epoch`` and no records.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.metadata.changes import PutTopic
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol import api, fast
from strom.protocol.versions import ApiKey
from strom.testing.broker import EmbeddedBroker
from strom.testing.pytest_plugin import BrokerFactory
from tests.broker.raw import RawClient
from tests.controller.cluster import IDS, leader_seen_by, start_cluster, wait_for
from tests.metadata.zk_helpers import wait_until
from tests.storage.helpers import make_batch

NOT_LEADER_OR_FOLLOWER = 6
OFFSET_OUT_OF_RANGE = 1
FENCED_LEADER_EPOCH = 74


@dataclass(frozen=True)
class Moved:
    """The cluster after the move: ``a`` leads at epoch 1, ``b`` led at epoch 0."""

    cluster: dict[int, EmbeddedBroker]
    controller: int
    a: int
    b: int
    topic_id: uuid.UUID


def produce(client: RawClient, version: int, topic: str, records: bytes | bytearray
            ) -> Any:
    response = client.call(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response


def fetch(client: RawClient, version: int, topic: str, topic_id: uuid.UUID, *,
          offset: int = 0, current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> Any:
    return client.call(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": current_leader_epoch,
            "fetch_offset": offset, "last_fetched_epoch": last_fetched_epoch,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})


def produce_values(broker: EmbeddedBroker, values: list[bytes]) -> None:
    """Produce each value (acks=all, Produce v9) to ``hints``; each must succeed."""
    client = RawClient(broker.bootstrap)
    try:
        for value in values:
            answer = produce(client, 9, "hints", make_batch([value]))
            assert answer.responses[0].partition_responses[0].error_code == 0
    finally:
        client.close()


def endpoints(response: Any) -> list[tuple[int, str, int]]:
    return [(e.node_id, e.host, e.port) for e in response.node_endpoints]


def address(broker: EmbeddedBroker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def moved(zookeeper_connect: str, strom_broker_factory: BrokerFactory) -> Iterator[Moved]:
    """Topic ``hints`` on the two brokers that are not the controller, replicas [a, b], led
    first by b (not the preferred replica), with records from b's epoch 0; then a preferred
    election moves leadership to a (epoch 1), which gets more records.
    """
    observer = ZooKeeperMetadataStore(zookeeper_connect, timeout=5.0)
    try:
        cluster = start_cluster(zookeeper_connect, strom_broker_factory, observer)
        yield _move(cluster, observer)
    finally:
        observer.close()


def _move(cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> Moved:
    controller = observer.image.controller_id
    a, b = [n for n in IDS if n != controller]
    topic_id = uuid.uuid4()
    image = observer.image
    observer.write(image.epoch, [PutTopic(TopicInfo("hints", topic_id, (
        PartitionInfo(0, b, 0, (a, b), (a, b)),), {}))])
    wait_for(observer, "hints", lambda p: p.leader == b, "b leading")
    wait_until(lambda: leader_seen_by(cluster[b], "hints") == b, what="b serving")
    produce_values(cluster[b], [b"e0-0", b"e0-1", b"e0-2"])  # offsets 0-2 at epoch 0
    wait_until(lambda: all(
        (cluster[n].data_dir / "hints-0").exists() for n in (a, b)), what="both replicas")

    admin = AdminClient({"bootstrap.servers": cluster[a].bootstrap})
    results = admin.elect_leaders(ElectionType.PREFERRED,
                                  [TopicPartition("hints", 0)]).result(15)
    assert list(results.values()) == [None]
    after = wait_for(observer, "hints", lambda p: p.leader == a, "a leading")
    assert after.leader_epoch == 1
    wait_until(lambda: leader_seen_by(cluster[a], "hints") == a, what="a serving")
    produce_values(cluster[a], [b"e1-0", b"e1-1"])  # offsets 3-4 at epoch 1
    return Moved(cluster, controller, a, b, topic_id)


def test_produce_to_the_old_leader_names_the_new_one_from_v10(
        moved: Moved) -> None:
    cluster, controller, a, b = moved.cluster, moved.controller, moved.a, moved.b
    wait_until(lambda: leader_seen_by(cluster[b], "hints") == a, what="b following")
    for node in (b, controller):  # the old leader (a follower now), a non-replica
        client = RawClient(cluster[node].bootstrap)
        try:
            for version in (10, 11):
                response = produce(client, version, "hints", make_batch([b"x"]))
                p = response.responses[0].partition_responses[0]
                assert p.error_code == NOT_LEADER_OR_FOLLOWER, (node, version)
                assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (a, 1)
                assert endpoints(response) == [(a, *address(cluster[a]))]
            # v9: the same answer without a hint (the exact bytes)
            raw = client.call_raw(ApiKey.PRODUCE, 9, api.request(ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                    {"name": "hints", "partition_data": [
                        {"index": 0, "records": make_batch([b"x"])}]}]}))
            p = api.decode_response(ApiKey.PRODUCE, 9, raw).responses[0].partition_responses[0]
            assert p.error_code == NOT_LEADER_OR_FOLLOWER
            assert raw == fast.encode_produce_response(9, [fast.ProduceTopicResult(
                "hints", None, [fast.ProducePartitionResult(
                    0, NOT_LEADER_OR_FOLLOWER, error_message=p.error_message)])])
        finally:
            client.close()


def test_fetch_from_the_old_leader_names_the_new_one_from_v16(
        moved: Moved) -> None:
    cluster, a, b, topic_id = moved.cluster, moved.a, moved.b, moved.topic_id
    wait_until(lambda: leader_seen_by(cluster[b], "hints") == a, what="b following")
    on_b = RawClient(cluster[b].bootstrap)
    try:
        response = fetch(on_b, 16, "hints", topic_id)
        p = response.responses[0].partitions[0]
        assert p.error_code == NOT_LEADER_OR_FOLLOWER and p.records == b""
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (a, 1)
        assert endpoints(response) == [(a, *address(cluster[a]))]
        # v12-15 have the tag but Kafka fills it from v16 only
        for version in (12, 15):
            older = fetch(on_b, version, "hints", topic_id)
            p = older.responses[0].partitions[0]
            assert p.error_code == NOT_LEADER_OR_FOLLOWER
            assert p.current_leader is None
    finally:
        on_b.close()
    on_a = RawClient(cluster[a].bootstrap)
    try:  # a consumer still at epoch 0 is fenced by the new leader, which names itself
        response = fetch(on_a, 16, "hints", topic_id, current_leader_epoch=0)
        p = response.responses[0].partitions[0]
        assert p.error_code == FENCED_LEADER_EPOCH
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (a, 1)
        assert endpoints(response) == [(a, *address(cluster[a]))]
        current = fetch(on_a, 16, "hints", topic_id, current_leader_epoch=1)
        p = current.responses[0].partitions[0]
        assert p.error_code == 0 and p.current_leader is None
        assert endpoints(current) == []
    finally:
        on_a.close()


def test_fetch_with_a_diverged_last_fetched_epoch_gets_the_epoch_end_and_no_records(
        moved: Moved) -> None:
    cluster, a, topic_id = moved.cluster, moved.a, moved.topic_id
    on_a = RawClient(cluster[a].bootstrap)
    try:
        # epoch 0 ended at offset 3 here: a fetcher at 5 that last saw epoch 0 diverged
        p = fetch(on_a, 12, "hints", topic_id, offset=5,
                  last_fetched_epoch=0).responses[0].partitions[0]
        assert p.error_code == 0 and p.records == b""
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 3)
        assert p.high_watermark == 5
        # at offset 3 with epoch 0 (or anywhere in epoch 1) nothing diverged: records
        for offset, epoch in ((3, 0), (4, 1), (1, 0)):
            p = fetch(on_a, 16, "hints", topic_id, offset=offset,
                      last_fetched_epoch=epoch).responses[0].partitions[0]
            assert p.error_code == 0 and p.records, (offset, epoch)
            assert p.diverging_epoch is None
        # an epoch the leader never had, above its latest: out of range
        p = fetch(on_a, 16, "hints", topic_id, offset=4,
                  last_fetched_epoch=7).responses[0].partitions[0]
        assert p.error_code == OFFSET_OUT_OF_RANGE
        # before v12 there is no last_fetched_epoch: an ordinary read
        p = fetch(on_a, 11, "hints", topic_id, offset=3).responses[0].partitions[0]
        assert p.error_code == 0 and p.records
    finally:
        on_a.close()
