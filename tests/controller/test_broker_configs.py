"""BrokerConfigAdmin: Kafka's checks on dynamic broker configs and what it writes."""

from __future__ import annotations

import logging

import pytest

from strom.common.errors import InvalidRequestError
from strom.controller.broker_configs import BrokerConfigAdmin
from strom.metadata.image import BrokerInfo
from strom.testing.metadata import MemoryMetadataStore


def admin() -> tuple[MemoryMetadataStore, BrokerConfigAdmin]:
    store = MemoryMetadataStore()
    store.register_broker(BrokerInfo(2, "h", 9092))
    return store, BrokerConfigAdmin(store, 2)


def test_default_and_per_broker_sets_are_replaced_whole() -> None:
    store, configs = admin()
    configs.set_configs("", {"log.retention.ms": "1000"})
    configs.set_configs("+2", {"message.max.bytes": "2048"})  # parsed as Java parses ints
    assert store.image.broker_configs == {"": {"log.retention.ms": "1000"},
                                          "2": {"message.max.bytes": "2048"}}
    assert configs.configs("02") == {"message.max.bytes": "2048"}
    configs.set_configs("2", {})
    assert store.image.broker_configs == {"": {"log.retention.ms": "1000"}}


def test_validate_only_writes_nothing() -> None:
    store, configs = admin()
    before = store.image
    configs.set_configs("", {"log.retention.ms": "1000"}, validate_only=True)
    assert store.image is before


@pytest.mark.parametrize(("resource", "values", "message"), [
    ("3", {"log.retention.ms": "1"}, "Unexpected broker id, expected 2, but received 3"),
    ("two", {"log.retention.ms": "1"}, "Node id must be an integer, but it is: two"),
    ("2", {"log.dirs": "/x"}, "Cannot update these configs dynamically: Set(log.dirs)"),
    ("", {"log.flush.interval.messages": "0"},
     "Invalid value '0' for configuration log.flush.interval.messages: must be at least 1"),
])
def test_refusals(resource: str, values: dict[str, str], message: str) -> None:
    store, configs = admin()
    before = store.image
    with pytest.raises(InvalidRequestError) as refused:
        configs.set_configs(resource, values)
    assert refused.value.message == message
    assert store.image is before


def test_ignored_keys_are_stored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    store, configs = admin()
    with caplog.at_level(logging.WARNING, logger="strom.controller"):
        configs.set_configs("", {"log.message.downconversion.enable": "false"})
    assert store.image.broker_configs[""] == {"log.message.downconversion.enable": "false"}
    assert "log.message.downconversion.enable is accepted but ignored" in caplog.text
