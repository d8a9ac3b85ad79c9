"""SessionTracker: a follower session on the leader reads the partitions that changed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.broker.fetch_sessions import (
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    PartitionKey,
)
from strom.broker.follower_tracking import MAX_SWEEP_S, SessionTracker, sweep_interval
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.protocol.versions import ApiKey
from strom.replication.partition_watch import PartitionWatchers
from strom.testing.broker import EmbeddedBroker
from strom.testing.pytest_plugin import BrokerFactory
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, produce
from tests.broker.test_fetch_sessions import answered, fetch, parked_while, values
from tests.metadata.zk_helpers import wait_until

TOPIC_ID = bytes(range(16))
UNKNOWN_ID = bytes(16)


def resolve(name: str | None, topic_id: bytes | None) -> str | None:
    return "t" if topic_id == TOPIC_ID else None


def session_of(partitions: int, topic_id: bytes = TOPIC_ID) -> FetchSession:
    topic = fast.FetchTopic(None, topic_id, [])
    parts: dict[PartitionKey, CachedPartition] = {
        (topic_id, p): CachedPartition(topic, fast.FetchPartition(p, 0, 0, -1, 0, 1 << 20))
        for p in range(partitions)}
    return FetchSession(1, True, True, parts, 0.0, 0.0)


def request(named: tuple[int, ...] = (), forgotten: tuple[int, ...] = ()) -> fast.FetchRequest:
    topics = ([fast.FetchTopic(None, TOPIC_ID, [fast.FetchPartition(p, 0, 5, -1, 0, 1 << 20)
                                                for p in named])] if named else [])
    gone: list[tuple[str | None, bytes | None, list[int]]] = (
        [(None, TOPIC_ID, list(forgotten))] if forgotten else [])
    return fast.FetchRequest(1, 500, 1, 1 << 20, isolation_level=0, session_id=1,
                             session_epoch=1, topics=topics, forgotten=gone, rack_id="")


def settle_all(tracker: SessionTracker, keys: list[PartitionKey]) -> None:
    for key in keys:
        tracker.settled(key)


def test_after_the_first_full_round_only_named_and_changed_partitions_are_read() -> None:
    watchers = PartitionWatchers()
    tracker = SessionTracker(watchers, sweep_s=1.0)
    session = session_of(1000)
    first = tracker.begin_round(session, request(), resolve, now=0.0)
    assert len(first) == 1000 and len(watchers) == 1000  # a sweep: all, all watched
    settle_all(tracker, first)

    watchers.changed(TopicPartition("t", 7))         # an append to a quiet partition
    watchers.changed(TopicPartition("other", 7))     # not the session's
    keys = tracker.begin_round(session, request(named=(3,)), resolve, now=0.1)
    assert keys == [(TOPIC_ID, 7), (TOPIC_ID, 3)]
    # partition 3 was named (not settled this round); 7 had records: both read again
    assert tracker.begin_round(session, request(), resolve, now=0.2) == keys
    settle_all(tracker, keys)
    assert tracker.begin_round(session, request(), resolve, now=0.3) == []


def test_every_sweep_reads_everything_again() -> None:
    tracker = SessionTracker(PartitionWatchers(), sweep_s=1.0)
    session = session_of(50)
    settle_all(tracker, tracker.begin_round(session, request(), resolve, now=0.0))
    assert tracker.begin_round(session, request(), resolve, now=0.99) == []
    assert len(tracker.begin_round(session, request(), resolve, now=1.0)) == 50
    assert tracker.sweeps == 2


def test_a_change_wakes_the_parked_fetch() -> None:
    watchers = PartitionWatchers()
    tracker = SessionTracker(watchers, sweep_s=1.0)
    session = session_of(3)
    settle_all(tracker, tracker.begin_round(session, request(), resolve, now=0.0))
    woken: list[list[object]] = []
    tracker.waker = lambda: woken.append(list(tracker.dirty))
    watchers.changed(TopicPartition("t", 2))
    assert woken == [[(TOPIC_ID, 2)]]


def test_forgotten_partitions_and_a_closed_session_are_no_longer_watched() -> None:
    watchers = PartitionWatchers()
    cache = FetchSessionCache(10, 60.0)
    session = session_of(4)
    cache.sessions[session.id] = session
    tracker = session.tracker = SessionTracker(watchers, sweep_s=1.0)
    tracker.begin_round(session, request(), resolve, now=0.0)
    req = request(forgotten=(0, 1))
    session.update(req)
    tracker.begin_round(session, req, resolve, now=0.1)
    assert watchers.watched(TopicPartition("t", 0)) == 0
    assert watchers.watched(TopicPartition("t", 2)) == 1
    cache.remove(session.id)
    assert len(watchers) == 0 and session.tracker is None


def test_a_partition_of_an_unknown_topic_id_is_read_every_round() -> None:
    watchers = PartitionWatchers()
    tracker = SessionTracker(watchers, sweep_s=1.0)
    session = session_of(2, topic_id=UNKNOWN_ID)
    keys = tracker.begin_round(session, request(), resolve, now=0.0)
    assert len(keys) == 2 and len(watchers) == 0
    assert tracker.begin_round(session, request(), resolve, now=0.1) == keys


def test_the_sweep_is_a_tenth_of_the_lag_time_at_most_a_second() -> None:
    assert sweep_interval(30_000) == MAX_SWEEP_S
    assert sweep_interval(1_000) == 0.1


# -- on a real leader -----------------------------------------------------------------------

@pytest.fixture
def leader(zookeeper_connect: str, strom_broker_factory: BrokerFactory
           ) -> Iterator[tuple[EmbeddedBroker, RawClient]]:
    """Broker 0 leading topic ``trk`` (3 partitions, replicas [0, 1]) after broker 1 stopped:
    a raw client fetches as follower 1."""
    settings = {"zookeeper.connect": zookeeper_connect, "zookeeper.session.timeout.ms": 30000,
                "controlled.shutdown.retry.backoff.ms": 100}
    brokers = [strom_broker_factory({**settings, "node.id": i}) for i in range(2)]
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, what="both registered")
    topic = NewTopic("trk", num_partitions=3, replica_assignment=[[0, 1]] * 3)
    admin.create_topics([topic])["trk"].result(15)
    brokers[1].stop()
    client = RawClient(brokers[0].bootstrap, timeout=60)
    wait_until(lambda: all(e == 0 for e, _ in (produce(client, "trk", batch([b"x"]), p, acks=1)
                                              for p in range(3))), what="broker 0 leads")
    yield brokers[0], client
    client.close()


def follower_fetch(client: RawClient, session_id: int, epoch: int, named: dict[int, int],
                   max_wait_ms: int = 0) -> Any:
    return fetch(client, session_id, epoch, {"trk": list(named.items())} if named else {},
                 max_wait_ms=max_wait_ms, replica_id=1)


def test_a_quiet_partition_of_a_parked_follower_session_wakes_it_with_its_records(
        leader: tuple[EmbeddedBroker, RawClient]) -> None:
    broker, client = leader
    session = follower_fetch(client, 0, 0, {0: 1, 1: 1, 2: 1}).session_id
    assert session != 0
    assert follower_fetch(client, session, 1, {}).responses == []  # all settled

    def append() -> None:
        producer = RawClient(broker.bootstrap)
        assert produce(producer, "trk", batch([b"wake"]), partition=2, acks=1) == (0, 1)
        producer.close()

    result = parked_while(
        lambda: follower_fetch(client, session, 2, {}, max_wait_ms=60_000), append)
    assert result["elapsed"] < 30  # woken by the append, not the 60 s wait
    parts = answered(result["resp"])
    assert list(parts) == [("trk", 2)] and values(parts[("trk", 2)]) == [b"wake"]


def test_a_log_start_moved_by_delete_records_reaches_a_follower_session(
        leader: tuple[EmbeddedBroker, RawClient]) -> None:
    _broker, client = leader
    for _ in range(3):
        produce(client, "trk", batch([b"a", b"b"]), partition=0, acks=1)
    session = follower_fetch(client, 0, 0, {0: 7, 1: 1, 2: 1}).session_id
    assert follower_fetch(client, session, 1, {}).responses == []
    truncated = client.call(ApiKey.DELETE_RECORDS, 2, {"topics": [
        {"name": "trk", "partitions": [{"partition_index": 0, "offset": 5}]}],
        "timeout_ms": 1000})
    assert truncated.topics[0].partitions[0].low_watermark == 5
    epoch, seen = 2, None
    deadline = time.monotonic() + 20
    while seen is None and time.monotonic() < deadline:
        parts = answered(follower_fetch(client, session, epoch, {}, max_wait_ms=200))
        epoch += 1
        if ("trk", 0) in parts:
            seen = parts[("trk", 0)].log_start_offset
    assert seen == 5  # by the next full read of the session at the latest
