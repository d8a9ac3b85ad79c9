"""A compacted topic keeps the last value per key after the broker's cleaner runs; tombstones
disappear after delete.retention.ms; keyless records are refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer

from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_to_end, create_topic


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"log.cleaner.backoff.ms": 100}) as b:
        yield b


def test_compacted_topic_keeps_latest_value_per_key(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, "table", 1, {
        "cleanup.policy": "compact", "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "500",
        "file.delete.delay.ms": "0"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.size": 1000})
    failures: list[KafkaError] = []

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce("table", key=key, value=value,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)

    for round_ in range(20):
        for key in range(10):
            send(f"k{key}".encode(), f"v{round_}".encode())
        producer.flush(10)
    send(b"k3", None)  # tombstone
    for key in range(40):  # roll the active segment so earlier ones become cleanable
        send(f"filler{key}".encode(), b"x" * 100)
    producer.flush(10)
    assert not failures

    def latest() -> dict[bytes, bytes | None]:
        seen: dict[bytes, bytes | None] = {}
        for m in consume_to_end(broker.bootstrap, "table", 1):
            seen[m.key()] = m.value()  # type: ignore[attr-defined]
        return seen

    produced = 20 * 10 + 1 + 40

    def wait_until(done: object) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not done():  # type: ignore[operator]
            time.sleep(0.3)

    def compacted() -> bool:
        keys = [m.key() for m in consume_to_end(broker.bootstrap, "table", 1)]  # type: ignore[attr-defined]
        return len(keys) < produced and len(keys) == len(set(keys))

    wait_until(compacted)
    values = latest()
    assert all(values[f"k{key}".encode()] == b"v19" for key in range(10) if key != 3)
    # As in Kafka, the first pass keeps the tombstone (consumers must be able to see it) and
    # a later pass, after delete.retention.ms, drops it. New writes make the log dirty again.
    assert values.get(b"k3", b"gone") is None
    time.sleep(0.6)
    for key in range(60):
        send(f"more{key}".encode(), b"y" * 100)
    producer.flush(10)
    assert not failures
    wait_until(lambda: b"k3" not in latest())
    values = latest()
    assert b"k3" not in values
    assert all(values[f"k{key}".encode()] == b"v19" for key in range(10) if key != 3)
    offsets = [m.offset() for m in consume_to_end(broker.bootstrap, "table", 1)]  # type: ignore[attr-defined]
    assert offsets == sorted(offsets) and len(offsets) < produced + 60
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # offsets kept: gaps


def test_keyless_records_are_refused_on_compacted_topics(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, "keyed-only", 1, {"cleanup.policy": "compact"})
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce("keyed-only", value=b"no key",
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
