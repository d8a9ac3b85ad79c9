"""Dynamic broker configs (KIP-226) over real sockets: confluent-kafka's AdminClient where it
can name the resource, the raw wire where it cannot (librdkafka refuses the cluster-default
resource name ""), applied to the running broker and kept across a restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from strom.common.errors import ErrorCode
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

BROKER, TOPIC = 4, 2
SET, DELETE = 0, 1
STATIC = {"log.retention.hours": "2", "log.retention.check.interval.ms": "200"}
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config=STATIC) as b:
        yield b


@pytest.fixture
def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(autouse=True)
def no_dynamic_configs(broker: EmbeddedBroker) -> Iterator[None]:
    """Each test starts and ends without dynamic configs (the broker is shared)."""
    yield
    client = RawClient(broker.bootstrap)
    for name in ("", "0"):
        assert alter(client, name, {}).error_code == 0
    client.close()


def alter(client: RawClient, name: str, configs: dict[str, str | None],
          validate_only: bool = False) -> object:
    """Legacy AlterConfigs of one broker resource: replaces its whole set."""
    return client.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": BROKER, "resource_name": name,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only}).responses[0]


def incremental(client: RawClient, name: str, ops: list[tuple[str, int, str | None]],
                resource_type: int = BROKER) -> object:
    return client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": False}).responses[0]


def describe(client: RawClient, name: str, resource_type: int = BROKER) -> object:
    return client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False}).results[0]


def set_broker(admin: AdminClient, name: str, **configs: str) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(10)


def broker_configs(admin: AdminClient, name: str = "0") -> dict[str, object]:
    resource = ConfigResource(ConfigResource.Type.BROKER, name)
    return admin.describe_configs([resource])[resource].result(10)  # type: ignore[no-any-return]


def new_topic(admin: AdminClient, config: dict[str, str] | None = None) -> str:
    name = f"dyn-{uuid.uuid4().hex[:8]}"
    future = admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name]
    future.result(10)
    return name


def produce(bootstrap: str, topic: str, value: bytes, count: int = 1) -> list[object]:
    """Produce ``count`` records one batch each; the delivery errors (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "message.max.bytes": 10_000_000})
    outcomes: list[object] = []
    for _ in range(count):
        producer.produce(topic, value=value, on_delivery=lambda err, _m: outcomes.append(err))
        producer.flush(10)
    assert len(outcomes) == count
    return outcomes


def test_per_broker_config_through_confluent_admin(broker: EmbeddedBroker,
                                                    admin: AdminClient) -> None:
    set_broker(admin, "0", log_retention_ms="3600000", message_max_bytes="2000000")
    configs = broker_configs(admin)
    retention = configs["log.retention.ms"]
    assert retention.value == "3600000"  # type: ignore[attr-defined]
    assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value  # type: ignore[attr-defined]
    assert not retention.is_read_only  # type: ignore[attr-defined]
    hours = configs["log.retention.hours"]
    assert hours.source == ConfigSource.STATIC_BROKER_CONFIG.value  # type: ignore[attr-defined]
    assert hours.is_read_only  # type: ignore[attr-defined]
    assert configs["message.max.bytes"].value == "2000000"  # type: ignore[attr-defined]
    assert configs["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value  # type: ignore[attr-defined]
    # Synonyms in Kafka's order (by layer, then unit), exact on the wire.
    client = RawClient(broker.bootstrap)
    entries = {c.name: c for c in describe(client, "0").configs}  # type: ignore[attr-defined]
    assert [(s.name, s.value, s.source) for s in entries["log.retention.ms"].synonyms] == [
        ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]
    assert [s.name for s in entries["log.retention.hours"].synonyms] == [
        "log.retention.hours", "log.retention.hours"]  # starts at the key described
    # A DELETE restores the static / default value.
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    after = broker_configs(admin)
    assert after["log.retention.ms"].value == str(2 * 3600_000)  # type: ignore[attr-defined]
    assert after["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # type: ignore[attr-defined]
    assert after["message.max.bytes"].value == "2000000"  # type: ignore[attr-defined]
    client.close()


def test_cluster_default_resource(broker: EmbeddedBroker, admin: AdminClient) -> None:
    client = RawClient(broker.bootstrap)
    assert describe(client, "").configs == []  # type: ignore[attr-defined]
    result = incremental(client, "", [("log.segment.bytes", SET, "1048576"),
                                      ("log.cleanup.policy", 2, "compact")])
    assert result.error_code == 0, result.error_message  # type: ignore[attr-defined]
    defaults = describe(client, "")
    assert defaults.error_code == 0  # type: ignore[attr-defined]
    assert {(c.name, c.value, c.config_source, c.read_only)
            for c in defaults.configs} == {  # type: ignore[attr-defined]
        ("log.segment.bytes", "1048576", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False),
        ("log.cleanup.policy", "delete,compact",
         ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)}
    assert all([s.source for s in c.synonyms] == [ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value]
               for c in defaults.configs)  # type: ignore[attr-defined]
    # The broker's own view: a default, below a per-broker value.
    set_broker(admin, "0", log_segment_bytes="2097152")
    segment = broker_configs(admin)["log.segment.bytes"]
    assert segment.value == "2097152"  # type: ignore[attr-defined]
    assert segment.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value  # type: ignore[attr-defined]
    entry = next(c for c in describe(client, "0").configs  # type: ignore[attr-defined]
                 if c.name == "log.segment.bytes")
    assert [(s.value, s.source) for s in entry.synonyms] == [
        ("2097152", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("1048576", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("1073741824", ConfigSource.DEFAULT_CONFIG.value)]
    # Topics without an override describe the new default and where it comes from.
    topic = new_topic(admin)
    tconfigs = {c.name: c for c in describe(client, topic, TOPIC).configs}  # type: ignore[attr-defined]
    assert tconfigs["cleanup.policy"].value == "delete,compact"
    assert tconfigs["cleanup.policy"].config_source == (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert [s.source for s in tconfigs["segment.bytes"].synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value]
    client.close()


@pytest.mark.parametrize(("name", "configs", "message"), [
    ("0", {"log.dirs": "/elsewhere"}, "Cannot update these configs dynamically: Set(log.dirs)"),
    ("", {"num.partitions": "3", "log.retention.hours": "1", "log.retention.ms": "5"},
     "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)"),
    ("0", {"log.message.format.version": "2.8"},
     "Cannot update these configs dynamically: Set(log.message.format.version)"),
    ("0", {"no.such.config": "1"}, "Cannot update these configs dynamically: Set(no.such.config)"),
    ("0", {"log.retention.ms": "soon"},
     "Invalid value 'soon' for configuration log.retention.ms: expected long"),
    ("0", {"log.segment.bytes": "10"},
     "Invalid value '10' for configuration log.segment.bytes: must be at least 14"),
    ("5", {"log.retention.ms": "5"}, "Unexpected broker id, expected 0, but received 5"),
    ("zero", {"log.retention.ms": "5"}, "Node id must be an integer, but it is: zero"),
    ("0", {"log.retention.ms": None}, "Null value not supported for : log.retention.ms"),
])
def test_refused_with_kafkas_error_and_message(broker: EmbeddedBroker, name: str,
                                               configs: dict[str, str | None],
                                               message: str) -> None:
    client = RawClient(broker.bootstrap)
    before = describe(client, "0").configs  # type: ignore[attr-defined]
    for validate_only in (True, False):
        result = alter(client, name, configs, validate_only)
        assert (result.error_code, result.error_message) == (  # type: ignore[attr-defined]
            ErrorCode.INVALID_REQUEST, message)
    assert describe(client, "0").configs == before  # type: ignore[attr-defined]
    client.close()


def test_refusals_through_confluent_admin(admin: AdminClient) -> None:
    bad = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.hours", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in info.value.args[0].str()
    legacy = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"log.dirs": "/x"})
    with pytest.raises(KafkaException) as info:
        admin.alter_configs([legacy])[legacy].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_request_level_checks(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    dup_keys = incremental(client, "0", [("log.retention.ms", SET, "5"),
                                         ("log.retention.ms", DELETE, None)])
    assert (dup_keys.error_code, dup_keys.error_message) == (  # type: ignore[attr-defined]
        ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    append = incremental(client, "0", [("log.retention.ms", 2, "5")])
    assert append.error_code == ErrorCode.INVALID_CONFIG  # type: ignore[attr-defined]
    twice = client.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": BROKER, "resource_name": "0", "configs": []},
        {"resource_type": BROKER, "resource_name": "0", "configs": []}],
        "validate_only": False}).responses
    assert [(r.error_code, r.error_message) for r in twice] == [
        (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
    described = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": BROKER, "resource_name": n, "configuration_keys": None}
        for n in ("7", "x")], "include_synonyms": False, "include_documentation": False})
    assert [(r.error_code, r.error_message) for r in described.results] == [
        (ErrorCode.INVALID_REQUEST,
         "Unexpected broker id, expected 0 or empty string, but received 7"),
        (ErrorCode.INVALID_REQUEST, "Broker id must be an integer, but it is: x")]
    client.close()


def test_validate_only_changes_nothing(broker: EmbeddedBroker, admin: AdminClient) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], validate_only=True)[resource].result(10)
    assert broker_configs(admin)["log.retention.ms"].source == (  # type: ignore[attr-defined]
        ConfigSource.DEFAULT_CONFIG.value)
    client = RawClient(broker.bootstrap)
    assert alter(client, "", {"message.max.bytes": "1024"}, validate_only=True).error_code == 0  # type: ignore[attr-defined]
    assert describe(client, "").configs == []  # type: ignore[attr-defined]
    client.close()


def test_legacy_alter_configs_replaces_the_whole_set(admin: AdminClient) -> None:
    set_broker(admin, "0", log_retention_ms="1000", log_roll_ms="60000")
    legacy = ConfigResource(ConfigResource.Type.BROKER, "0",
                            set_config={"log.roll.ms": "120000"})
    admin.alter_configs([legacy])[legacy].result(10)
    configs = broker_configs(admin)
    assert configs["log.roll.ms"].value == "120000"  # type: ignore[attr-defined]
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # type: ignore[attr-defined]


def test_message_max_bytes_applies_at_once(broker: EmbeddedBroker, admin: AdminClient) -> None:
    plain = new_topic(admin)
    own = new_topic(admin, {"max.message.bytes": "100000"})
    value = b"x" * 5000
    assert produce(broker.bootstrap, plain, value) == [None]
    client = RawClient(broker.bootstrap)
    assert alter(client, "", {"message.max.bytes": "1024"}).error_code == 0  # type: ignore[attr-defined]
    refused = produce(broker.bootstrap, plain, value)
    assert refused[0] is not None
    assert refused[0].code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[attr-defined]
    assert produce(broker.bootstrap, own, value) == [None]  # its override wins
    set_broker(admin, "0", message_max_bytes="10000")  # this broker's value beats the default
    assert produce(broker.bootstrap, plain, value) == [None]
    client.close()


def test_segment_and_retention_defaults_apply_to_running_topics(
        broker: EmbeddedBroker, admin: AdminClient) -> None:
    topic = new_topic(admin)
    set_broker(admin, "0", log_segment_bytes="2000")
    assert produce(broker.bootstrap, topic, b"y" * 1500, count=6) == [None] * 6
    directory = broker.data_dir / f"{topic}-0"
    assert len(list(directory.glob("*.log"))) >= 5  # rolled at the new segment size
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dyn"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0] == 0
    set_broker(admin, "0", log_retention_ms="1")
    deadline = time.monotonic() + 20
    low = 0
    while low == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        low = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    consumer.close()
    assert low >= 5  # retention deleted every inactive segment


def test_dynamic_configs_survive_a_restart(broker: EmbeddedBroker, admin: AdminClient) -> None:
    client = RawClient(broker.bootstrap)
    assert alter(client, "", {"message.max.bytes": "1024",
                              "log.retention.ms": "7200000"}).error_code == 0  # type: ignore[attr-defined]
    set_broker(admin, "0", log_retention_ms="3600000")
    client.close()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    client = RawClient(broker.bootstrap)
    configs = broker_configs(admin)
    assert configs["log.retention.ms"].value == "3600000"  # type: ignore[attr-defined]
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value  # type: ignore[attr-defined]
    assert configs["message.max.bytes"].source == (  # type: ignore[attr-defined]
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert {c.name for c in describe(client, "").configs} == {  # type: ignore[attr-defined]
        "message.max.bytes", "log.retention.ms"}
    refused = produce(broker.bootstrap, new_topic(admin), b"z" * 5000)
    assert refused[0] is not None
    assert refused[0].code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[attr-defined]
    client.close()


def test_replication_throttle_configs_are_accepted_as_kafka_tools_set_them(
        admin: AdminClient) -> None:
    """What kafka-reassign-partitions.sh --throttle writes is accepted and described."""
    set_broker(admin, "0", leader_replication_throttled_rate="1000000",
               follower_replication_throttled_rate="1000000")
    configs = broker_configs(admin)
    assert configs["leader.replication.throttled.rate"].value == "1000000"  # type: ignore[attr-defined]
    name = new_topic(admin, {"leader.replication.throttled.replicas": "0:0",
                             "follower.replication.throttled.replicas": "*"})
    topic = ConfigResource(ConfigResource.Type.TOPIC, name)
    described = admin.describe_configs([topic])[topic].result(10)
    assert described["follower.replication.throttled.replicas"].value == "*"  # type: ignore[attr-defined]
    bad = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[ConfigEntry(
        "leader.replication.throttled.replicas", "0", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
