import pytest

from strom.common.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigSource,
    TopicConfig,
    ignored_config_notes,
    validate_dynamic_broker_configs,
    validate_topic_configs,
)
from strom.common.errors import InvalidConfigError, InvalidRequestError


def test_topic_keys_have_broker_synonyms() -> None:
    for key in TOPIC_KEYS.values():
        if key.name.endswith(".replication.throttled.replicas"):  # none in Kafka either
            assert key.synonym is None
        else:
            assert key.synonym in BROKER_KEYS, key.name


@pytest.mark.parametrize(("value", "valid"), [
    ("*", True), ("", True), ("0:1,1:2", True), (" 0:1 , 3:0", True),
    ("*,0:1", False), ("0", False), ("a:1", False), ("0:-1", False)])
def test_throttled_replica_lists_are_kafkas(value: str, valid: bool) -> None:
    for name in ("leader.replication.throttled.replicas",
                 "follower.replication.throttled.replicas"):
        if valid:
            validate_topic_configs({name: value})
        else:
            with pytest.raises(InvalidConfigError, match="literal '\\*'"):
                validate_topic_configs({name: value})
    assert ignored_config_notes(BROKER_KEYS, ["leader.replication.throttled.rate"]) == []


def test_topic_value_precedence() -> None:
    broker = BrokerConfig({"log.retention.hours": "2"})
    assert TopicConfig(broker, {}).retention_ms == 2 * 3600_000
    assert broker.topic_default_source("retention.ms") == (
        ConfigSource.STATIC_BROKER_CONFIG, "log.retention.hours")
    topic = TopicConfig(broker, validate_topic_configs({"retention.ms": "1000"}))
    assert topic.retention_ms == 1000
    assert TopicConfig(BrokerConfig(), {}).retention_ms == 7 * 24 * 3600_000


@pytest.mark.parametrize(
    ("name", "value"),
    [("retention.ms", "abc"), ("cleanup.policy", "shred"), ("segment.bytes", "1"),
     ("min.cleanable.dirty.ratio", "2"), ("no.such.key", "1"), ("preallocate", "yes")],
)
def test_invalid_topic_configs_are_rejected(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError):
        validate_topic_configs({name: value})


def test_unknown_broker_key_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="Unknown broker configuration key"):
        BrokerConfig({"log.retention.dayz": 1})


def test_list_and_bool_parsing() -> None:
    parsed = validate_topic_configs({"cleanup.policy": "compact, delete", "preallocate": "TRUE"})
    assert parsed == {"cleanup.policy": ["compact", "delete"], "preallocate": True}


def test_dynamic_layers_take_precedence_in_kafkas_order() -> None:
    static = BrokerConfig({"log.retention.hours": "2", "message.max.bytes": "5000"})
    config = static.with_dynamic({"log.retention.ms": "60000", "message.max.bytes": "4000"},
                                 {"message.max.bytes": "3000"})
    assert config.get("log.retention.ms") == 60000  # beats the static hours
    assert config.get("message.max.bytes") == 3000
    assert TopicConfig(config, {}).retention_ms == 60000
    assert config.topic_default_source("max.message.bytes") == (
        ConfigSource.DYNAMIC_BROKER_CONFIG, "message.max.bytes")
    assert [(s.name, s.value, s.source) for s in config.synonyms(["message.max.bytes"])] == [
        ("message.max.bytes", 3000, ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("message.max.bytes", 4000, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", 5000, ConfigSource.STATIC_BROKER_CONFIG),
        ("message.max.bytes", 1048588, ConfigSource.DEFAULT_CONFIG)]
    assert static.get("message.max.bytes") == 5000  # unchanged: configs are immutable
    back = config.with_dynamic({}, {})
    assert back.get("message.max.bytes") == 5000 and back.get("log.retention.ms") == 7200000


def test_stored_dynamic_configs_that_cannot_apply_are_left_out() -> None:
    config = BrokerConfig().with_dynamic(
        {"log.dirs": "/x", "log.segment.bytes": "12", "log.roll.ms": "1000"}, {})
    assert config.layer(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) == {"log.roll.ms": 1000}


def test_dynamic_broker_config_validation_uses_kafkas_messages() -> None:
    assert validate_dynamic_broker_configs({"log.cleanup.policy": "compact,delete"}) == {
        "log.cleanup.policy": ["compact", "delete"]}
    with pytest.raises(InvalidRequestError) as refused:
        validate_dynamic_broker_configs({"node.id": "1", "a.b": "2", "log.retention.ms": "3"})
    assert refused.value.message == "Cannot update these configs dynamically: Set(a.b, node.id)"
    with pytest.raises(InvalidRequestError, match=r"log\.retention\.ms: expected long"):
        validate_dynamic_broker_configs({"log.retention.ms": "x"})
    for key in BROKER_KEYS.values():  # what Kafka never changes at run time stays static
        if key.read_only or key.name.startswith(("group.", "offsets.", "num.")):
            assert not key.dynamic, key.name


@pytest.mark.parametrize(("value", "valid"), [
    ("0.10.2", True), ("0.10.2.1", True), ("0.10.1-IV2", True), ("0.10.1-IV3", False),
    ("2.8", True), ("2.8-IV1", True), ("3.0-IV1", True), ("3.9.0", True), ("0.8.0-IV0", False),
    ("1.2", False), ("banana", False), ("", False),
])
def test_message_format_version_takes_kafka_versions(value: str, valid: bool) -> None:
    if valid:
        assert validate_topic_configs({"message.format.version": value})
    else:
        with pytest.raises(InvalidConfigError, match="is not a valid version"):
            validate_topic_configs({"message.format.version": value})


def test_ignored_configs_are_named_in_warnings() -> None:
    notes = ignored_config_notes(TOPIC_KEYS, ["retention.ms", "message.format.version",
                                              "message.downconversion.enable", "nope"])
    assert [n.split(" is ")[0] for n in notes] == [
        "Configuration message.format.version", "Configuration message.downconversion.enable"]
    assert all("accepted but ignored" in n for n in notes)
    assert ignored_config_notes(BROKER_KEYS, ["log.message.timestamp.difference.max.ms"])


@pytest.mark.parametrize("values, node_id", [
    ({}, 0), ({"broker.id": "3"}, 3), ({"node.id": "4"}, 4),
    ({"broker.id": "2", "node.id": "2"}, 2)])
def test_broker_id_is_a_synonym_of_node_id(values: dict[str, str], node_id: int) -> None:
    config = BrokerConfig(values)
    assert config.get("node.id") == node_id and config.get("broker.id") == node_id


def test_broker_id_and_node_id_must_agree() -> None:
    with pytest.raises(InvalidConfigError,
                       match=r"broker.id \(1\) and node.id \(2\) must be equal"):
        BrokerConfig({"broker.id": "1", "node.id": "2"})


@pytest.mark.parametrize("connect, problem", [
    ("zk1:2181", None), ("zk1:2181,zk2:2182/strom/a", None), ("[::1]:2181", None),
    ("zk1", "'zk1' is not host:port"), ("zk1:2181,:2181", "':2181' is not host:port"),
    ("zk1:99999", "is not host:port"), ("zk1:2181/", "the chroot '/' is not"),
    ("zk1:2181/a//b", "is not a ZooKeeper path")])
def test_zookeeper_connect_is_checked(connect: str, problem: str | None) -> None:
    if problem is None:
        assert BrokerConfig({"zookeeper.connect": connect}).get("zookeeper.connect") == connect
    else:
        with pytest.raises(InvalidConfigError, match=problem):
            BrokerConfig({"zookeeper.connect": connect})
