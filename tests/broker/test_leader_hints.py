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

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Message, Producer, TopicPartition
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
    """The cluster; after the move ``a`` leads at epoch 1, ``b`` led at epoch 0."""

    cluster: dict[int, EmbeddedBroker]
    observer: ZooKeeperMetadataStore
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
    """Produce each value (acks=all, Produce v9) to ``hints``; each must succeed (retried
    for a while on NOT_LEADER_OR_FOLLOWER: as on Kafka, a partition new to the broker is
    refused retriably until its log is open)."""
    client = RawClient(broker.bootstrap)
    try:
        for value in values:
            deadline = time.monotonic() + 15
            while True:
                answer = produce(client, 9, "hints", make_batch([value]))
                code = answer.responses[0].partition_responses[0].error_code
                if code != NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert code == 0
    finally:
        client.close()


def endpoints(response: Any) -> list[tuple[int, str, int]]:
    return [(e.node_id, e.host, e.port) for e in response.node_endpoints]


def address(broker: EmbeddedBroker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def led_by_b(zookeeper_connect: str, strom_broker_factory: BrokerFactory) -> Iterator[Moved]:
    """Topic ``hints`` on the two brokers that are not the controller, replicas [a, b], led
    by b (not the preferred replica) at epoch 0, on both replicas."""
    observer = ZooKeeperMetadataStore(zookeeper_connect, timeout=5.0)
    try:
        cluster = start_cluster(zookeeper_connect, strom_broker_factory, observer)
        controller = observer.image.controller_id
        a, b = [n for n in IDS if n != controller]
        topic_id = uuid.uuid4()
        image = observer.image
        observer.write(image.epoch, [PutTopic(TopicInfo("hints", topic_id, (
            PartitionInfo(0, b, 0, (a, b), (a, b)),), {}))])
        wait_for(observer, "hints", lambda p: p.leader == b, "b leading")
        wait_until(lambda: leader_seen_by(cluster[b], "hints") == b, what="b serving")
        wait_until(lambda: all((cluster[n].data_dir / "hints-0").exists() for n in (a, b)),
                   what="both replicas")
        yield Moved(cluster, observer, controller, a, b, topic_id)
    finally:
        observer.close()


def elect_a(setup: Moved) -> None:
    """The controller moves leadership to the preferred replica a (epoch 1)."""
    admin = AdminClient({"bootstrap.servers": setup.cluster[setup.a].bootstrap})
    results = admin.elect_leaders(ElectionType.PREFERRED,
                                  [TopicPartition("hints", 0)]).result(15)
    assert list(results.values()) == [None]
    after = wait_for(setup.observer, "hints", lambda p: p.leader == setup.a, "a leading")
    assert after.leader_epoch == 1


@pytest.fixture
def moved(led_by_b: Moved) -> Moved:
    """``led_by_b`` with records from b's epoch 0 (offsets 0-2), then moved to a, which
    appended offsets 3-4 at epoch 1."""
    cluster, a, b = led_by_b.cluster, led_by_b.a, led_by_b.b
    produce_values(cluster[b], [b"e0-0", b"e0-1", b"e0-2"])
    elect_a(led_by_b)
    wait_until(lambda: leader_seen_by(cluster[a], "hints") == a, what="a serving")
    produce_values(cluster[a], [b"e1-0", b"e1-1"])
    return led_by_b


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


def test_fetch_errors_name_the_new_leader_from_v16(moved: Moved) -> None:
    """Followers serve consumers from v11 (KIP-392), so the hints show on a broker without a
    replica (NOT_LEADER_OR_FOLLOWER), on the old leader for a consumer still at epoch 0
    (FENCED_LEADER_EPOCH), and on the new leader for that consumer."""
    cluster, controller, a, b = moved.cluster, moved.controller, moved.a, moved.b
    topic_id = moved.topic_id
    wait_until(lambda: leader_seen_by(cluster[b], "hints") == a, what="b following")
    elsewhere = RawClient(cluster[controller].bootstrap)
    try:
        response = fetch(elsewhere, 16, "hints", topic_id)
        p = response.responses[0].partitions[0]
        assert p.error_code == NOT_LEADER_OR_FOLLOWER and p.records == b""
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (a, 1)
        assert endpoints(response) == [(a, *address(cluster[a]))]
        # v12-15 have the tag but Kafka fills it from v16 only
        for version in (12, 15):
            older = fetch(elsewhere, version, "hints", topic_id)
            p = older.responses[0].partitions[0]
            assert p.error_code == NOT_LEADER_OR_FOLLOWER
            assert p.current_leader is None
    finally:
        elsewhere.close()
    on_b = RawClient(cluster[b].bootstrap)
    try:  # the old leader, a follower at epoch 1 now, fences a consumer at epoch 0
        response = fetch(on_b, 16, "hints", topic_id, current_leader_epoch=0)
        p = response.responses[0].partitions[0]
        assert p.error_code == FENCED_LEADER_EPOCH
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (a, 1)
        assert endpoints(response) == [(a, *address(cluster[a]))]
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


class ClientLog:
    """librdkafka's debug lines, through a ``logger``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:8]}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self._Handler(self.lines))

    class _Handler(logging.Handler):
        def __init__(self, lines: list[str]) -> None:
            super().__init__()
            self._lines = lines

        def emit(self, record: logging.LogRecord) -> None:
            self._lines.append(record.getMessage())

    def received_before(self, client: str, marker: str) -> str | None:
        """The last response ``client`` (``producer`` / ``consumer``) logged before its
        first line containing ``marker`` (None if there is no such line)."""
        mine = [line for line in self.lines if f"rdkafka#{client}" in line]
        at = next((i for i, line in enumerate(mine) if marker in line), None)
        if at is None:
            return None
        return next((line for line in reversed(mine[:at]) if "Received " in line), None)


def test_librdkafka_follows_a_leader_move_without_a_periodic_metadata_refresh(
        led_by_b: Moved) -> None:
    """confluent-kafka (librdkafka 2.16, Produce v11 / Fetch v16) keeps producing and
    consuming across the move with ``topic.metadata.refresh.interval.ms`` at 10 minutes,
    and both clients take the new leader from the NOT_LEADER_OR_FOLLOWER /
    FENCED_LEADER_EPOCH hint before any Metadata answer (their debug log says so); the
    longest pause around the move is printed: 0.16-0.5 s over four runs on a loaded 2-core
    machine (0.3-0.8 s in two runs with the hints switched off), most of it the new
    leader's high watermark waiting for the old leader's first fetch as its follower; the
    clients switch in the same millisecond as the error answer."""
    cluster, a, b = led_by_b.cluster, led_by_b.a, led_by_b.b
    bootstrap = ",".join(broker.bootstrap for broker in cluster.values())
    log = ClientLog()
    slow_refresh = {"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 600000,
                    "debug": "metadata,protocol", "logger": log.logger}
    producer = Producer({**slow_refresh, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": True})
    consumer = Consumer({**slow_refresh, "group.id": uuid.uuid4().hex,
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition("hints", 0, 0)])
    delivered: list[tuple[float, int]] = []  # (when, offset)
    failed: list[KafkaError] = []
    consumed: list[tuple[float, bytes]] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)
        else:
            delivered.append((time.monotonic(), msg.offset()))

    def run(seconds: float, sent: int) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.produce("hints", b"m%d" % sent, on_delivery=report)
            sent += 1
            producer.poll(0.01)
            for msg in consumer.consume(100, 0):
                if msg.error() is None:
                    consumed.append((time.monotonic(), msg.value()))
        return sent

    try:
        sent = run(1.5, 0)
        moved_at = time.monotonic()
        elect_a(led_by_b)
        sent = run(3.0, sent)
        assert producer.flush(20) == 0
        deadline = time.monotonic() + 20
        while len(consumed) < sent and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    consumed.append((time.monotonic(), msg.value()))
    finally:
        consumer.close()
    assert failed == []
    assert sorted(offset for _, offset in delivered) == list(range(sent))
    assert [value for _, value in consumed] == [b"m%d" % i for i in range(sent)]
    # each client took the new leader from an answer's hint: the last response it received
    # before it first knew the new leader is that Produce / Fetch answer, not Metadata
    for client, answer in (("producer", "ProduceResponse"), ("consumer", "FetchResponse")):
        got = log.received_before(client, f"updated with leader {a} and epoch 1")
        assert got is not None and answer in got, (client, got)
    # the longest pause in deliveries and in consumption around the move
    def longest_gap(times: list[float]) -> float:
        around = [t for t in times if t >= moved_at - 0.5]
        return max((y - x for x, y in itertools.pairwise(around)), default=0.0)
    print(f"leader move {b} -> {a}: longest pause producing "
          f"{longest_gap([t for t, _ in delivered]) * 1000:.0f} ms, consuming "
          f"{longest_gap([t for t, _ in consumed]) * 1000:.0f} ms ({sent} messages)")
