"""A broker on a data directory with many partitions answers at once, opens the logs behind
its listener (a log a request needs at once), and stops on SIGTERM within seconds while it is
still opening them or creating partitions — without losing an acknowledged record or leaving
half a topic behind. (The 10,000 and 100,000-partition figures are in docs/benchmarks.md.)"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE
from strom.testing import EmbeddedBroker
from strom.testing.data_dir import make_data_dir

TOPICS, PARTITIONS = 30, 100  # 3,000 partition directories
LAST = f"t{TOPICS - 1:05d}"
STOP_BOUND_S = 15.0


def opened_line(broker: EmbeddedBroker) -> str | None:
    return next((line for line in broker.output if "opened" in line and "partitions in" in line),
                None)


def wait_for(condition: object, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def stop_within(broker: EmbeddedBroker, bound_s: float) -> float:
    assert broker.process is not None
    began = time.monotonic()
    broker.process.send_signal(signal.SIGTERM)
    code = broker.process.wait(60)
    took = time.monotonic() - began
    assert code == 0
    assert took < bound_s, f"stopped {took:.1f} s after SIGTERM"
    broker.process = None
    return took


def read(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


@pytest.mark.parametrize("clean", [True, False])
def test_many_partitions_answer_at_once_and_stop_on_sigterm_while_loading(
        tmp_path: Path, clean: bool) -> None:
    make_data_dir(tmp_path, topics=TOPICS, partitions=PARTITIONS, clean=clean)
    broker = EmbeddedBroker(data_dir=tmp_path, log_level="INFO").start()
    try:
        # Listening, and answering, before the logs are all open: they open behind it.
        assert opened_line(broker) is None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=30).topics
        assert len(topics[LAST].partitions) == PARTITIONS
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(5):  # the last partition's log is opened for this request
            producer.produce(LAST, f"r{i}".encode(), partition=PARTITIONS - 1)
        assert producer.flush(30) == 0
        stop_within(broker, STOP_BOUND_S)  # most logs are still being opened
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists() == clean  # recovery still due
        broker.start()
        assert read(broker.bootstrap, LAST, PARTITIONS - 1, 5) == [
            f"r{i}".encode() for i in range(5)]
        wait_for(lambda: opened_line(broker) is not None)
        line = opened_line(broker)  # … and __consumer_offsets (the reading consumer's group)
        assert line is not None and f"({TOPICS * PARTITIONS + 50} hosted)" in line
        stop_within(broker, STOP_BOUND_S)  # every log open: all of them closed
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        broker.close()


def test_sigterm_while_creating_partitions_stops_and_leaves_all_or_nothing(
        tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        outcome: list[object] = []

        def create() -> None:
            try:
                admin.create_topics([NewTopic("wide", 9_000, 1)],
                                    request_timeout=120)["wide"].result(120)
                outcome.append("created")
            except Exception as exc:  # the broker went away mid-request
                outcome.append(exc)

        creator = threading.Thread(target=create, daemon=True)
        creator.start()
        time.sleep(1.0)  # its logs are being created
        stop_within(broker, STOP_BOUND_S)
        creator.join(130)
        broker.start()
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
            timeout=30).topics
        made = sorted(p.name for p in tmp_path.glob("wide-*"))
        if "wide" in topics:  # written before the stop: whole
            assert len(topics["wide"].partitions) == 9_000 and len(made) == 9_000
        else:  # not written: no log of it is left
            assert made == []
    finally:
        broker.close()
