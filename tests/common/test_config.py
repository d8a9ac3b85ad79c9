import pytest

from strom.common.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigSource,
    TopicConfig,
    validate_topic_configs,
)
from strom.common.errors import InvalidConfigError


def test_topic_keys_have_broker_synonyms() -> None:
    for key in TOPIC_KEYS.values():
        assert key.synonym in BROKER_KEYS, key.name


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
