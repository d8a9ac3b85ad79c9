"""The workload's probe send reports the broker's own answer (no retries hide it)."""

from __future__ import annotations

from strom.testing.chaos.workload import create_topic, probe_send
from strom.testing.pytest_plugin import BrokerFactory


def test_a_probe_send_reports_not_enough_replicas(strom_broker_factory: BrokerFactory) -> None:
    broker = strom_broker_factory()
    create_topic(broker.bootstrap, "probe-ok", 1, 1)
    create_topic(broker.bootstrap, "probe-min-isr", 1, 1, {"min.insync.replicas": "2"})
    assert probe_send(broker.bootstrap, "probe-ok", 0) is None
    # an ISR of one below min.insync.replicas=2: Kafka's error 19 for acks=all
    assert probe_send(broker.bootstrap, "probe-min-isr", 0) == "NOT_ENOUGH_REPLICAS"
