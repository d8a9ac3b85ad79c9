"""Group APIs at the wire level (raw frames, exact error codes) against a real broker."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kafka.protocol.consumer import ConsumerProtocolSubscription

from strom.common.errors import ErrorCode
from strom.protocol import api
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.versions import SUPPORTED, ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

E = ErrorCode


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({"group.initial.rebalance.delay.ms": 0}) as b:
        yield b


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def subscription(*topics: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None)
                 .encode(version=0))


def test_group_api_ranges_follow_kafka_4_minimums() -> None:
    # JoinGroup v0 / v1 came back in Kafka 4.0.1 / 4.1 (KAFKA-19444).
    assert SUPPORTED[ApiKey.JOIN_GROUP] == (0, 9)
    assert SUPPORTED[ApiKey.OFFSET_COMMIT] == (2, 10)
    assert SUPPORTED[ApiKey.OFFSET_FETCH] == (1, 10)


def test_find_coordinator_batched_and_transaction_keys(client: RawClient,
                                                       broker: EmbeddedBroker) -> None:
    r = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [
        ("a", 0, broker.port), ("b", 0, broker.port)]
    r = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [("tx", 0, broker.port)]
    r = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [""]})
    assert r.coordinators[0].error_code == E.INVALID_REQUEST  # type: ignore[attr-defined]
    r = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 2, "coordinator_keys": ["x"]})
    assert r.coordinators[0].error_code == E.INVALID_REQUEST  # type: ignore[attr-defined]
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "__transaction_state"}],
                                           "allow_auto_topic_creation": False})
    assert md.topics[0].is_internal and len(md.topics[0].partitions) == 50
    r = client.call(ApiKey.FIND_COORDINATOR, 0, {"key": "a"})
    assert r.error_code == 0 and r.port == broker.port
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "__consumer_offsets"}],
                                           "allow_auto_topic_creation": False})
    assert md.topics[0].is_internal and len(md.topics[0].partitions) == 50


def join(client: RawClient, group: str, member_id: str = "", topics: tuple[str, ...] = ("t",),
         version: int = 9) -> object:
    return client.call(ApiKey.JOIN_GROUP, version, {
        "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(*topics)}]})


def test_join_group_v0_and_v1_join_sync_and_heartbeat(client: RawClient,
                                                       new_topic: Callable[..., str]) -> None:
    # v0-3 hand out a member id at once (no MEMBER_ID_REQUIRED, which is v4+), and v0 / v1
    # answers carry no throttle time.
    topic = new_topic()
    for version in (0, 1):
        group = f"old-join-v{version}-{topic}"
        raw = client.call_raw(ApiKey.JOIN_GROUP, version, api.request(ApiKey.JOIN_GROUP, version, {
            "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topic)}]}))
        assert raw[:6] == struct.pack(">hi", 0, 1)  # error_code, generation_id: no throttle
        joined = api.decode_response(ApiKey.JOIN_GROUP, version, raw)
        assert joined.error_code == 0 and joined.generation_id == 1  # type: ignore[attr-defined]
        member = joined.member_id  # type: ignore[attr-defined]
        assert member and joined.leader == member  # type: ignore[attr-defined]
        assert [m.member_id for m in joined.members] == [member]  # type: ignore[attr-defined]
        synced = client.call(ApiKey.SYNC_GROUP, 0, {
            "group_id": group, "generation_id": 1, "member_id": member,
            "assignments": [{"member_id": member, "assignment": b"\x00\x02"}]})
        assert synced.error_code == 0 and synced.assignment == b"\x00\x02"
        hb = client.call(ApiKey.HEARTBEAT, 0, {"group_id": group, "generation_id": 1,
                                               "member_id": member})
        assert hb.error_code == 0


def test_join_group_v0_waits_a_session_timeout_for_members_to_rejoin(
        broker: EmbeddedBroker, new_topic: Callable[..., str]) -> None:
    # JoinGroup v0 has no rebalance timeout: the session timeout stands for it (as on Kafka),
    # so a second member's join waits for the first to rejoin instead of dropping it.
    topic = new_topic()
    group = f"old-join-rebalance-{topic}"
    first, second = RawClient(broker.bootstrap), RawClient(broker.bootstrap)
    try:
        a = join(first, group, topics=(topic,), version=0)
        assert a.error_code == 0 and a.generation_id == 1  # type: ignore[attr-defined]
        synced = first.call(ApiKey.SYNC_GROUP, 0, {
            "group_id": group, "generation_id": 1, "member_id": a.member_id,  # type: ignore[attr-defined]
            "assignments": []})
        assert synced.error_code == 0
        # The second member's JoinGroup is parked until the first rejoins.
        second.send_frame(second.header(ApiKey.JOIN_GROUP, 0) + api.request(
            ApiKey.JOIN_GROUP, 0, {
                "group_id": group, "session_timeout_ms": 10000, "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(topic)}]}))
        time.sleep(0.5)
        hb = first.call(ApiKey.HEARTBEAT, 0, {"group_id": group, "generation_id": 1,
                                              "member_id": a.member_id})  # type: ignore[attr-defined]
        assert hb.error_code == E.REBALANCE_IN_PROGRESS  # type: ignore[attr-defined]
        again = join(first, group, a.member_id, topics=(topic,), version=0)  # type: ignore[attr-defined]
        frame = second.read_frame()
        b = api.decode_response(ApiKey.JOIN_GROUP, 0, frame[4:])
        assert again.error_code == 0 and b.error_code == 0  # type: ignore[attr-defined]
        assert again.generation_id == b.generation_id == 2  # type: ignore[attr-defined]
        assert {m.member_id for m in again.members} == {  # type: ignore[attr-defined]
            a.member_id, b.member_id}  # type: ignore[attr-defined]
    finally:
        first.close()
        second.close()


def test_offset_commit_and_fetch_v10_name_topics_by_id(client: RawClient,
                                                       new_topic: Callable[..., str]) -> None:
    # v10 (KIP-848) names topics by id only; an id no topic has is UNKNOWN_TOPIC_ID, an
    # unknown partition of a known one UNKNOWN_TOPIC_OR_PARTITION — as Kafka 4.4 answers the
    # same requests. The offsets are the ones v9 reads by name.
    ta, tb = new_topic(partitions=2), new_topic(partitions=2)
    group = f"v10-{ta}"
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": ta}, {"name": tb}],
                                           "allow_auto_topic_creation": False})
    ids = {t.name: t.topic_id for t in md.topics}
    unknown = uuid.UUID(int=77)
    committed = client.call(ApiKey.OFFSET_COMMIT, 10, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [
            {"topic_id": ids[ta], "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"},
                {"partition_index": 7, "committed_offset": 1, "committed_metadata": None}]},
            {"topic_id": unknown, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}]}]})
    assert [(t.topic_id, sorted((p.partition_index, p.error_code) for p in t.partitions))
            for t in committed.topics] == [
        (ids[ta], [(0, 0), (7, E.UNKNOWN_TOPIC_OR_PARTITION)]),  # type: ignore[attr-defined]
        (unknown, [(0, E.UNKNOWN_TOPIC_ID)])]  # type: ignore[attr-defined]
    by_name = client.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": tb, "partitions": [
            {"partition_index": 1, "committed_offset": 9, "committed_metadata": "x"}]}]})
    assert by_name.topics[0].partitions[0].error_code == 0

    def fetch(version: int, topics: object) -> dict[object, list[tuple[int, int, str, int]]]:
        answer = client.call(ApiKey.OFFSET_FETCH, version, {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
            "require_stable": False})
        [g] = answer.groups
        assert g.error_code == 0
        return {t.topic_id if version >= 10 else t.name: sorted(
            (p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for p in t.partitions) for t in g.topics}

    assert fetch(10, None) == {ids[ta]: [(0, 5, "m", 0)], ids[tb]: [(1, 9, "x", 0)]}
    assert fetch(10, [{"topic_id": ids[ta], "partition_indexes": [0, 1]},
                      {"topic_id": unknown, "partition_indexes": [0]}]) == {
        ids[ta]: [(0, 5, "m", 0), (1, -1, "", 0)],
        unknown: [(0, -1, "", E.UNKNOWN_TOPIC_ID)]}  # type: ignore[attr-defined]
    assert fetch(9, None) == {ta: [(0, 5, "m", 0)], tb: [(1, 9, "x", 0)]}
    zero = client.call(ApiKey.OFFSET_COMMIT, 10, {  # the zero id decodes as null
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"topic_id": uuid.UUID(int=0), "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    assert [p.error_code for p in zero.topics[0].partitions] == [
        E.UNKNOWN_TOPIC_ID]  # type: ignore[attr-defined]


def test_join_sync_commit_fetch_describe_list_delete(client: RawClient,
                                                     new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    group = f"wire-{topic}"
    first = join(client, group, topics=(topic,))
    assert first.error_code == E.MEMBER_ID_REQUIRED  # type: ignore[attr-defined]
    joined = join(client, group, first.member_id, topics=(topic,))  # type: ignore[attr-defined]
    assert joined.error_code == 0 and joined.generation_id == 1
    assert joined.protocol_type == "consumer" and joined.leader == joined.member_id
    member = joined.member_id
    synced = client.call(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": 1, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"\x00\x01"}]})
    assert synced.error_code == 0 and synced.assignment == b"\x00\x01"
    bad = client.call(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": 1, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "roundrobin", "assignments": []})
    assert bad.error_code == E.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[attr-defined]
    commit = client.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": 1, "member_id": member,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 0,
             "committed_metadata": "m"},
            {"partition_index": 1, "committed_offset": 6, "committed_metadata": "x" * 5000},
            {"partition_index": 9, "committed_offset": 6, "committed_metadata": None}]}]})
    assert [p.error_code for p in commit.topics[0].partitions] == [
        0, E.OFFSET_METADATA_TOO_LARGE, E.UNKNOWN_TOPIC_OR_PARTITION]  # type: ignore[attr-defined]
    stale = client.call(ApiKey.OFFSET_COMMIT, 2, {
        "group_id": group, "generation_id_or_member_epoch": 0, "member_id": member,
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0,
                                                   "committed_offset": 1}]}]})
    assert stale.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION  # type: ignore[attr-defined]
    fetched = client.call(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": None}], "require_stable": True})
    [g] = fetched.groups
    assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
            for t in g.topics for p in t.partitions] == [(topic, 0, 5, "m")]
    old = client.call(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0, 1]}]})
    assert [p.committed_offset for p in old.topics[0].partitions] == [5, -1]
    described = client.call(ApiKey.DESCRIBE_GROUPS, 5, {
        "groups": [group, "missing"], "include_authorized_operations": True})
    live, missing = described.groups
    assert live.group_state == "Stable" and live.protocol_data == "range"
    assert live.members[0].member_assignment == b"\x00\x01"
    assert live.authorized_operations == {3, 6, 8}
    assert missing.group_state == "Dead" and missing.error_code == 0
    listed = client.call(ApiKey.LIST_GROUPS, 5, {"states_filter": ["Stable"],
                                                 "types_filter": []})
    assert (group, "consumer", "Stable") in {
        (g.group_id, g.protocol_type, g.group_state) for g in listed.groups}
    deleted = client.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]})
    assert deleted.topics[0].partitions[0].error_code == E.GROUP_SUBSCRIBED_TO_TOPIC  # type: ignore[attr-defined]
    busy = client.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group, "nope"]})
    assert [r.error_code for r in busy.results] == [
        E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND]  # type: ignore[attr-defined]
    hb = client.call(ApiKey.HEARTBEAT, 4, {"group_id": group, "generation_id": 1,
                                           "member_id": member, "group_instance_id": None})
    assert hb.error_code == 0
    left = client.call(ApiKey.LEAVE_GROUP, 5, {"group_id": group, "members": [
        {"member_id": member, "group_instance_id": None, "reason": "bye"}]})
    assert left.error_code == 0 and left.members[0].error_code == 0
    deleted = client.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]})
    assert deleted.error_code == 0 and deleted.topics[0].partitions[0].error_code == 0
    gone = client.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
    assert gone.results[0].error_code == 0
    again = client.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})
    assert again.groups[0].group_state == "Dead"


def test_clients_cannot_produce_to_internal_topics(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g-internal", "key_type": 0})
    builder = BatchBuilder()
    builder.append(0, b"k", b"v")
    resp = client.call(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": 1, "timeout_ms": 1000,
        "topic_data": [{"name": "__consumer_offsets", "partition_data": [
            {"index": 0, "records": builder.build()}]}]})
    error = resp.responses[0].partition_responses[0].error_code
    assert error == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    client.close()
