"""Admin APIs over real sockets: exact fields that third-party clients only partly expose."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from strom.common.config import ConfigSource
from strom.common.errors import ErrorCode
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

TOPIC, BROKER = 2, 4


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"log.retention.hours": "2"}) as b:
        yield b


def create(client: RawClient, name: str, validate_only: bool = False,
           configs: dict[str, str] | None = None, partitions: int = 2) -> object:
    return client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": -1,
         "assignments": [],
         "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 1000, "validate_only": validate_only}).topics[0]


def describe(client: RawClient, rtype: int, name: str, keys: list[str] | None = None) -> dict:  # type: ignore[type-arg]
    resp = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": True})
    result = resp.results[0]
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


def test_create_validate_only_creates_nothing(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    checked = create(client, "v-only", validate_only=True)
    assert checked.error_code == 0 and checked.num_partitions == 2  # type: ignore[attr-defined]
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "v-only", "topic_id": None}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    bad = create(client, "v-bad", validate_only=True, configs={"cleanup.policy": "shred"})
    assert bad.error_code == ErrorCode.INVALID_CONFIG  # type: ignore[attr-defined]
    created = create(client, "v-real", configs={"retention.ms": "1000"})
    assert created.error_code == 0 and created.topic_id.int != 0  # type: ignore[attr-defined]
    returned = {c.name: c.value for c in created.configs}  # type: ignore[attr-defined]
    assert returned["retention.ms"] == "1000"
    client.close()


def test_describe_configs_sources_synonyms_docs(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "described", configs={"segment.ms": "60000"})
    configs = describe(client, TOPIC, "described")
    seg = configs["segment.ms"]
    assert seg.value == "60000" and seg.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert next(s.source for s in seg.synonyms) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    retention = configs["retention.ms"]
    # From the broker's static log.retention.hours=2.
    assert retention.value == str(2 * 3600_000)
    assert retention.config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert next((s.name, s.source) for s in retention.synonyms) == (
        "log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG)
    assert configs["max.message.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    assert configs["max.message.bytes"].documentation
    only = describe(client, TOPIC, "described", ["cleanup.policy"])
    assert list(only) == ["cleanup.policy"]
    broker_configs = describe(client, BROKER, "0")
    assert broker_configs["log.retention.hours"].value == "2"
    assert broker_configs["log.retention.hours"].read_only
    client.close()


def test_alter_configs_replaces_and_incremental_edits(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "altered", configs={"segment.ms": "60000"})
    resp = client.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": TOPIC, "resource_name": "altered",
         "configs": [{"name": "retention.bytes", "value": "1000000"}]}],
        "validate_only": False})
    assert resp.responses[0].error_code == 0
    configs = describe(client, TOPIC, "altered")
    assert configs["retention.bytes"].value == "1000000"
    assert configs["segment.ms"].config_source == ConfigSource.DEFAULT_CONFIG  # replaced
    resp = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC, "resource_name": "altered", "configs": [
            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
            {"name": "retention.bytes", "config_operation": 1, "value": None}]}],
        "validate_only": False})
    assert resp.responses[0].error_code == 0
    configs = describe(client, TOPIC, "altered")
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    bad = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC, "resource_name": "altered", "configs": [
            {"name": "segment.ms", "config_operation": 2, "value": "5"}]}],
        "validate_only": False})
    assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG  # type: ignore[attr-defined]
    # Overrides survive a restart.
    client.close()
    broker.restart()
    client = RawClient(broker.bootstrap)
    assert describe(client, TOPIC, "altered")["cleanup.policy"].value == "delete,compact"
    client.close()


def test_describe_log_dirs_and_cluster(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "dirs", partitions=3)
    resp = client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    result = resp.results[0]
    assert result.error_code == 0 and result.total_bytes > 0 and result.usable_bytes > 0
    topics = {t.name: sorted(p.partition_index for p in t.partitions) for t in result.topics}
    assert topics["dirs"] == [0, 1, 2]
    cluster = client.call(ApiKey.DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert cluster.error_code == 0 and [b.broker_id for b in cluster.brokers] == [0]
    assert cluster.brokers[0].port == broker.port
    client.close()


def test_create_partitions_and_delete(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "grow", partitions=1)
    resp = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "grow", "count": 4, "assignments": None}], "timeout_ms": 1000,
        "validate_only": False})
    assert resp.results[0].error_code == 0
    shrink = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "grow", "count": 2, "assignments": None}], "timeout_ms": 1000,
        "validate_only": False})
    assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS  # type: ignore[attr-defined]
    deleted = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": "grow", "topic_id": None}], "timeout_ms": 1000})
    assert deleted.responses[0].error_code == 0
    again = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": "grow", "topic_id": None}], "timeout_ms": 1000})
    assert again.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    client.close()


IGNORED = {"message.format.version": "0.10.2", "message.downconversion.enable": "false",
           "message.timestamp.difference.max.ms": "60000"}


def test_configs_kafka_3_ignores_are_accepted_with_a_warning(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("legacy-cfg", 1, 1, config=IGNORED)])
    futures["legacy-cfg"].result(10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "legacy-cfg")
    described = admin.describe_configs([resource])[resource].result(10)
    for name, value in IGNORED.items():
        assert described[name].value == value
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    alter = ConfigResource(ConfigResource.Type.TOPIC, "legacy-cfg", incremental_configs=[
        ConfigEntry("message.format.version", "2.8-IV1",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter])[alter].result(10)
    client = RawClient(broker.bootstrap)
    replaced = client.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": TOPIC, "resource_name": "legacy-cfg",
         "configs": [{"name": "message.downconversion.enable", "value": "true"}]}],
        "validate_only": False})
    assert replaced.responses[0].error_code == 0
    assert describe(client, TOPIC, "legacy-cfg")["message.downconversion.enable"].value == "true"
    # Still validated as Kafka does: a version string, a boolean.
    for name, value in (("message.format.version", "banana"),
                        ("message.downconversion.enable", "maybe")):
        bad = create(client, f"legacy-bad-{name}", configs={name: value})
        assert bad.error_code == ErrorCode.INVALID_CONFIG  # type: ignore[attr-defined]
    client.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            "message.timestamp.difference.max.ms" in line for line in broker.output):
        time.sleep(0.05)
    warnings = [line for line in broker.output if "accepted but ignored" in line]
    assert any("legacy-cfg" in w and "message.format.version" in w for w in warnings)
    assert any("message.downconversion.enable" in w for w in warnings)
    assert any("message.timestamp.difference.max.ms" in w for w in warnings)


def test_names_colliding_after_dot_to_underscore_are_refused(broker: EmbeddedBroker) -> None:
    """Kafka refuses ``a_b`` next to ``a.b`` (their metric names clash): CreateTopics with
    INVALID_TOPIC_EXCEPTION and Kafka's message, auto-creation through Metadata likewise."""
    client = RawClient(broker.bootstrap)
    assert create(client, "clash.a_b").error_code == 0  # type: ignore[attr-defined]
    refused = create(client, "clash_a.b")
    assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    assert refused.error_message == \
        "Topic 'clash_a.b' collides with existing topic: clash.a_b"  # type: ignore[attr-defined]
    for version, body in ((12, {"topics": [{"name": "clash_a_b", "topic_id": None}],
                                "allow_auto_topic_creation": True,
                                "include_topic_authorized_operations": False}),
                          (0, {"topics": ["clash_a_b"]})):  # v0 always auto-creates
        for _ in range(2):  # the same request again: not a cached UNKNOWN_TOPIC_OR_PARTITION
            md = client.call(ApiKey.METADATA, version, body)
            assert [(t.name, t.error_code) for t in md.topics] == [  # type: ignore[attr-defined]
                ("clash_a_b", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    md = client.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
    names = {t.name for t in md.topics}  # type: ignore[attr-defined]
    assert "clash.a_b" in names and not names & {"clash_a.b", "clash_a_b"}
    client.close()


def test_internal_topics_cannot_be_deleted_grown_or_truncated(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "kept-offsets", partitions=1)
    assert client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g-internal", "key_type": 0}
                       ).error_code == 0
    deadline = time.monotonic() + 10
    while True:  # NOT_COORDINATOR / LOAD_IN_PROGRESS until the new topic's shards load
        commit = client.call(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": "g-internal", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "kept-offsets", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        if commit.topics[0].partitions[0].error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert commit.topics[0].partitions[0].error_code == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=30)
    error = refused.value.args[0]
    assert error.code() == ConfluentError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    deleted = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [
        {"name": "__consumer_offsets", "topic_id": None}], "timeout_ms": 1000}).responses[0]
    assert deleted.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    assert deleted.error_message == (
        "Topic __consumer_offsets is an internal topic and cannot be deleted.")
    grown = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "__consumer_offsets", "count": 60, "assignments": None}], "timeout_ms": 1000,
        "validate_only": True})
    assert grown.results[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    truncated = client.call(ApiKey.DELETE_RECORDS, 2, {"topics": [
        {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": -1}]}],
        "timeout_ms": 1000})
    assert truncated.topics[0].partitions[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    # The committed offset survived every attempt.
    fetched = client.call(ApiKey.OFFSET_FETCH, 7, {
        "group_id": "g-internal", "topics": [{"name": "kept-offsets", "partition_indexes": [0]}],
        "require_stable": False})
    assert fetched.topics[0].partitions[0].committed_offset == 42
    client.close()


def test_no_null_where_kafka_sends_a_value(broker: EmbeddedBroker) -> None:
    # Kafka leaves these at their schema defaults ("" and an empty list), or sets them.
    client = RawClient(broker.bootstrap)
    failed = create(client, "nn-bad", configs={"cleanup.policy": "shred"})
    assert failed.error_code == ErrorCode.INVALID_CONFIG  # type: ignore[attr-defined]
    assert failed.configs == []  # type: ignore[attr-defined]
    described = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": BROKER, "resource_name": "", "configuration_keys": ["num.partitions"]}],
        "include_synonyms": False, "include_documentation": False}).results[0]
    assert (described.error_code, described.error_message) == (0, "")
    old = client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "nn-group", "key_type": 0})
    assert (old.error_code, old.error_message) == (0, "NONE")  # Errors.NONE.message()
    new = client.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                   "coordinator_keys": ["nn-group"]})
    assert [(c.error_code, c.error_message) for c in new.coordinators] == [(0, "")]
    client.close()


def test_each_created_topic_lists_its_own_configs(broker: EmbeddedBroker) -> None:
    """Topics of one request with the same configs share a listing; others get their own."""
    client = RawClient(broker.bootstrap)
    wanted = [{}, {"retention.ms": "1000"}, {}, {"retention.ms": "2000"}, {"retention.ms": "1000"}]
    resp = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": f"own-{i}", "num_partitions": 1, "replication_factor": -1, "assignments": [],
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}
        for i, configs in enumerate(wanted)], "timeout_ms": 1000, "validate_only": False})
    listed = [{c.name: c.value for c in t.configs} for t in resp.topics]  # type: ignore[attr-defined]
    assert [t.name for t in resp.topics] == [f"own-{i}" for i in range(5)]  # type: ignore[attr-defined]
    assert [c["retention.ms"] for c in listed] == ["7200000", "1000", "7200000", "2000", "1000"]
    client.close()
