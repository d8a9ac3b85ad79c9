"""The workload's probe send reports the broker's own answer (no retries hide it)."""

from __future__ import annotations

from strom.testing.chaos.history import History
from strom.testing.chaos.workload import create_topic, probe_send
from strom.testing.pytest_plugin import BrokerFactory


def test_a_probe_send_reports_not_enough_replicas(strom_broker_factory: BrokerFactory) -> None:
    broker = strom_broker_factory()
    create_topic(broker.bootstrap, "probe-ok", 1, 1)
    create_topic(broker.bootstrap, "probe-min-isr", 1, 1, {"min.insync.replicas": "2"})
    assert probe_send(broker.bootstrap, "probe-ok", 0) is None
    # an ISR of one below min.insync.replicas=2: Kafka's error 19 for acks=all
    assert probe_send(broker.bootstrap, "probe-min-isr", 0) == "NOT_ENOUGH_REPLICAS"


def test_a_probe_send_is_recorded_as_a_send_held_to_its_answer(
        strom_broker_factory: BrokerFactory) -> None:
    """A refused probe (error 19, nothing appended) is a failed send, an acknowledged one an
    ``ok`` with its offset: the checker then flags a refused probe that is ever read."""
    broker = strom_broker_factory()
    create_topic(broker.bootstrap, "probe-h", 1, 1)
    create_topic(broker.bootstrap, "probe-h-min-isr", 1, 1, {"min.insync.replicas": "2"})
    history = History()
    assert probe_send(broker.bootstrap, "probe-h", 0, history=history, value="p-0") is None
    assert probe_send(broker.bootstrap, "probe-h-min-isr", 0, history=history,
                      value="p-1") == "NOT_ENOUGH_REPLICAS"
    done = [op for op in history.ops if op.f == "send" and op.type != "invoke"]
    assert [(op.type, op.value.get("error")) for op in done] == [
        ("ok", None), ("fail", "NOT_ENOUGH_REPLICAS")]
    assert done[0].value["offset"] == 0
