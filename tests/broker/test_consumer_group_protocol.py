"""KIP-848 consumer groups end to end: librdkafka's ``group.protocol=consumer`` against a real
broker (joining, sharing, leaving, a regex subscription, a broker restart), and the error
paths of ConsumerGroupHeartbeat / ConsumerGroupDescribe / OffsetCommit over raw requests."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.common.errors import ErrorCode
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import create

CONFIG = {"offsets.topic.num.partitions": 3, "group.consumer.heartbeat.interval.ms": 300,
          "group.consumer.session.timeout.ms": 6000}


def consumer(bootstrap: str, group: str, topics: list[str], **extra: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **extra})
    c.subscribe(topics)
    return c


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def owned(c: Consumer) -> list[int]:
    return sorted(tp.partition for tp in c.assignment())


def poll_until(consumers: list[Consumer], done: Any, timeout: float = 30) -> list[Any]:
    """Poll every consumer until ``done()``; the records received (value, consumer index)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        for index, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                got.append((msg.value(), index, msg.partition(), msg.offset()))
                c.commit(msg, asynchronous=False)
    assert done(), "timed out"
    return got


def test_members_share_the_partitions_and_take_them_over_when_one_leaves() -> None:
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 6)
        raw.close()
        produce(broker.bootstrap, "t", 60, 6)
        first = consumer(broker.bootstrap, "g", ["t"])
        poll_until([first], lambda: owned(first) == list(range(6)))
        second = consumer(broker.bootstrap, "g", ["t"])
        poll_until([first, second], lambda: len(owned(first)) == 3 and len(owned(second)) == 3)
        assert sorted(owned(first) + owned(second)) == list(range(6))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups(["g"])["g"].result(30)
        assert described.type.name == "CONSUMER" and described.state.name == "STABLE"
        assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [3, 3]
        listed = admin.list_consumer_groups().result(30).valid
        assert [(g.group_id, g.type.name) for g in listed] == [("g", "CONSUMER")]
        second.close()  # leaves with epoch -1: the first member takes its partitions back
        produce(broker.bootstrap, "t", 60, 6)
        tps = [TopicPartition("t", p) for p in range(6)]
        poll_until([first], lambda: owned(first) == list(range(6)) and sum(
            tp.offset for tp in first.committed(tps, timeout=10)) == 120)
        first.close()


def test_a_regex_subscription_follows_new_topics() -> None:
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "orders-eu", 2)
        create(raw, "other", 1)
        c = consumer(broker.bootstrap, "rg", ["^orders-.*"])
        poll_until([c], lambda: {tp.topic for tp in c.assignment()} == {"orders-eu"})
        create(raw, "orders-us", 2)  # a new match joins the group's subscription
        poll_until([c], lambda: {tp.topic for tp in c.assignment()} == {"orders-eu",
                                                                          "orders-us"})
        raw.close()
        c.close()


def test_the_group_survives_a_coordinator_restart(tmp_path: Path) -> None:
    """The group's records are replayed: the member keeps its id and epoch and its committed
    offsets, and goes on consuming where it stopped."""
    with EmbeddedBroker(config=CONFIG, data_dir=tmp_path) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 2)
        raw.close()
        produce(broker.bootstrap, "t", 10, 2)
        join = heartbeat(broker.bootstrap, "g", "m1", 0, names=["t"], owned=[])
        assert join.error_code == 0 and join.member_epoch > 0
        epoch = join.member_epoch
        port = broker.port
    with EmbeddedBroker(config=CONFIG, data_dir=tmp_path, port=port) as broker:
        again = heartbeat_until_loaded(broker.bootstrap, "g", "m1", epoch)
        assert (again.error_code, again.member_epoch) == (0, epoch)
        client = RawClient(broker.bootstrap)
        described = client.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                                {"group_ids": ["g"], "include_authorized_operations": False})
        group = described.groups[0]
        assert (group.error_code, group.group_state, [m.member_id for m in group.members]) == (
            0, "Stable", ["m1"])
        assert sorted(p for tp in group.members[0].assignment.topic_partitions
                      for p in tp.partitions) == [0, 1]
        client.close()


# -- raw error paths -----------------------------------------------------------------------
def heartbeat(bootstrap: str, group: str, member: str, epoch: int, *, version: int = 1,
              names: list[str] | None = None, owned: list[Any] | None = None,
              **fields: Any) -> Any:
    client = RawClient(bootstrap)
    try:  # FindCoordinator creates __consumer_offsets, as on Kafka
        client.call(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        body = {"group_id": group, "member_id": member, "member_epoch": epoch,
                "rebalance_timeout_ms": 30000 if epoch == 0 else -1,
                "subscribed_topic_names": names, "topic_partitions": owned, **fields}
        deadline = time.monotonic() + 20
        while True:
            resp = client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body)
            if resp.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                       ErrorCode.NOT_COORDINATOR) or time.monotonic() > deadline:
                return resp
            time.sleep(0.2)
    finally:
        client.close()


def heartbeat_until_loaded(bootstrap: str, group: str, member: str, epoch: int) -> Any:
    return heartbeat(bootstrap, group, member, epoch)


def test_heartbeat_errors_are_kafkas() -> None:
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 3)
        raw.close()
        b = broker.bootstrap
        ok = heartbeat(b, "g", "m1", 0, names=["t"], owned=[])
        assert ok.error_code == 0 and ok.member_id == "m1" and ok.heartbeat_interval_ms == 300
        assert sorted(p for tp in ok.assignment.topic_partitions for p in tp.partitions) == [
            0, 1, 2]
        epoch = ok.member_epoch
        steady = heartbeat(b, "g", "m1", epoch)
        assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, epoch, None)
        cases = [
            (heartbeat(b, "g", "", 0, names=["t"], owned=[]), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", 0, names=["t"], owned=[], rebalance_timeout_ms=-1),
             ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", 0, owned=[]), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", 0, names=["t"], owned=None), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", -3), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", -2), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "", "m2", 0, names=["t"], owned=[]), ErrorCode.INVALID_REQUEST),
            (heartbeat(b, "g", "m2", 0, names=["t"], owned=[], server_assignor="nope"),
             ErrorCode.UNSUPPORTED_ASSIGNOR),
            (heartbeat(b, "g", "m2", 0, owned=[], subscribed_topic_regex="("),
             ErrorCode.INVALID_REGULAR_EXPRESSION),
            (heartbeat(b, "g", "zz", 5), ErrorCode.UNKNOWN_MEMBER_ID),
            (heartbeat(b, "no-such-group", "zz", 5), ErrorCode.GROUP_ID_NOT_FOUND),
            (heartbeat(b, "g", "zz", -2, instance_id="i9"), ErrorCode.UNKNOWN_MEMBER_ID),
            (heartbeat(b, "g", "m1", epoch + 5), ErrorCode.FENCED_MEMBER_EPOCH),
        ]
        assert [(r.error_code, bool(r.error_message)) for r, _ in cases] == [
            (code, True) for _, code in cases]
        # Kafka 4.4's answers to an error: no member id, epoch 0, no interval (measured)
        assert {(r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment)
                for r, _ in cases} == {(None, 0, 0, None)}
        assert cases[4][0].error_message == "MemberEpoch is invalid."
        assert cases[10][0].error_message == "Consumer group no-such-group not found."
        v0 = heartbeat(b, "g", "", 0, version=0, names=["t"], owned=[])
        assert v0.error_code == 0 and v0.member_id  # v0: the coordinator names the member
        client = RawClient(b)
        stale = client.call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": "g", "generation_id_or_member_epoch": epoch + 7, "member_id": "m1",
            "group_instance_id": None, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                              "committed_leader_epoch": -1,
                                              "committed_metadata": ""}]}]})
        assert stale.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
        # the previous epoch, for a partition assigned since then: accepted (KIP-1251)
        second = heartbeat(b, "g", "m3", 0, names=["t"], owned=[])
        assert second.error_code == 0
        moved = heartbeat(b, "g", "m1", epoch, owned=[{"topic_id": ok.assignment.
                                                          topic_partitions[0].topic_id,
                                                          "partitions": [0, 1, 2]}])
        assert moved.error_code == 0
        kept = sorted(p for tp in (moved.assignment.topic_partitions if moved.assignment
                                   else ok.assignment.topic_partitions) for p in tp.partitions)
        late = client.call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": "m1",
            "group_instance_id": None, "topics": [
                {"name": "t", "partitions": [{"partition_index": kept[0],
                                              "committed_offset": 1,
                                              "committed_leader_epoch": -1,
                                              "committed_metadata": ""}]}]})
        assert late.topics[0].partitions[0].error_code == 0
        unknown = client.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {
            "group_ids": ["nope", ""], "include_authorized_operations": False})
        assert [g.error_code for g in unknown.groups] == [ErrorCode.GROUP_ID_NOT_FOUND,
                                                          ErrorCode.INVALID_GROUP_ID]
        client.close()
        left = heartbeat(b, "g", "m1", -1)
        assert (left.error_code, left.member_id, left.member_epoch,
                left.heartbeat_interval_ms) == (0, "m1", -1, 0)


def test_a_classic_group_is_not_a_consumer_group() -> None:
    with EmbeddedBroker(config={**CONFIG, "group.initial.rebalance.delay.ms": 0}) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 1)
        raw.close()
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cg",
                            "auto.offset.reset": "earliest"})
        classic.subscribe(["t"])
        deadline = time.monotonic() + 20
        while not classic.assignment() and time.monotonic() < deadline:
            classic.poll(0.2)
        refused = heartbeat(broker.bootstrap, "cg", str(uuid.uuid4()), 0, names=["t"],
                            owned=[])
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        classic.close()


def test_offset_fetch_checks_a_members_epoch() -> None:
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 1)
        joined = heartbeat(broker.bootstrap, "g", "m1", 0, names=["t"], owned=[])
        assert joined.error_code == 0

        def fetch(member: str, epoch: int) -> int:
            answer = raw.call(ApiKey.OFFSET_FETCH, 9, {"groups": [{
                "group_id": "g", "member_id": member, "member_epoch": epoch,
                "topics": None}], "require_stable": False})
            return int(answer.groups[0].error_code)

        assert fetch("m1", joined.member_epoch) == 0
        assert fetch("", -1) == 0  # an admin's fetch
        assert fetch("m1", joined.member_epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch("zz", joined.member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
        raw.close()


def test_a_static_member_keeps_its_partitions_across_a_restart() -> None:
    """librdkafka static members (group.instance.id): closing leaves with epoch -2, so the
    partitions wait for the member's return instead of moving; the new incarnation (a new
    member id) gets the same partitions back, and the group epoch does not move."""
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 4)
        first = consumer(broker.bootstrap, "sg", ["t"], **{"group.instance.id": "A"})
        second = consumer(broker.bootstrap, "sg", ["t"], **{"group.instance.id": "B"})
        poll_until([first, second], lambda: len(owned(first)) == len(owned(second)) == 2)
        before = owned(second)

        def described() -> Any:
            return raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {
                "group_ids": ["sg"], "include_authorized_operations": False}).groups[0]

        epoch = described().group_epoch
        second.close()
        time.sleep(1)  # a few of the first member's heartbeats: nothing moves to it
        poll_until([first], lambda: True, timeout=1)
        assert len(owned(first)) == 2
        left = {m.instance_id: m.member_epoch for m in described().members}
        assert left["B"] == -2
        again = consumer(broker.bootstrap, "sg", ["t"], **{"group.instance.id": "B"})
        poll_until([first, again], lambda: owned(again) == before)
        assert described().group_epoch == epoch
        again.close()
        first.close()
        raw.close()


def test_an_empty_consumer_group_is_deleted_a_live_one_is_not() -> None:
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "t", 1)
        joined = heartbeat(broker.bootstrap, "dg", "m1", 0, names=["t"], owned=[])
        assert joined.error_code == 0

        def delete() -> int:
            answer = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["dg"]})
            return int(answer.results[0].error_code)

        def describe() -> Any:
            return raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {
                "group_ids": ["dg"], "include_authorized_operations": True}).groups[0]

        assert 8 in describe().authorized_operations  # asked for: DESCRIBE among them
        assert delete() == ErrorCode.NON_EMPTY_GROUP
        assert heartbeat(broker.bootstrap, "dg", "m1", -1).error_code == 0
        assert describe().group_state == "Empty"
        assert delete() == 0
        assert describe().error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert delete() == ErrorCode.GROUP_ID_NOT_FOUND
        again = heartbeat(broker.bootstrap, "dg", "m2", 0, names=["t"], owned=[])
        assert again.error_code == 0 and again.member_epoch == 1  # a new group
        raw.close()


def test_the_first_configured_assignor_is_the_default() -> None:
    with EmbeddedBroker(config={**CONFIG, "group.consumer.assignors": "range,uniform"}) as b:
        raw = RawClient(b.bootstrap)
        create(raw, "t", 4)
        for member in ("m1", "m2"):
            assert heartbeat(b.bootstrap, "rg", member, 0, names=["t"], owned=[]
                             ).error_code == 0
        group = raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {
            "group_ids": ["rg"], "include_authorized_operations": False}).groups[0]
        assert group.assignor_name == "range"
        targets = {m.member_id: sorted(p for tp in m.target_assignment.topic_partitions
                                       for p in tp.partitions) for m in group.members}
        assert targets == {"m1": [0, 1], "m2": [2, 3]}  # contiguous ranges by member id
        raw.close()


def test_subscription_patterns_are_re2_as_in_kafka() -> None:
    """Kafka compiles SubscribedTopicRegex with RE2/J: no backreferences (INVALID_REGULAR_
    EXPRESSION), and matching in linear time — ``(a+)+$`` against a topic of 40 a's and a b
    is answered at once (Python's backtracking ``re`` would take hours, the broker stalled)."""
    with EmbeddedBroker(config=CONFIG) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "a" * 40 + "b", 1)
        create(raw, "orders-eu", 1)
        bad = heartbeat(broker.bootstrap, "rx", "m1", 0, owned=[],
                        subscribed_topic_regex=r"(a)\1")
        assert bad.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        slow = heartbeat(broker.bootstrap, "rx", "m1", 0, owned=[],
                         subscribed_topic_regex=r"(a+)+$")
        assert slow.error_code == 0 and slow.assignment.topic_partitions == []
        orders = heartbeat(broker.bootstrap, "rx2", "m2", 0, owned=[],
                           subscribed_topic_regex=r"orders-.*")
        assert [tp.partitions for tp in orders.assignment.topic_partitions] == [[0]]
        raw.close()
