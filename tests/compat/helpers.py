"""Shared helpers for the compatibility tests (librdkafka-based produce / consume)."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
    )
    for future in futures.values():
        future.result(timeout=30)


def produce_all(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]],
                **config: object) -> list[tuple[int, int]]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, value=value, key=key, on_delivery=on_delivery,
                         headers=[("h", b"v")] if key else None)
    assert producer.flush(30) == 0
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: int, count: int,
                **config: object) -> list[object]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat",
                         "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    messages: list[object] = []
    deadline = time.monotonic() + 30
    while len(messages) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(msg.error())
        messages.append(msg)
    consumer.close()
    return messages



def consume_to_end(bootstrap: str, topic: str, partitions: int, **config: object
                   ) -> list[object]:
    """Everything currently in the partitions, stopping at each partition's end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat",
                         "enable.auto.commit": False, "enable.partition.eof": True, **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    messages: list[object] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < partitions and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise AssertionError(msg.error())
        at_end.discard(msg.partition())
        messages.append(msg)
    consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return messages
