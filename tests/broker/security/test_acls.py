"""ACLs on a real broker (``authorizer.class.name=acls``) over SASL_PLAINTEXT.

Principals: ``User:admin`` and ``User:ANONYMOUS`` (the PLAINTEXT listener, where the broker's
own transaction markers come from) are super users; ``alice`` is granted exactly what each
API needs on her resources; ``bob`` has no ACL at all (``allow.everyone.if.no.acl.found`` is
false, Kafka's default). The matrix sends each API as bob and as alice over raw SASL PLAIN
connections and checks the code on the wire against the operation Kafka documents for the
API; real clients (confluent-kafka, kafka-python) show the errors users see."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from strom.client.sync import SyncAdminClient
from strom.common.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import error_class
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

OP, ALLOW, DENY = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY
T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
ACL_CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "acls",
    "super.users": "User:admin;User:ANONYMOUS",
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}


def code(name: str) -> int:
    return error_class(name).code


AUTHORIZATION_CODES = {code(f"{kind}_AUTHORIZATION_FAILED")
                       for kind in ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")}


def binding(rtype: ResourceType, name: str, principal: str, op: AclOperation,
            permission: AclPermissionType = ALLOW,
            kind: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, kind),
                      AccessControlEntry(principal, "*", op, permission))


def sasl_client(bootstrap: str, user: str) -> RawClient:
    """A raw connection authenticated with SASL PLAIN as ``user``."""
    client = RawClient(bootstrap)
    assert client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    token = b"\x00" + user.encode() + b"\x00" + USERS[user].encode()
    assert client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code == 0
    return client


@dataclass
class AclBroker:
    broker: EmbeddedBroker

    @property
    def sasl(self) -> str:
        return self.broker.bootstrap_of("SASL_PLAINTEXT")

    @property
    def plain(self) -> str:
        return self.broker.bootstrap_of("PLAINTEXT")

    def admin(self) -> SyncAdminClient:
        """strom's admin client on the PLAINTEXT listener (ANONYMOUS: a super user)."""
        return SyncAdminClient(self.plain)

    def call(self, user: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        client = sasl_client(self.sasl, user)
        try:
            return client.call(api_key, version, fields)
        finally:
            client.close()


# -- the matrix: each API, denied and allowed, against Kafka's documented required operations ---

@dataclass(frozen=True)
class Case:
    """One API: the request (resources named by ``name``), what alice is granted (Kafka's
    required operation), where the error is, and the code a refusal must carry."""

    api: str
    api_key: int
    version: int
    fields: Callable[[str], dict[str, Any]]
    grants: tuple[tuple[ResourceType, AclOperation], ...]
    error: Callable[[Any], int]
    denied: str
    topic: bool = False  # the resource is a topic that must exist

    @property
    def id(self) -> str:
        return self.api


def _fetch(name: str) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": name, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 16}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _first_partition(field: str) -> Callable[[Any], int]:
    return lambda r: int(getattr(r, field)[0].partitions[0].error_code)


def _records() -> bytes:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), None, b"v")
    return builder.build()


MATRIX = [
    Case("Produce", ApiKey.PRODUCE, 9, lambda n: {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": n, "partition_data": [{"index": 0, "records": _records()}]}]},
         ((T, OP.WRITE),), lambda r: int(r.responses[0].partition_responses[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("Produce(missing topic)", ApiKey.PRODUCE, 9, lambda n: {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": n, "partition_data": [{"index": 0, "records": _records()}]}]},
         ((T, OP.WRITE),), lambda r: int(r.responses[0].partition_responses[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED"),
    Case("OffsetForLeaderEpoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, lambda n: {
        "replica_id": -1, "topics": [{"topic": n, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
         ((T, OP.DESCRIBE),), _first_partition("topics"), "TOPIC_AUTHORIZATION_FAILED",
         topic=True),
    Case("OffsetDelete", ApiKey.OFFSET_DELETE, 0, lambda n: {
        "group_id": n, "topics": [{"name": n, "partitions": [{"partition_index": 0}]}]},
         ((G, OP.DELETE), (T, OP.READ)), lambda r: int(r.error_code),
         "GROUP_AUTHORIZATION_FAILED", topic=True),
    Case("AlterConfigs", ApiKey.ALTER_CONFIGS, 2, lambda n: {
        "resources": [{"resource_type": 2, "resource_name": n, "configs": [
            {"name": "retention.ms", "value": "3600000"}]}], "validate_only": True},
         ((T, OP.ALTER_CONFIGS),), lambda r: int(r.responses[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, 3, lambda n: {
        "v3_and_below_transactional_id": n, "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": n, "partitions": [0]}]},
         ((X, OP.WRITE), (T, OP.WRITE)),
         lambda r: int(r.results_by_topic_v3_and_below[0].results_by_partition[0]
                       .partition_error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", topic=True),
    Case("AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, 3, lambda n: {
        "transactional_id": n, "producer_id": 1, "producer_epoch": 0, "group_id": n},
         ((X, OP.WRITE), (G, OP.READ)), lambda r: int(r.error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    Case("TxnOffsetCommit", ApiKey.TXN_OFFSET_COMMIT, 3, lambda n: {
        "transactional_id": n, "group_id": n, "producer_id": 1, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": ""}]}]},
         ((X, OP.WRITE), (G, OP.READ), (T, OP.READ)), _first_partition("topics"),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", topic=True),
    Case("Fetch", ApiKey.FETCH, 12, _fetch, ((T, OP.READ),),
         lambda r: int(r.responses[0].partitions[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("ListOffsets", ApiKey.LIST_OFFSETS, 7, lambda n: {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": n, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
         ((T, OP.DESCRIBE),), _first_partition("topics"), "TOPIC_AUTHORIZATION_FAILED",
         topic=True),
    Case("Metadata", ApiKey.METADATA, 12, lambda n: {
        "topics": [{"name": n, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False},
         ((T, OP.DESCRIBE),), lambda r: int(r.topics[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("OffsetCommit", ApiKey.OFFSET_COMMIT, 8, lambda n: {
        "group_id": n, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": n, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]},
         ((G, OP.READ), (T, OP.READ)), _first_partition("topics"),
         "GROUP_AUTHORIZATION_FAILED", topic=True),
    Case("OffsetFetch", ApiKey.OFFSET_FETCH, 7, lambda n: {
        "group_id": n, "topics": [{"name": n, "partition_indexes": [0]}],
        "require_stable": False},
         ((G, OP.DESCRIBE), (T, OP.DESCRIBE)), lambda r: int(r.error_code),
         "GROUP_AUTHORIZATION_FAILED", topic=True),
    Case("FindCoordinator", ApiKey.FIND_COORDINATOR, 3, lambda n: {
        "key": n, "key_type": 0}, ((G, OP.DESCRIBE),), lambda r: int(r.error_code),
         "GROUP_AUTHORIZATION_FAILED"),
    Case("FindCoordinator(txn)", ApiKey.FIND_COORDINATOR, 4, lambda n: {
        "key_type": 1, "coordinator_keys": [n]}, ((X, OP.DESCRIBE),),
         lambda r: int(r.coordinators[0].error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    Case("JoinGroup", ApiKey.JOIN_GROUP, 5, lambda n: {
        "group_id": n, "session_timeout_ms": 10000, "rebalance_timeout_ms": 100,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]},
         ((G, OP.READ),), lambda r: int(r.error_code), "GROUP_AUTHORIZATION_FAILED"),
    Case("Heartbeat", ApiKey.HEARTBEAT, 3, lambda n: {
        "group_id": n, "generation_id": 1, "member_id": "m", "group_instance_id": None},
         ((G, OP.READ),), lambda r: int(r.error_code), "GROUP_AUTHORIZATION_FAILED"),
    Case("SyncGroup", ApiKey.SYNC_GROUP, 3, lambda n: {
        "group_id": n, "generation_id": 1, "member_id": "m", "group_instance_id": None,
        "assignments": []},
         ((G, OP.READ),), lambda r: int(r.error_code), "GROUP_AUTHORIZATION_FAILED"),
    Case("LeaveGroup", ApiKey.LEAVE_GROUP, 3, lambda n: {
        "group_id": n, "members": [{"member_id": "m", "group_instance_id": None}]},
         ((G, OP.READ),), lambda r: int(r.error_code), "GROUP_AUTHORIZATION_FAILED"),
    Case("DescribeGroups", ApiKey.DESCRIBE_GROUPS, 5, lambda n: {
        "groups": [n], "include_authorized_operations": True},
         ((G, OP.DESCRIBE),), lambda r: int(r.groups[0].error_code),
         "GROUP_AUTHORIZATION_FAILED"),
    Case("DeleteGroups", ApiKey.DELETE_GROUPS, 2, lambda n: {"groups_names": [n]},
         ((G, OP.DELETE),), lambda r: int(r.results[0].error_code),
         "GROUP_AUTHORIZATION_FAILED"),
    Case("CreateTopics", ApiKey.CREATE_TOPICS, 7, lambda n: {
        "topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 5000,
        "validate_only": True},
         ((T, OP.CREATE),), lambda r: int(r.topics[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED"),
    Case("DeleteTopics", ApiKey.DELETE_TOPICS, 6, lambda n: {
        "topics": [{"name": n, "topic_id": None}], "timeout_ms": 5000},
         ((T, OP.DELETE),), lambda r: int(r.responses[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("DeleteRecords", ApiKey.DELETE_RECORDS, 2, lambda n: {
        "topics": [{"name": n, "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout_ms": 5000},
         ((T, OP.DELETE),), _first_partition("topics"), "TOPIC_AUTHORIZATION_FAILED",
         topic=True),
    Case("CreatePartitions", ApiKey.CREATE_PARTITIONS, 3, lambda n: {
        "topics": [{"name": n, "count": 2, "assignments": None}], "timeout_ms": 5000,
        "validate_only": True},
         ((T, OP.ALTER),), lambda r: int(r.results[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, 4, lambda n: {
        "resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False},
         ((T, OP.DESCRIBE_CONFIGS),), lambda r: int(r.results[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, lambda n: {
        "resources": [{"resource_type": 2, "resource_name": n, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}],
        "validate_only": True},
         ((T, OP.ALTER_CONFIGS),), lambda r: int(r.responses[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED", topic=True),
    Case("DescribeProducers", ApiKey.DESCRIBE_PRODUCERS, 0, lambda n: {
        "topics": [{"name": n, "partition_indexes": [0]}]},
         ((T, OP.READ),), _first_partition("topics"), "TOPIC_AUTHORIZATION_FAILED",
         topic=True),
    Case("InitProducerId(txn)", ApiKey.INIT_PRODUCER_ID, 4, lambda n: {
        "transactional_id": n, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1},
         ((X, OP.WRITE),), lambda r: int(r.error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    Case("EndTxn", ApiKey.END_TXN, 3, lambda n: {
        "transactional_id": n, "producer_id": 1, "producer_epoch": 0, "committed": True},
         ((X, OP.WRITE),), lambda r: int(r.error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    Case("DescribeTransactions", ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda n: {
        "transactional_ids": [n]},
         ((X, OP.DESCRIBE),), lambda r: int(r.transaction_states[0].error_code),
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
]
# Cluster-level APIs: alice holds ALTER, DESCRIBE, IDEMPOTENT_WRITE, CLUSTER_ACTION,
# DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster (never CREATE, which would allow every
# CreateTopics); bob nothing.
CLUSTER_MATRIX = [
    Case("DescribeAcls", ApiKey.DESCRIBE_ACLS, 3, lambda n: {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1,
        "permission_type": 1}, (), lambda r: int(r.error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
    Case("CreateAcls", ApiKey.CREATE_ACLS, 3, lambda n: {"creations": [{
        "resource_type": 2, "resource_name": n, "resource_pattern_type": 3,
        "principal": "User:nobody", "host": "*", "operation": 3, "permission_type": 3}]},
         (), lambda r: int(r.results[0].error_code), "CLUSTER_AUTHORIZATION_FAILED"),
    Case("DeleteAcls", ApiKey.DELETE_ACLS, 3, lambda n: {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": n, "pattern_type_filter": 3,
        "principal_filter": "User:nobody", "host_filter": None, "operation": 1,
        "permission_type": 1}]},
         (), lambda r: int(r.filter_results[0].error_code), "CLUSTER_AUTHORIZATION_FAILED"),
    Case("DescribeUserScramCredentials", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
         lambda n: {"users": None}, (), lambda r: int(r.error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
    Case("AlterUserScramCredentials", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, lambda n: {
        "deletions": [{"name": n, "mechanism": 1}], "upsertions": []},
         (), lambda r: int(r.results[0].error_code), "CLUSTER_AUTHORIZATION_FAILED"),
    Case("DescribeClientQuotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, lambda n: {
        "components": [], "strict": False}, (), lambda r: int(r.error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
    Case("AlterClientQuotas", ApiKey.ALTER_CLIENT_QUOTAS, 1, lambda n: {"entries": [{
        "entity": [{"entity_type": "user", "entity_name": n}],
        "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}],
        "validate_only": True}, (), lambda r: int(r.entries[0].error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
    Case("DescribeLogDirs", ApiKey.DESCRIBE_LOG_DIRS, 4, lambda n: {"topics": None},
         (), lambda r: int(r.error_code), "CLUSTER_AUTHORIZATION_FAILED"),
    Case("InitProducerId(idempotent)", ApiKey.INIT_PRODUCER_ID, 4, lambda n: {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1}, (), lambda r: int(r.error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
    Case("Fetch(replica)", ApiKey.FETCH, 12, lambda n: {**_fetch("m-fetch"), "replica_id": 0},
         (), lambda r: int(r.responses[0].partitions[0].error_code),
         "TOPIC_AUTHORIZATION_FAILED"),
    Case("DescribeConfigs(broker)", ApiKey.DESCRIBE_CONFIGS, 4, lambda n: {
        "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False},
         (), lambda r: int(r.results[0].error_code), "CLUSTER_AUTHORIZATION_FAILED"),
    Case("WriteTxnMarkers", ApiKey.WRITE_TXN_MARKERS, 1, lambda n: {"markers": [{
        "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
        "topics": [{"name": n, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
         (), lambda r: int(r.markers[0].topics[0].partitions[0].error_code),
         "CLUSTER_AUTHORIZATION_FAILED"),
]
CLUSTER_GRANTS = (OP.ALTER, OP.DESCRIBE, OP.IDEMPOTENT_WRITE, OP.CLUSTER_ACTION,
                  OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS)


def _name(case: Case) -> str:
    return "m-" + "".join(ch if ch.isalnum() else "-" for ch in case.api.lower())


def _named(api: str) -> str:
    return _name(next(c for c in MATRIX if c.api == api))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    with EmbeddedBroker(ACL_CONFIG, data_dir=tmp_path_factory.mktemp("acl-broker")) as broker:
        cluster = AclBroker(broker)
        admin = cluster.admin()
        try:
            for case in MATRIX:
                if case.topic:
                    admin.create_topic(_name(case), 1, 1)
            admin.create_acls(
                [binding(rtype, _name(case), "User:alice", op)
                 for case in MATRIX for rtype, op in case.grants]
                + [binding(C, CLUSTER_NAME, "User:alice", op) for op in CLUSTER_GRANTS])
        finally:
            admin.close()
        yield cluster


@pytest.mark.parametrize("case", MATRIX + CLUSTER_MATRIX, ids=lambda c: c.id)
def test_acl_matrix(acl_broker: AclBroker, case: Case) -> None:
    name = _name(case)
    refused = case.error(acl_broker.call("bob", case.api_key, case.version, case.fields(name)))
    assert refused == code(case.denied), f"{case.api} as bob: {refused}"
    allowed = case.error(acl_broker.call("alice", case.api_key, case.version,
                                         case.fields(name)))
    assert allowed != code(case.denied), f"{case.api} as alice: still refused"
    assert allowed not in AUTHORIZATION_CODES, f"{case.api} as alice: {allowed}"


def test_list_groups_and_transactions_show_only_what_may_be_described(
        acl_broker: AclBroker) -> None:
    commit = next(c for c in MATRIX if c.api == "OffsetCommit")
    group = _name(commit)
    acl_broker.call("admin", ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    deadline, error = time.monotonic() + 15, -1
    while error and time.monotonic() < deadline:  # until the offsets topic is loaded
        error = commit.error(acl_broker.call("alice", commit.api_key, commit.version,
                                             commit.fields(group)))
        time.sleep(0.05)
    assert error == 0  # alice's group exists
    listing = {"states_filter": [], "types_filter": []}
    # bob sees no group, alice (DESCRIBE on the cluster) every group.
    assert acl_broker.call("bob", ApiKey.LIST_GROUPS, 5, listing).groups == []
    groups = [g.group_id for g in acl_broker.call("alice", ApiKey.LIST_GROUPS, 5,
                                                  listing).groups]
    assert group in groups
    everything = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    assert acl_broker.call("bob", ApiKey.LIST_TRANSACTIONS, 1,
                           everything).transaction_states == []


def test_write_on_any_topic_allows_an_idempotent_producer_id(acl_broker: AclBroker) -> None:
    """KIP-679: without IDEMPOTENT_WRITE on the cluster, WRITE on some topic is enough."""
    fields = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
              "producer_epoch": -1}
    assert acl_broker.call("carol", ApiKey.INIT_PRODUCER_ID, 4, fields).error_code == code(
        "CLUSTER_AUTHORIZATION_FAILED")
    rule = binding(T, "kip679-", "User:carol", OP.WRITE, kind=PatternType.PREFIXED)
    admin = acl_broker.admin()
    try:
        admin.create_acls([rule])
        assert acl_broker.call("carol", ApiKey.INIT_PRODUCER_ID, 4, fields).error_code == 0
    finally:
        admin.delete_acls([AclFilter(T, "kip679-", PatternType.PREFIXED)])
        admin.close()


def test_topic_existence_is_not_revealed_without_describe(acl_broker: AclBroker) -> None:
    reads, describes = _named("Fetch"), _named("ListOffsets")  # READ / DESCRIBE granted
    existing, missing = reads, f"missing-{uuid.uuid4().hex[:6]}"
    for wanted in (existing, missing):
        response = acl_broker.call("bob", ApiKey.METADATA, 12, {
            "topics": [{"name": wanted, "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False})
        assert response.topics[0].error_code == code("TOPIC_AUTHORIZATION_FAILED")
    # Listing every topic shows only those the caller may describe.
    everything = {"topics": None, "allow_auto_topic_creation": False,
                  "include_topic_authorized_operations": True}
    assert acl_broker.call("bob", ApiKey.METADATA, 12, everything).topics == []
    listed = {t.name: t for t in acl_broker.call("alice", ApiKey.METADATA, 12,
                                                  everything).topics}
    assert reads in listed and describes in listed
    assert set(listed[reads].authorized_operations) == {OP.READ, OP.DESCRIBE}
    assert set(listed[describes].authorized_operations) == {OP.DESCRIBE}
    # The missing topic was not auto-created.
    admin = acl_broker.admin()
    try:
        assert missing not in admin.list_topics()
    finally:
        admin.close()


def test_prefixed_allow_and_deny_overriding_it(acl_broker: AclBroker) -> None:
    prefix = f"pfx-{uuid.uuid4().hex[:6]}-"
    admin = acl_broker.admin()
    try:
        for suffix in ("open", "secret"):
            admin.create_topic(prefix + suffix, 1, 1)
        admin.create_acls([
            binding(T, prefix, "User:carol", OP.DESCRIBE, kind=PatternType.PREFIXED),
            binding(T, prefix + "secret", "User:carol", OP.ALL, DENY)])
        fields = {"topics": [{"name": prefix + s, "topic_id": None} for s in
                             ("open", "secret")],
                  "allow_auto_topic_creation": False,
                  "include_topic_authorized_operations": False}
        topics = acl_broker.call("carol", ApiKey.METADATA, 12, fields).topics
        assert [t.error_code for t in topics] == [0, code("TOPIC_AUTHORIZATION_FAILED")]
        # The group list and cluster authorized operations follow ACLs too.
        cluster = acl_broker.call("alice", ApiKey.DESCRIBE_CLUSTER, 0,
                                  {"include_cluster_authorized_operations": True})
        assert set(cluster.authorized_operations) == set(CLUSTER_GRANTS)
    finally:
        admin.delete_acls([AclFilter(T, prefix, PatternType.PREFIXED),
                           AclFilter(T, prefix + "secret")])
        admin.close()


def test_super_users_may_do_anything(acl_broker: AclBroker) -> None:
    topic = f"super-{uuid.uuid4().hex[:6]}"
    created = acl_broker.call("admin", ApiKey.CREATE_TOPICS, 7, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 5000,
        "validate_only": False})
    assert created.topics[0].error_code == 0
    described = acl_broker.call("admin", ApiKey.DESCRIBE_ACLS, 3, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": "User:alice", "host_filter": None, "operation": 1,
        "permission_type": 1})
    assert described.error_code == 0 and described.resources


def test_confluent_admin_acl_round_trip(acl_broker: AclBroker) -> None:
    from confluent_kafka.admin import AclBinding as CBinding
    from confluent_kafka.admin import AclBindingFilter as CFilter
    from confluent_kafka.admin import AclOperation as COp
    from confluent_kafka.admin import AclPermissionType as CPerm
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import ResourcePatternType as CPattern
    from confluent_kafka.admin import ResourceType as CType

    admin = AdminClient({"bootstrap.servers": acl_broker.sasl, "security.protocol":
                         "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": USERS["admin"]})
    name = f"rt-{uuid.uuid4().hex[:6]}"
    bindings = [CBinding(CType.TOPIC, name, CPattern.PREFIXED, "User:dave", "*",
                         COp.READ, CPerm.ALLOW),
                CBinding(CType.GROUP, name, CPattern.LITERAL, "User:dave", "10.0.0.1",
                         COp.READ, CPerm.DENY)]
    for future in admin.create_acls(bindings, request_timeout=10).values():
        future.result(10)
    match = CFilter(CType.ANY, None, CPattern.ANY, "User:dave", None, COp.ANY, CPerm.ANY)
    described = admin.describe_acls(match, request_timeout=10).result(10)
    assert sorted(described) == sorted(bindings)
    deleted = admin.delete_acls([match], request_timeout=10)
    assert sorted(next(iter(deleted.values())).result(10)) == sorted(bindings)
    assert admin.describe_acls(match, request_timeout=10).result(10) == []
    # A principal without ALTER on the cluster gets Kafka's error from the real client.
    bob = AdminClient({"bootstrap.servers": acl_broker.sasl, "security.protocol":
                       "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "bob",
                       "sasl.password": USERS["bob"]})
    with pytest.raises(Exception) as refused:
        for future in bob.create_acls(bindings[:1], request_timeout=10).values():
            future.result(10)
    assert refused.value.args[0].code() == code("CLUSTER_AUTHORIZATION_FAILED")


def _confluent(acl_broker: AclBroker, user: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": acl_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user], **extra}


def test_confluent_produce_and_consume_denied_then_allowed(acl_broker: AclBroker) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer

    topic, group = f"cf-{uuid.uuid4().hex[:6]}", f"cf-group-{uuid.uuid4().hex[:6]}"
    admin = acl_broker.admin()
    try:
        admin.create_topic(topic, 1, 1)
        admin.create_acls([binding(T, topic, "User:alice", OP.WRITE),
                           binding(T, topic, "User:alice", OP.READ),
                           binding(G, group, "User:alice", OP.READ)])
    finally:
        admin.close()
    errors: list[Any] = []
    bob = Producer(_confluent(acl_broker, "bob", **{"message.timeout.ms": 10000}))
    bob.produce(topic, b"refused", on_delivery=lambda err, _msg: errors.append(err))
    bob.flush(15)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = Producer(_confluent(acl_broker, "alice", **{"enable.idempotence": True}))
    delivered: list[Any] = []
    alice.produce(topic, b"allowed", on_delivery=lambda err, _msg: delivered.append(err))
    alice.flush(15)
    assert delivered == [None]

    def consume(user: str) -> tuple[list[bytes], list[Any]]:
        consumer = Consumer(_confluent(acl_broker, user, **{
            "group.id": group, "auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        values, errs = [], []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not values and not errs:
            message = consumer.poll(0.5)
            if message is None:
                continue
            (errs if message.error() else values).append(
                message.error() or message.value())
        consumer.close()
        return values, errs

    values, errs = consume("bob")
    assert not values and errs[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                             KafkaError.GROUP_AUTHORIZATION_FAILED)
    assert consume("alice") == ([b"allowed"], [])


def test_kafka_python_group_consumer_denied_group(acl_broker: AclBroker) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    topic, group = f"kp-{uuid.uuid4().hex[:6]}", f"kp-group-{uuid.uuid4().hex[:6]}"
    admin = acl_broker.admin()
    try:
        admin.create_topic(topic, 1, 1)
        admin.create_acls([binding(T, topic, "User:carol", OP.READ)])  # not the group
    finally:
        admin.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=acl_broker.sasl, group_id=group,
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="carol",
                             sasl_plain_password=USERS["carol"],
                             request_timeout_ms=10000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.poll(timeout_ms=10000)
    finally:
        consumer.close()


def test_transactions_complete_with_the_brokers_own_markers(acl_broker: AclBroker) -> None:
    """The broker's WriteTxnMarkers to itself come as User:ANONYMOUS on the PLAINTEXT
    inter-broker listener (a super user here); a SASL producer's transaction commits."""
    from confluent_kafka import Producer

    topic, txn = f"tx-{uuid.uuid4().hex[:6]}", f"txn-{uuid.uuid4().hex[:6]}"
    admin = acl_broker.admin()
    try:
        admin.create_topic(topic, 1, 1)
        admin.create_acls([binding(T, topic, "User:alice", OP.WRITE),
                           binding(X, txn, "User:alice", OP.WRITE)])
    finally:
        admin.close()
    producer = Producer(_confluent(acl_broker, "alice", **{"transactional.id": txn}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(15)
    deadline = time.monotonic() + 15
    state = ""
    while state != "CompleteCommit" and time.monotonic() < deadline:
        time.sleep(0.1)  # the markers are written after the commit is acknowledged
        response = acl_broker.call("admin", ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                   {"transactional_ids": [txn]})
        state = response.transaction_states[0].transaction_state
    assert state == "CompleteCommit"


def test_acls_survive_a_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    with EmbeddedBroker(ACL_CONFIG, data_dir=tmp_path_factory.mktemp("restart")) as broker:
        cluster = AclBroker(broker)
        admin = cluster.admin()
        rule = binding(G, "kept", "User:alice", OP.READ, kind=PatternType.PREFIXED)
        try:
            admin.create_acls([rule])
        finally:
            admin.close()
        broker.restart()
        admin = cluster.admin()
        try:
            assert admin.describe_acls() == [rule]
        finally:
            admin.close()
        find = {"key": "kept-1", "key_type": 0}
        assert cluster.call("alice", ApiKey.FIND_COORDINATOR, 3, find).error_code == 0
        assert cluster.call("bob", ApiKey.FIND_COORDINATOR, 3, find).error_code == code(
            "GROUP_AUTHORIZATION_FAILED")


def test_allow_everyone_if_no_acl_found(tmp_path_factory: pytest.TempPathFactory) -> None:
    config = {**ACL_CONFIG, "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedBroker(config, data_dir=tmp_path_factory.mktemp("open")) as broker:
        cluster = AclBroker(broker)
        admin = cluster.admin()
        try:
            admin.create_acls([binding(G, "guarded", "User:alice", OP.READ)])
        finally:
            admin.close()
        free = cluster.call("bob", ApiKey.FIND_COORDINATOR, 3, {"key": "free", "key_type": 0})
        guarded = cluster.call("bob", ApiKey.FIND_COORDINATOR, 3,
                               {"key": "guarded", "key_type": 0})
        assert free.error_code == 0
        assert guarded.error_code == code("GROUP_AUTHORIZATION_FAILED")


def test_an_unknown_authorizer_stops_the_broker_at_start(tmp_path: Any) -> None:
    broker = EmbeddedBroker({"authorizer.class.name": "com.example.Nope"}, data_dir=tmp_path)
    with pytest.raises(RuntimeError, match=r"com\.example\.Nope"):
        broker.start()
    broker.close()
