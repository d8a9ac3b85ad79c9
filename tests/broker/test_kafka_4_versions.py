"""The Kafka 4.x versions of ListOffsets (9-11), Metadata (13), DescribeGroups (6),
DescribeCluster (2), DescribeLogDirs (5), ListTransactions (2), AlterPartitionReassignments (1)
and DescribeTopicPartitions (0) over real sockets.

Each expectation is what a Kafka 4.4 node answered to the same raw requests on this machine
(one KRaft node from Maven Central, 2026-12-07), not what the specs suggest: ListOffsets gates
each special timestamp by the version that brought it, DescribeGroups v6 answers an unknown
group GROUP_ID_NOT_FOUND, ListTransactions v2 matches the whole id against the pattern.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.common.errors import ErrorCode
from strom.protocol.versions import ADVERTISED, SUPPORTED, ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

TOPIC = "v4x"
E = ErrorCode
#: What a group request answers while the coordinator is being made or loaded.
RETRIABLE = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,  # type: ignore[attr-defined]
             E.NOT_COORDINATOR}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({"group.initial.rebalance.delay.ms": 0}) as b:
        client = RawClient(b.bootstrap)
        created = client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout_ms": 5000, "validate_only": False})
        assert created.topics[0].error_code == 0
        client.close()
        producer = Producer({"bootstrap.servers": b.bootstrap})
        producer.produce(TOPIC, b"v", timestamp=1000)
        assert producer.flush(30) == 0
        yield b


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def test_the_4x_maxima_are_served_and_listed() -> None:
    for key, high in [(ApiKey.LIST_OFFSETS, 11), (ApiKey.METADATA, 13),
                      (ApiKey.DESCRIBE_GROUPS, 6), (ApiKey.DESCRIBE_CLUSTER, 2),
                      (ApiKey.DESCRIBE_LOG_DIRS, 5), (ApiKey.LIST_TRANSACTIONS, 2)]:
        assert SUPPORTED[key][1] == ADVERTISED[key][1] == high, ApiKey(key).name


def list_offset(client: RawClient, version: int, timestamp: int) -> tuple[int, int]:
    resp = client.call(ApiKey.LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.offset)


# One record at offset 0 with timestamp 1000. Kafka 4.4's answers (error, offset): the special
# timestamps from the version that brought them (-3 v7, -4 v8, -5 v9, -6 v11), -5 / -6 without
# tiered storage offset -1; any other negative timestamp UNSUPPORTED_VERSION.
U = (int(E.UNSUPPORTED_VERSION), -1)  # type: ignore[attr-defined]
KAFKA_4_4 = {
    1: [(0, 1), (0, 0), U, U, U, U, U, U, (0, 0), (0, 0)],
    6: [(0, 1), (0, 0), U, U, U, U, U, U, (0, 0), (0, 0)],
    7: [(0, 1), (0, 0), (0, 0), U, U, U, U, U, (0, 0), (0, 0)],
    8: [(0, 1), (0, 0), (0, 0), (0, 0), U, U, U, U, (0, 0), (0, 0)],
    9: [(0, 1), (0, 0), (0, 0), (0, 0), (0, -1), U, U, U, (0, 0), (0, 0)],
    10: [(0, 1), (0, 0), (0, 0), (0, 0), (0, -1), U, U, U, (0, 0), (0, 0)],
    11: [(0, 1), (0, 0), (0, 0), (0, 0), (0, -1), (0, -1), U, U, (0, 0), (0, 0)],
}


@pytest.mark.parametrize("version", sorted(KAFKA_4_4))
def test_list_offsets_special_timestamps_by_version(client: RawClient, version: int) -> None:
    timestamps = [-1, -2, -3, -4, -5, -6, -7, -100, 0, 999]
    assert [list_offset(client, version, ts) for ts in timestamps] == KAFKA_4_4[version]


def test_metadata_v13_has_a_top_level_error_code(client: RawClient) -> None:
    resp = client.call(ApiKey.METADATA, 13, {
        "topics": [{"name": TOPIC}, {"name": "v4x-missing"}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert resp.error_code == 0
    assert [(t.name, t.error_code) for t in resp.topics] == [
        (TOPIC, 0), ("v4x-missing", E.UNKNOWN_TOPIC_OR_PARTITION)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_by_id_as_java_4x_clients_ask(client: RawClient, version: int) -> None:
    # Java 4.x clients (describeTopics by ids) send an id with an empty name, not null; Kafka
    # looks up the ids whenever a request carries one and ignores the names then (nothing is
    # auto-created), and answers each topic once.
    def metadata(*topics: dict[str, object]) -> list[tuple[str | None, int, object]]:
        resp = client.call(ApiKey.METADATA, version, {
            "topics": list(topics), "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False})
        return [(t.name, t.error_code, t.topic_id) for t in resp.topics]

    [(_name, _error, topic_id)] = metadata({"name": TOPIC})
    found = [(TOPIC, 0, topic_id)]
    assert metadata({"topic_id": topic_id, "name": ""}) == found
    assert metadata({"topic_id": topic_id, "name": None}) == found
    assert metadata({"topic_id": topic_id, "name": "v4x-other"}) == found
    assert metadata({"topic_id": topic_id, "name": ""}, {"name": "v4x-never-made"}) == found
    assert metadata({"topic_id": topic_id, "name": ""}, {"topic_id": topic_id, "name": ""}) == (
        found)
    assert metadata({"name": TOPIC}, {"name": TOPIC}) == found
    unknown = uuid.UUID(int=5)
    assert metadata({"topic_id": unknown, "name": ""}) == [
        (None, E.UNKNOWN_TOPIC_ID, unknown)]  # type: ignore[attr-defined]
    listed = client.call(ApiKey.METADATA, version, {
        "topics": None, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    assert "v4x-never-made" not in {t.name for t in listed.topics}


def test_describe_groups_v6_answers_an_unknown_group_not_found(client: RawClient) -> None:
    # FindCoordinator makes the offsets topic (DescribeGroups does not); then the group's
    # partition may still be loading: both retried as clients retry them.
    deadline = time.monotonic() + 30
    while True:
        found = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                         "coordinator_keys": ["v4x-nogroup"]})
        if found.coordinators[0].error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert found.coordinators[0].error_code == 0

    def describe(version: int) -> Any:
        deadline = time.monotonic() + 30  # the offsets topic is made and loaded on demand
        while True:
            [group] = client.call(ApiKey.DESCRIBE_GROUPS, version, {
                "groups": ["v4x-nogroup"], "include_authorized_operations": False}).groups
            if group.error_code not in RETRIABLE or time.monotonic() > deadline:
                return group
            time.sleep(0.2)

    group = describe(6)
    assert (group.error_code, group.error_message, group.group_state) == (
        E.GROUP_ID_NOT_FOUND, "Group v4x-nogroup not found.", "Dead")  # type: ignore[attr-defined]
    v5 = describe(5)
    assert (v5.error_code, v5.group_state) == (0, "Dead")


def test_describe_cluster_v2_and_describe_log_dirs_v5(client: RawClient,
                                                      broker: EmbeddedBroker) -> None:
    cluster = client.call(ApiKey.DESCRIBE_CLUSTER, 2, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1,
        "include_fenced_brokers": True})
    assert cluster.error_code == 0
    assert [(b.broker_id, b.port, b.is_fenced) for b in cluster.brokers] == [
        (0, broker.port, False)]
    dirs = client.call(ApiKey.DESCRIBE_LOG_DIRS, 5, {
        "topics": [{"topic": TOPIC, "partitions": [0]}]})
    [result] = dirs.results
    assert (result.error_code, result.is_cordoned) == (0, False)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        (TOPIC, [0])]


def test_list_transactions_v2_filters_by_a_whole_id_pattern(client: RawClient,
                                                            broker: EmbeddedBroker) -> None:
    producers = []
    for transactional_id in ("v4x-abc", "v4x-xbc"):
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": transactional_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"in a transaction")
        assert producer.flush(30) == 0
        producers.append(producer)

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        resp = client.call(ApiKey.LIST_TRANSACTIONS, 2, {
            "state_filters": [], "producer_id_filters": [], "duration_filter": -1,
            "transactional_id_pattern": pattern})
        return resp.error_code, sorted(t.transactional_id for t in resp.transaction_states
                                       if t.transactional_id.startswith("v4x-"))

    both = ["v4x-abc", "v4x-xbc"]
    assert listed(None) == (0, both) and listed("") == (0, both)
    assert listed("bc") == (0, [])  # the whole id must match
    assert listed("v4x-a.*") == (0, ["v4x-abc"])
    assert listed(".*bc") == (0, both)
    assert listed("v4x-abc|zzz") == (0, ["v4x-abc"])
    assert listed("^v4x-abc$") == (0, ["v4x-abc"])
    assert listed("[") == (E.INVALID_REGULAR_EXPRESSION, [])  # type: ignore[attr-defined]
    for producer in producers:
        producer.abort_transaction(30)


def test_alter_partition_reassignments_v1_carries_the_replication_factor_flag(
        client: RawClient) -> None:
    # One broker: the same replicas with the flag off are accepted, a broker that is not
    # there is refused before the size is compared (tests/controller: the size refusal).
    def reassign(replicas: list[int]) -> tuple[int, str | None]:
        resp = client.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, {
            "timeout_ms": 5000, "allow_replication_factor_change": False, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
        assert resp.error_code == 0
        [p] = resp.responses[0].partitions
        return p.error_code, p.error_message

    assert reassign([0]) == (0, None)
    assert reassign([0, 9])[0] == E.INVALID_REPLICA_ASSIGNMENT  # type: ignore[attr-defined]


def test_describe_topic_partitions_pages_as_kafka_does(client: RawClient,
                                                        broker: EmbeddedBroker) -> None:
    # The same requests a Kafka 4.4 node answered (tests' names aside): name order, each
    # topic once, the page cut at the partition limit with a cursor to the rest.
    sizes = {"dtp-a": 3, "dtp-m": 1, "dtp-z": 2}
    created = client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": n, "num_partitions": k, "replication_factor": 1, "assignments": [],
         "configs": []} for n, k in sizes.items()], "timeout_ms": 5000, "validate_only": False})
    assert [t.error_code for t in created.topics] == [0, 0, 0]
    all_ops = 3576  # every topic operation, as Kafka without an authorizer

    def page(topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
             ) -> tuple[object, list[tuple[object, ...]]]:
        resp = client.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": n} for n in topics], "response_partition_limit": limit,
            "cursor": None if cursor is None else {"topic_name": cursor[0],
                                                   "partition_index": cursor[1]}})
        nxt = resp.next_cursor
        return (None if nxt is None else (nxt.topic_name, nxt.partition_index),
                [(t.name, t.error_code, t.topic_authorized_operations,
                  [p.partition_index for p in t.partitions]) for t in resp.topics])

    def ok(name: str, *partitions: int) -> tuple[object, ...]:
        return (name, 0, all_ops, list(partitions))

    assert page(["dtp-z", "dtp-a", "nope", "dtp-a"]) == (None, [
        ok("dtp-a", 0, 1, 2), ok("dtp-z", 0, 1),
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION, all_ops, [])])  # type: ignore[attr-defined]
    three = ["dtp-z", "dtp-a", "dtp-m"]
    assert page(three, 2) == (("dtp-a", 2), [ok("dtp-a", 0, 1)])
    assert page(three, 2, ("dtp-a", 2)) == (("dtp-z", 0), [ok("dtp-a", 2), ok("dtp-m", 0)])
    assert page(three, 2, ("dtp-z", 0)) == (None, [ok("dtp-z", 0, 1)])
    assert page(["dtp-z"], 10, ("dtp-z", 5)) == (None, [ok("dtp-z")])
    assert page(["dtp-z"], 0) == page(["dtp-z"], -1) == (("dtp-z", 1), [ok("dtp-z", 0)])
    invalid = E.INVALID_REQUEST  # type: ignore[attr-defined]
    assert page(["dtp-z", "dtp-a"], 10, ("dtp-m", 0)) == (None, [
        ("dtp-z", invalid, -(1 << 31), []), ("dtp-a", invalid, -(1 << 31), [])])
    assert page(["dtp-z"], 10, ("dtp-z", -1)) == (None, [("dtp-z", invalid, -(1 << 31), [])])
    assert page(["bad/name"]) == (None, [
        ("bad/name", E.INVALID_TOPIC_EXCEPTION, all_ops, [])])  # type: ignore[attr-defined]
    # Every topic from a cursor's name on, whether or not that topic exists.
    assert page([], 2, ("dtp-b", 0)) == (("dtp-z", 1), [ok("dtp-m", 0), ok("dtp-z", 0)])
    everything = page([])[1]
    assert [t[0] for t in everything] == sorted(t[0] for t in everything)
    assert all(ok(n, *range(k)) in everything for n, k in sizes.items())


def test_api_versions_lists_features_as_kafka_4_4(client: RawClient) -> None:
    """KIP-584 features, as a Kafka 4.4.0 node answers (measured): v3 leaves out supported
    features whose minimum is 0 (KAFKA-17011), v4 lists them; finalized levels are min = max;
    v2 has neither. strom finalizes group.version 1 (KIP-848) and nothing it lacks."""
    software = {"client_software_name": "t", "client_software_version": "1"}
    v2 = client.call(ApiKey.API_VERSIONS, 2, {})
    assert (v2.supported_features, v2.finalized_features_epoch, v2.finalized_features) == (
        [], -1, [])
    v3 = client.call(ApiKey.API_VERSIONS, 3, software)
    v4 = client.call(ApiKey.API_VERSIONS, 4, software)
    assert v3.supported_features == []
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("group.version", 0, 1)]
    for answer in (v3, v4):
        assert answer.finalized_features_epoch >= 0
        assert [(f.name, f.min_version_level, f.max_version_level)
                for f in answer.finalized_features] == [("group.version", 1, 1)]


def test_list_config_resources_as_kafka_4_4(client: RawClient) -> None:
    """Kafka 4.4's answers (measured): every topic and broker for no types, the types
    asked, UNSUPPORTED_VERSION for a type it does not know; v0 lists client metrics only."""
    create = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": "lcr-topic", "num_partitions": 1, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert create.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS)

    def listed(version: int, types: list[int]) -> tuple[int, set[tuple[int, str]]]:
        fields = {"resource_types": types} if version >= 1 else {}
        answer = client.call(ApiKey.LIST_CONFIG_RESOURCES, version, fields)
        return answer.error_code, {(getattr(r, "resource_type", 16), r.resource_name)
                                   for r in answer.config_resources}

    error, everything = listed(1, [])
    assert error == 0 and (2, "lcr-topic") in everything and (4, "0") in everything
    assert listed(1, [4]) == (0, {(4, "0")})
    assert all(t == 2 for t, _ in listed(1, [2])[1])
    assert listed(1, [32]) == (0, set()) and listed(1, [16]) == (0, set())
    assert listed(1, [1]) == (ErrorCode.UNSUPPORTED_VERSION, set())
    assert listed(0, []) == (0, set())
