"""File descriptors: hundreds of partitions under ``ulimit -n 1024`` (confluent-kafka, as the
user ran it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import EmbeddedBroker

TOPICS = [f"fd{t}" for t in range(4)]
PARTITIONS = 100


def produce_to_every_partition(bootstrap: str, tag: str) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    errors: list[object] = []
    sent = set()
    for topic in TOPICS:
        for p in range(PARTITIONS):
            value = f"{tag}-{topic}-{p}".encode()
            sent.add(value)
            producer.produce(topic, value, partition=p,
                             on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return sent


def consume(bootstrap: str, starts: list[TopicPartition], count: int,
            commit: bool = False) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-readers",
                         "enable.auto.commit": False})
    consumer.assign(starts)
    seen: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error():
                raise AssertionError(msg.error())
            seen.add(msg.value())
    if commit:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def every_partition(offset: int) -> list[TopicPartition]:
    return [TopicPartition(t, p, offset) for t in TOPICS for p in range(PARTITIONS)]


def open_log_files(pid: int) -> int:
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            count += os.readlink(fd_dir / fd).endswith(".log")
        except OSError:
            continue  # closed meanwhile
    return count


def test_400_partitions_under_ulimit_1024_produce_consume_and_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, open_file_limit=1024) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS],
                                      operation_timeout=30)
        for future in futures.values():
            future.result(60)
        assert len(list(tmp_path.glob("fd*-*"))) == 4 * PARTITIONS
        first = produce_to_every_partition(broker.bootstrap, "first")
        # Committing creates __consumer_offsets too: 450 partitions in all.
        assert consume(broker.bootstrap, every_partition(-2), len(first), commit=True) == first

        # Same limit, and a pool far smaller than the partitions: idle files close and reopen.
        broker.config["log.max.open.files"] = 64
        broker.restart()
        assert consume(broker.bootstrap, every_partition(-2), len(first)) == first
        assert broker.process is not None and open_log_files(broker.process.pid) <= 64
        second = produce_to_every_partition(broker.bootstrap, "second")
        # From the committed offsets (restored after the restart): exactly the new records.
        assert consume(broker.bootstrap, every_partition(-1000), len(second)) == second
        assert open_log_files(broker.process.pid) <= 64
    output = "".join(broker.output)
    assert "Traceback" not in output and "open files" not in output
