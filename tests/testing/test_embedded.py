"""strom.testing as users use it: the pytest fixtures and the context manager."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from strom.testing import EmbeddedBroker


def test_session_fixture_is_a_real_broker(strom_broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap})
    producer.produce("fixture-topic", b"hello")  # auto-created through Metadata
    assert producer.flush(10) == 0
    topics = AdminClient({"bootstrap.servers": strom_broker.bootstrap}).list_topics(timeout=10)
    assert "fixture-topic" in topics.topics


def test_factory_applies_broker_config(strom_broker_factory: Callable[..., EmbeddedBroker]
                                       ) -> None:
    broker = strom_broker_factory({"num.partitions": 3})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("three", b"x")
    assert producer.flush(10) == 0
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert len(md.topics["three"].partitions) == 3


def test_context_manager_restart_keeps_port_and_data() -> None:
    with EmbeddedBroker() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("kept", b"v")
        assert producer.flush(10) == 0
        port = broker.port
        broker.restart()
        assert broker.port == port
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert "kept" in md.topics
        data_dir = broker.data_dir
    assert not data_dir.exists()  # the temporary directory is removed
