"""The admin client's ElectLeaders (43) v0-2, AlterPartitionReassignments (45) v0 and
ListPartitionReassignments (46) v0: golden bytes derived by hand from Kafka's JSON schemas,
then the calls against the fake broker (decoding with kafka-python's classes), including
the NOT_CONTROLLER retry and per-partition errors."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest

from strom.client.partition_admin import (
    ElectionType,
    PartitionReassignment,
    alter_reassignments_request,
    list_reassignments_request,
    list_reassignments_result,
)
from strom.client.sync import LoopThread, SyncAdminClient
from strom.common.errors import (
    ClusterAuthorizationFailedError,
    UnsupportedVersionError,
    error_class,
)
from strom.common.types import TopicPartition
from strom.protocol import api
from strom.protocol.versions import SUPPORTED
from tests.client.fake_broker import FakeBroker

PARTITION_APIS = {43: (0, 2), 45: (0, 0), 46: (0, 0)}
ElectionNotNeeded = error_class("ELECTION_NOT_NEEDED")
NoReassignmentInProgress = error_class("NO_REASSIGNMENT_IN_PROGRESS")


def i32(*values: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in values)


# -- golden bytes ----------------------------------------------------------------------------
def test_elect_leaders_v1_and_v2_bytes() -> None:
    fields = {"election_type": 1, "topic_partitions": [{"topic": "t", "partitions": [0, 2]}],
              "timeout_ms": 5000}
    # v1: int8 type, int32-counted array, int16-length string, int32 array, int32 timeout
    assert api.request(43, 1, fields) == (
        b"\x01" + i32(1) + b"\x00\x01t" + i32(2, 0, 2) + i32(5000))
    # v2 (flexible): compact arrays / strings (length + 1 as varint) and empty tag sections
    assert api.request(43, 2, fields) == (
        b"\x01" + b"\x02" + b"\x02t" + b"\x03" + i32(0, 2) + b"\x00" + i32(5000) + b"\x00")


def test_elect_leaders_v0_all_partitions_bytes() -> None:
    # v0: no election type; a null array (-1) asks for every partition
    assert api.request(43, 0, {"topic_partitions": None, "timeout_ms": 100}) == (
        i32(-1) + i32(100))


def test_alter_and_list_reassignments_v0_bytes() -> None:
    fields = alter_reassignments_request(
        {TopicPartition("t", 1): None, TopicPartition("t", 0): [1, 2, 0]}, 3000)
    assert api.request(45, 0, fields) == (
        i32(3000) + b"\x02" + b"\x02t" + b"\x03"
        + i32(0) + b"\x04" + i32(1, 2, 0) + b"\x00"   # partition 0 → [1, 2, 0]
        + i32(1) + b"\x00" + b"\x00"                  # partition 1: null replicas = cancel
        + b"\x00" + b"\x00")
    assert api.request(46, 0, list_reassignments_request(None, 3000)) == (
        i32(3000) + b"\x00" + b"\x00")  # null topics: every ongoing reassignment
    listed = list_reassignments_request([TopicPartition("t", 2), TopicPartition("t", 0)], 1)
    assert api.request(46, 0, listed) == (
        i32(1) + b"\x02" + b"\x02t" + b"\x03" + i32(0, 2) + b"\x00" + b"\x00")


def test_list_reassignments_response_bytes() -> None:
    body = (i32(0) + b"\x00\x00" + b"\x00"          # throttle, error 0, null message
            + b"\x02" + b"\x02t" + b"\x02"          # one topic "t", one partition
            + i32(0) + b"\x04" + i32(1, 2, 3) + b"\x02" + i32(3) + b"\x02" + i32(1) + b"\x00"
            + b"\x00" + b"\x00")
    response = api.decode_response(46, 0, body)
    assert list_reassignments_result(response) == {
        TopicPartition("t", 0): PartitionReassignment((1, 2, 3), (3,), (1,))}


# -- against the fake broker -----------------------------------------------------------------
@pytest.fixture
def broker() -> Iterator[tuple[FakeBroker, LoopThread]]:
    loop = LoopThread("fake-broker")
    fake = loop.run(FakeBroker({**SUPPORTED, **PARTITION_APIS}).start())
    try:
        yield fake, loop
    finally:
        loop.run(fake.stop())
        loop.stop()


def answer(*responses: dict[str, Any]) -> Any:
    queue = list(responses)

    async def hook(_key: int, _version: int, _request: Any) -> dict[str, Any]:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return hook


def sent(fake: FakeBroker, key: int) -> list[tuple[int, Any]]:
    return [(version, request) for k, version, request in fake.requests if k == key]


def test_elect_leaders_retries_not_controller_and_reports_each_partition(
        broker: tuple[FakeBroker, LoopThread]) -> None:
    fake, _loop = broker
    result = {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "t", "partition_result": [
            {"partition_id": 0, "error_code": 0, "error_message": None},
            {"partition_id": 1, "error_code": 84, "error_message": "Leader is already the "
                                                                  "preferred replica"}]}]}
    fake.hooks[43] = answer({"throttle_time_ms": 0, "error_code": 41,
                             "replica_election_results": []}, result)
    with SyncAdminClient(fake.bootstrap) as admin:
        outcome = admin.elect_leaders(ElectionType.UNCLEAN,
                                      [TopicPartition("t", 1), TopicPartition("t", 0)])
    assert outcome[TopicPartition("t", 0)] is None
    error = outcome[TopicPartition("t", 1)]
    assert isinstance(error, ElectionNotNeeded) and "already the preferred" in str(error)
    requests = sent(fake, 43)
    assert len(requests) == 2  # NOT_CONTROLLER, then again
    version, request = requests[-1]
    assert version == 2 and request.election_type == 1 and request.timeout_ms > 0
    assert [(t.topic, list(t.partitions)) for t in request.topic_partitions] == [("t", [0, 1])]


def test_elect_leaders_on_a_v0_broker(broker: tuple[FakeBroker, LoopThread]) -> None:
    fake, _loop = broker
    fake.versions[43] = (0, 0)
    fake.hooks[43] = answer({"throttle_time_ms": 0, "replica_election_results": []})
    with SyncAdminClient(fake.bootstrap) as admin:
        assert admin.elect_leaders(ElectionType.PREFERRED, None) == {}
        with pytest.raises(UnsupportedVersionError, match="only preferred leader elections"):
            admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("t", 0)])
    ((version, request),) = sent(fake, 43)
    assert version == 0 and request.topic_partitions is None


def test_elect_leaders_top_level_error_raises(broker: tuple[FakeBroker, LoopThread]) -> None:
    fake, _loop = broker
    fake.hooks[43] = answer({"throttle_time_ms": 0, "error_code": 31,
                             "replica_election_results": []})
    with SyncAdminClient(fake.bootstrap) as admin, \
            pytest.raises(ClusterAuthorizationFailedError):
        admin.elect_leaders(ElectionType.PREFERRED, None)


def test_alter_and_list_reassignments(broker: tuple[FakeBroker, LoopThread]) -> None:
    fake, _loop = broker
    fake.hooks[45] = answer({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                             "responses": [{"name": "t", "partitions": [
                                 {"partition_index": 0, "error_code": 0,
                                  "error_message": None},
                                 {"partition_index": 1, "error_code": 85,
                                  "error_message": None}]}]})
    fake.hooks[46] = answer({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                             "topics": [{"name": "t", "partitions": [
                                 {"partition_index": 0, "replicas": [0, 1, 2],
                                  "adding_replicas": [2], "removing_replicas": [0]}]}]})
    with SyncAdminClient(fake.bootstrap) as admin:
        outcome = admin.alter_partition_reassignments(
            {TopicPartition("t", 0): [1, 2], TopicPartition("t", 1): None})
        assert outcome[TopicPartition("t", 0)] is None
        assert isinstance(outcome[TopicPartition("t", 1)], NoReassignmentInProgress)
        assert admin.list_partition_reassignments([TopicPartition("t", 0)]) == {
            TopicPartition("t", 0): PartitionReassignment((0, 1, 2), (2,), (0,))}
    ((_v, alter),) = sent(fake, 45)
    assert [(p.partition_index, p.replicas) for p in alter.topics[0].partitions] == [
        (0, [1, 2]), (1, None)]
    ((_v, listed),) = sent(fake, 46)
    assert [(t.name, list(t.partition_indexes)) for t in listed.topics] == [("t", [0])]


def test_an_unadvertised_api_is_unsupported(broker: tuple[FakeBroker, LoopThread]) -> None:
    fake, _loop = broker
    del fake.versions[46]
    with SyncAdminClient(fake.bootstrap) as admin, \
            pytest.raises(UnsupportedVersionError, match="ListPartitionReassignments"):
        admin.list_partition_reassignments()
