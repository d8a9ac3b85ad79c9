"""KIP-392 follower fetching: which replica a leader names as a consumer's preferred read
replica (Kafka's RackAwareReplicaSelector over real partitions), and, on a real 3-broker
cluster with one rack per broker, real consumers reading from their rack's follower."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.client.consumer import Consumer as StromConsumer
from strom.client.sync import SyncConsumer
from strom.common.config import BROKER_KEYS, RACK_AWARE_REPLICA_SELECTOR
from strom.common.errors import InvalidConfigError
from strom.common.types import TopicPartition as StromTP
from strom.metadata.image import BrokerInfo
from strom.protocol import api, fast
from strom.protocol.versions import ApiKey
from strom.replication.partition import Partition
from strom.replication.replica_selector import (
    RackAwareReplicaSelector,
    preferred_read_replica,
    replica_selector,
)
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available
from tests.broker.raw import RawClient
from tests.broker.wire_tap import WireTap
from tests.metadata.zk_helpers import wait_until
from tests.replication.harness import NODE, Harness, image, partition_info

RACKS = {1: "a", 2: "b", 3: "c", 4: "b"}
SELECTOR = RackAwareReplicaSelector()


def brokers(racks: dict[int, str | None]) -> dict[int, BrokerInfo]:
    return {b: BrokerInfo(b, "127.0.0.1", 9000 + b, rack) for b, rack in racks.items()}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    h.close()


def leader_of(harness: Harness, replicas: tuple[int, ...] = (1, 2, 3),
              isr: tuple[int, ...] | None = None, records: int = 10) -> Partition:
    """Broker 1 leads t-0 with ``records`` records, every follower caught up."""
    harness.apply(image(partition_info(replicas=replicas, isr=isr)))
    partition = harness.replicas.get("t", 0)
    assert partition is not None and partition.is_leader
    harness.produce(records, acks=1)
    for follower in replicas[1:]:
        partition.update_follower_fetch_state(follower, records, 0)
    return partition


def test_a_consumer_in_a_followers_rack_is_sent_to_that_follower(harness: Harness) -> None:
    partition = leader_of(harness)
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(RACKS)) == 2
    assert preferred_read_replica(SELECTOR, partition, "c", 10, brokers(RACKS)) == 3


@pytest.mark.parametrize("rack", ["", "a", "elsewhere"])
def test_the_leader_serves_without_a_rack_in_its_rack_or_with_no_replica_there(
        harness: Harness, rack: str) -> None:
    partition = leader_of(harness)
    assert preferred_read_replica(SELECTOR, partition, rack, 5, brokers(RACKS)) == -1


def test_the_leader_in_the_consumers_rack_wins_over_a_follower_there(harness: Harness) -> None:
    partition = leader_of(harness)
    racks = {**RACKS, 1: "b"}
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(racks)) == -1


def test_out_of_sync_behind_unregistered_or_truncated_followers_are_not_chosen(
        harness: Harness) -> None:
    partition = leader_of(harness, isr=(1, 3))  # 2 is not in the ISR
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(RACKS)) == -1
    partition = leader_of(harness)
    partition.update_follower_fetch_state(2, 10, 6)  # its log starts after the fetch offset
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(RACKS)) == -1
    assert preferred_read_replica(SELECTOR, partition, "b", 6, brokers(RACKS)) == 2
    partition.update_follower_fetch_state(3, 4, 0)  # behind the fetch offset
    assert preferred_read_replica(SELECTOR, partition, "c", 5, brokers(RACKS)) == -1
    assert preferred_read_replica(SELECTOR, partition, "c", 4, brokers(RACKS)) == 3
    unregistered = {b: r for b, r in RACKS.items() if b != 2}
    assert preferred_read_replica(SELECTOR, partition, "b", 6, brokers(unregistered)) == -1


def test_the_most_caught_up_replica_of_the_rack_is_chosen(harness: Harness) -> None:
    partition = leader_of(harness, replicas=(1, 2, 4))  # 2 and 4 both in rack b
    partition.update_follower_fetch_state(2, 8, 0)
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(RACKS)) == 4
    partition.update_follower_fetch_state(2, 10, 0)  # as far as 4; caught up as recently
    assert preferred_read_replica(SELECTOR, partition, "b", 5, brokers(RACKS)) == 2


def test_a_follower_names_no_preferred_replica(harness: Harness) -> None:
    harness.apply(image(partition_info(leader=2, replicas=(2, NODE, 3))))
    partition = harness.replicas.get("t", 0)
    assert partition is not None and not partition.is_leader
    assert preferred_read_replica(SELECTOR, partition, "a", 0, brokers(RACKS)) == -1


def test_replica_selector_class_takes_kafkas_name_or_the_alias_and_refuses_others() -> None:
    key = BROKER_KEYS["replica.selector.class"]
    assert replica_selector(key.parse(None)) is None
    assert isinstance(replica_selector(key.parse(RACK_AWARE_REPLICA_SELECTOR)),
                      RackAwareReplicaSelector)
    assert isinstance(replica_selector(key.parse("rack-aware")), RackAwareReplicaSelector)
    with pytest.raises(InvalidConfigError, match=r"com\.example\.Nearest is not a replica "
                                                 "selector strom has"):
        key.parse("com.example.Nearest")


# --- a real 3-broker cluster, one rack per broker, every client through a wire tap ----------

RACK_NAMES = ("rack-0", "rack-1", "rack-2")
NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = 6, 1, 3
#: A follower learns the leader's high watermark from its next fetch response; an idle
#: follower's fetch waits this long at the leader (long enough to look between the two).
REPLICA_WAIT_MS = 2500


@dataclass(frozen=True)
class Racked:
    cluster: EmbeddedCluster
    taps: dict[int, WireTap]


@dataclass(frozen=True)
class TappedFetch:
    """One Fetch as a tap saw it: who sent it, and what the broker answered."""

    broker: int
    client_id: str
    replica_id: int
    record_bytes: int
    preferred: tuple[int, ...]  # preferred_read_replica of the partitions that named one


@pytest.fixture(scope="module")
def racked() -> Iterator[Racked]:
    """Brokers 0-2 in racks rack-0..rack-2 with the rack-aware selector, each advertised as
    a :class:`WireTap` in front of it (clients and followers' fetches all pass the taps)."""
    if not zookeeper_available():
        pytest.skip("ZooKeeper (Debian's zookeeper package and java) is not installed")
    taps = {i: WireTap() for i in range(3)}
    cluster = EmbeddedCluster(
        3, racks=list(RACK_NAMES),
        configs={"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
                 "replica.fetch.wait.max.ms": REPLICA_WAIT_MS, "replica.fetch.backoff.ms": 100,
                 "replica.lag.time.max.ms": 6000},
        broker_configs={i: {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{tap.port}"}
                        for i, tap in taps.items()})
    try:
        for i, tap in taps.items():
            tap.upstream = (cluster.brokers[i].host, cluster.brokers[i].port)
        cluster.start()
        yield Racked(cluster, taps)
    finally:
        cluster.close()
        for tap in taps.values():
            tap.close()


def tapped_fetches(racked: Racked, client_id: str | None = None,
                   since: dict[int, int] | None = None) -> list[TappedFetch]:
    """Every Fetch the taps saw (of ``client_id`` only, if given; after the first
    ``since[broker]`` fetches of each tap, if given), decoded; grouped by broker."""
    out = []
    for broker, tap in racked.taps.items():
        for exchange in tap.of(ApiKey.FETCH)[(since or {}).get(broker, 0):]:
            request, version = exchange.request, exchange.api_version
            id_len = struct.unpack_from(">h", request, 8)[0]
            sender = request[10:10 + max(id_len, 0)].decode()
            if client_id is not None and sender != client_id:
                continue
            flexible = version >= 12
            body = memoryview(request)[10 + max(id_len, 0) + (1 if flexible else 0):]
            replica_id = fast.decode_fetch_request(body, version).replica_id
            answer = api.decode_response(ApiKey.FETCH, version,
                                         exchange.response[4 + (1 if flexible else 0):])
            parts = [p for t in answer.responses for p in t.partitions]
            size = sum(len(bytes(p.records or b"")) for p in parts)
            preferred = tuple(p.preferred_read_replica for p in parts
                              if version >= 11 and p.preferred_read_replica >= 0)
            out.append(TappedFetch(broker, sender, replica_id, size, preferred))
    return out


def create_topic(racked: Racked, name: str, replicas: int = 3,
                 assignment: list[int] | None = None) -> tuple[int, list[int]]:
    """Create ``name`` (one partition, on ``assignment`` if given, its first broker the
    leader); returns (leader, followers) once every replica is in the ISR."""
    admin = AdminClient({"bootstrap.servers": racked.cluster.bootstrap})
    topic = (NewTopic(name, 1, replicas) if assignment is None else
             NewTopic(name, num_partitions=1, replica_assignment=[assignment]))
    admin.create_topics([topic])[name].result(15)

    def state() -> tuple[int, list[int], list[int]] | None:
        topic = admin.list_topics(name, timeout=5).topics[name]
        if topic.error is not None or 0 not in topic.partitions:
            return None
        p = topic.partitions[0]
        return p.leader, list(p.replicas), list(p.isrs)

    wait_until(lambda: (s := state()) is not None and s[0] >= 0
               and len(s[2]) == replicas, timeout=20, what=f"{name} fully in sync")
    found = state()
    assert found is not None
    leader, assigned, _ = found
    return leader, [b for b in assigned if b != leader]


def produce(racked: Racked, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": racked.cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failed: list[object] = []
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, _msg: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed


def confluent_read(racked: Racked, topic: str, count: int, **config: object) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": racked.cluster.bootstrap,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, **config})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_librdkafka_with_client_rack_reads_everything_from_its_racks_follower(
        racked: Racked) -> None:
    leader, followers = create_topic(racked, "ffr-confluent")
    values = [b"v%d" % i for i in range(3000)]
    produce(racked, "ffr-confluent", values)
    near = followers[0]
    got = confluent_read(racked, "ffr-confluent", len(values), **{
        "client.id": "ffr-near", "client.rack": RACK_NAMES[near]})
    assert got == values
    fetches = [f for f in tapped_fetches(racked, "ffr-near") if f.replica_id == -1]
    with_records = {f.broker for f in fetches if f.record_bytes}
    assert with_records == {near}, fetches  # every record came from the follower
    assert sum(f.record_bytes for f in fetches) > 3000 * 2
    # the leader only redirected: it named the follower and sent no record
    redirects = [f for f in fetches if f.broker == leader]
    assert redirects and all(f.preferred == (near,) for f in redirects)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-no-rack"])
def test_consumers_without_a_rack_keep_reading_from_the_leader(racked: Racked,
                                                               client: str) -> None:
    topic = f"ffr-{client}"
    leader, _followers = create_topic(racked, topic)
    values = [b"r%d" % i for i in range(500)]
    produce(racked, topic, values)
    client_id = f"ffr-{client}"
    if client == "kafka-python":
        got = kafka_python_read(racked, topic, len(values), client_id)
    elif client == "aiokafka":
        got = asyncio.run(aiokafka_read(racked, topic, len(values), client_id))
    else:
        got = confluent_read(racked, topic, len(values), **{"client.id": client_id})
    assert got == values
    fetches = tapped_fetches(racked, client_id)
    assert {f.broker for f in fetches if f.record_bytes} == {leader}
    assert not any(f.preferred for f in fetches)


def kafka_python_read(racked: Racked, topic: str, count: int, client_id: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=racked.cluster.bootstrap, client_id=client_id,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    got: list[bytes] = []
    try:
        consumer.assign([KTP(topic, 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    return got


async def aiokafka_read(racked: Racked, topic: str, count: int, client_id: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    consumer = AIOKafkaConsumer(bootstrap_servers=racked.cluster.bootstrap,
                                client_id=client_id, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    got: list[bytes] = []
    try:
        consumer.assign([ATP(topic, 0)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(r.value for r in records)
    finally:
        await consumer.stop()
    return got


def raw_fetch(client: RawClient, topic: str, offset: int, *, version: int = 12,
              rack: str = "", max_wait_ms: int = 0, isolation: int = 0) -> Any:
    """One consumer Fetch of ``topic``-0 at ``offset``; the partition's answer."""
    response = client.call(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": rack})
    return response.responses[0].partitions[0]


def fetched(part: Any) -> tuple[int, int] | None:
    """The offsets a fetched partition's whole batches cover, [first, end); None: no
    batch. (v2 batch header: base offset at byte 0, length at 8, last offset delta at 23.)"""
    data, first, end = bytes(part.records or b""), None, None
    while len(data) >= 61:
        base, size = struct.unpack_from(">qi", data, 0)
        first = base if first is None else first
        end = base + struct.unpack_from(">i", data, 23)[0] + 1
        data = data[12 + size:]
    return None if first is None or end is None else (first, end)


def list_offset_error(client: RawClient, topic: str) -> int:
    response = client.call(ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(response.topics[0].partitions[0].error_code)


def test_on_the_wire_leaders_redirect_and_followers_serve_below_their_high_watermark(
        racked: Racked) -> None:
    cluster = racked.cluster
    leader, followers = create_topic(racked, "ffr-wire")
    near = followers[0]
    produce(racked, "ffr-wire", [b"a%d" % i for i in range(10)])
    on_leader = RawClient(cluster.brokers[leader].bootstrap)
    on_near = RawClient(cluster.brokers[near].bootstrap)
    try:
        wait_until(lambda: raw_fetch(on_near, "ffr-wire", 0).high_watermark == 10,
                   what="the follower's high watermark at 10")
        # leader: a consumer of the follower's rack is redirected (no records, the leader's
        # offsets); other racks, no rack, or Fetch v10 (no rack field) read here
        redirected = raw_fetch(on_leader, "ffr-wire", 0, rack=RACK_NAMES[near])
        assert (redirected.error_code, redirected.preferred_read_replica,
                fetched(redirected), redirected.high_watermark) == (0, near, None, 10)
        for rack, version in ((RACK_NAMES[leader], 12), ("", 12), ("elsewhere", 11),
                              (RACK_NAMES[near], 10)):
            here = raw_fetch(on_leader, "ffr-wire", 0, rack=rack, version=version)
            assert (here.error_code, fetched(here)) == (0, (0, 10)), (rack, version)
            assert version < 11 or here.preferred_read_replica == -1
        # follower: serves v11+ consumers (never redirects), refuses v10 as Kafka does
        served = raw_fetch(on_near, "ffr-wire", 3, rack=RACK_NAMES[near], version=11)
        assert (served.error_code, served.preferred_read_replica, fetched(served),
                served.high_watermark, served.last_stable_offset) == (0, -1, (0, 10), 10, 10)
        assert raw_fetch(on_near, "ffr-wire", 0, version=10).error_code == \
            NOT_LEADER_OR_FOLLOWER
        assert raw_fetch(on_near, "ffr-wire", 11).error_code == OFFSET_OUT_OF_RANGE
        assert raw_fetch(on_near, "ffr-wire", 10).error_code == 0  # at its end: empty
        assert list_offset_error(on_near, "ffr-wire") == NOT_LEADER_OR_FOLLOWER
        assert list_offset_error(on_leader, "ffr-wire") == 0

        # A record acknowledged by the leader is on the follower before the follower knows
        # it is committed: a consumer there sees the follower's high watermark, not the
        # record; a parked fetch is woken when the follower's high watermark moves.
        produce(racked, "ffr-wire", [b"late"])
        early = raw_fetch(on_near, "ffr-wire", 10)
        assert (early.error_code, early.high_watermark, fetched(early)) == (0, 10, None)
        started = time.monotonic()
        parked = raw_fetch(on_near, "ffr-wire", 10, max_wait_ms=20000)
        waited = time.monotonic() - started
        assert (parked.error_code, parked.high_watermark, fetched(parked)) == (0, 11, (10, 11))
        assert 0.2 < waited < REPLICA_WAIT_MS / 1000 + 3, waited
    finally:
        on_leader.close()
        on_near.close()


def test_a_broker_without_a_replica_answers_not_leader_or_follower(racked: Racked) -> None:
    cluster = racked.cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    single = NewTopic("ffr-single", num_partitions=1, replica_assignment=[[0]])
    admin.create_topics([single])["ffr-single"].result(15)
    elsewhere = RawClient(cluster.brokers[1].bootstrap)
    try:
        wait_until(lambda: raw_fetch(elsewhere, "ffr-single", 0).error_code
                   == NOT_LEADER_OR_FOLLOWER, what="broker 1 knowing ffr-single")
        assert raw_fetch(elsewhere, "ffr-none", 0).error_code == UNKNOWN_TOPIC_OR_PARTITION
    finally:
        elsewhere.close()


async def strom_read(racked: Racked, topic: str, count: int, client_id: str,
                     client_rack: str) -> list[bytes]:
    """strom.client's group Consumer (assigned, from the beginning)."""
    consumer = StromConsumer(racked.cluster.bootstrap, client_id=client_id, group_id=client_id,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             max_wait_ms=100, client_rack=client_rack)
    await consumer.start()
    got: list[bytes] = []
    try:
        consumer.assign([StromTP(topic, 0)])
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got.extend(bytes(r.value) for r in await consumer.poll(0.2))
    finally:
        await consumer.close()
    return got


def test_strom_client_with_client_rack_reads_from_its_racks_follower(racked: Racked) -> None:
    leader, followers = create_topic(racked, "ffr-strom")
    values = [b"s%d" % i for i in range(1000)]
    produce(racked, "ffr-strom", values)
    near = followers[1]
    got = asyncio.run(strom_read(racked, "ffr-strom", len(values), "ffr-strom",
                                 RACK_NAMES[near]))
    assert got == values
    fetches = tapped_fetches(racked, "ffr-strom")
    assert {f.broker for f in fetches if f.record_bytes} == {near}
    assert any(f.preferred == (near,) for f in fetches if f.broker == leader)


def test_read_committed_on_a_follower_stops_at_its_lso_and_drops_aborted_records(
        racked: Racked) -> None:
    """The follower keeps the transactions' state from the batches and markers it
    replicates: its last stable offset holds at an open transaction, and a read_committed
    consumer of its rack gets the committed records only."""
    cluster = racked.cluster
    # The partition's leader is the transaction coordinator: main's produce path verifies a
    # transactional write (KIP-890) with the local coordinator only (see the report).
    finder = RawClient(cluster.brokers[0].bootstrap)
    try:
        wait_until(lambda: finder.call(ApiKey.FIND_COORDINATOR, 3, {
            "key": "ffr-t", "key_type": 1}).error_code == 0, timeout=30,
            what="a transaction coordinator")
        coordinator = finder.call(ApiKey.FIND_COORDINATOR, 3,
                                  {"key": "ffr-t", "key_type": 1}).node_id
    finally:
        finder.close()
    _leader, followers = create_topic(
        racked, "ffr-txn", assignment=[coordinator, *(b for b in range(3) if b != coordinator)])
    near = followers[0]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "ffr-t"})
    producer.init_transactions(30)
    for values, commit in (([b"c0", b"c1"], True), ([b"x0", b"x1"], False), ([b"c2"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce("ffr-txn", value, partition=0)
        producer.flush(30)  # written before the abort (which would drop unsent records)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("ffr-txn", b"open", partition=0)
    producer.flush(30)
    on_near = RawClient(cluster.brokers[near].bootstrap)
    on_leader = RawClient(cluster.brokers[coordinator].bootstrap)
    try:
        # the open transaction's record is committed (below the high watermark), not stable
        on_leader_now = raw_fetch(on_leader, "ffr-txn", 0, isolation=1)
        end = on_leader_now.high_watermark
        wait_until(lambda: raw_fetch(on_near, "ffr-txn", 0).high_watermark == end,
                   timeout=20, what="the follower's high watermark at the leader's")
        answer = raw_fetch(on_near, "ffr-txn", 0, isolation=1)
        assert answer.error_code == 0
        assert answer.last_stable_offset == on_leader_now.last_stable_offset == end - 1
        assert fetched(answer) == fetched(on_leader_now)
        assert fetched(answer) == (0, end - 1)  # c0 c1 M x0 x1 M c2 M, not the open record
        assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == \
            [(t.producer_id, t.first_offset) for t in on_leader_now.aborted_transactions]
        assert len(answer.aborted_transactions) == 1
        got = confluent_read(racked, "ffr-txn", 3, **{
            "client.id": "ffr-txn", "client.rack": RACK_NAMES[near],
            "isolation.level": "read_committed"})
        assert got == [b"c0", b"c1", b"c2"]
        assert {f.broker for f in tapped_fetches(racked, "ffr-txn") if f.record_bytes} == \
            {near}
    finally:
        on_near.close()
        on_leader.close()
        producer.abort_transaction(30)


def rack_reader(racked: Racked, client: str, topic: str, client_id: str, rack: str
                ) -> tuple[Callable[[], list[bytes]], Callable[[], None]]:
    """(poll, close) of a consumer of ``topic``-0 from offset 0 in ``rack``: librdkafka's
    or strom.client's."""
    if client == "librdkafka":
        consumer = Consumer({"bootstrap.servers": racked.cluster.bootstrap,
                             "client.id": client_id, "group.id": client_id,
                             "enable.auto.commit": False, "client.rack": rack,
                             "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(topic, 0, 0)])

        def poll() -> list[bytes]:
            msg = consumer.poll(0.2)
            return [msg.value()] if msg is not None and msg.error() is None else []

        return poll, consumer.close
    strom = SyncConsumer(racked.cluster.bootstrap, client_id=client_id, group_id=client_id,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         max_wait_ms=100, client_rack=rack)
    strom.assign([StromTP(topic, 0)])
    return (lambda: [bytes(r.value) for r in strom.poll(0.2)]), strom.close


@pytest.mark.parametrize("client", ["librdkafka", "strom"])
def test_when_the_follower_dies_the_consumer_goes_back_to_the_leader_and_loses_nothing(
        racked: Racked, client: str) -> None:
    cluster = racked.cluster
    topic = client_id = f"ffr-kill-{client}"
    leader, followers = create_topic(racked, topic)
    near = followers[0]
    produce(racked, topic, [b"k%d" % i for i in range(200)])
    poll, close = rack_reader(racked, client, topic, client_id, RACK_NAMES[near])
    got: list[bytes] = []

    def read_until(count: int, seconds: float = 40.0) -> None:
        deadline = time.monotonic() + seconds
        while len(got) < count and time.monotonic() < deadline:
            got.extend(poll())

    try:
        read_until(200)
        assert {f.broker for f in tapped_fetches(racked, client_id) if f.record_bytes} == \
            {near}
        seen = {broker: len(tap.of(ApiKey.FETCH)) for broker, tap in racked.taps.items()}
        cluster.brokers[near].kill()
        produce(racked, topic, [b"k%d" % i for i in range(200, 400)])
        read_until(400)
        assert got == [b"k%d" % i for i in range(400)]  # nothing lost, nothing twice
        after = tapped_fetches(racked, client_id, since=seen)
        assert {f.broker for f in after if f.record_bytes} == {leader}
    finally:
        close()
        cluster.brokers[near].start()
