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


@pytest.mark.parametrize("one_record_per_batch", [False, True])
def test_only_keyless_records_fail_with_record_errors(broker: EmbeddedBroker,
                                                      one_record_per_batch: bool) -> None:
    """librdkafka's test 0011 (record errors, KIP-467): 100 records, every tenth without a key.
    In one batch, the broker refuses the batch and lists the keyless records: those fail with
    INVALID_RECORD, the rest with _INVALID_DIFFERENT_RECORD; one record per batch, the 90
    keyed records are delivered."""
    topic = f"record-errors-{int(one_record_per_batch)}"
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    # A long linger keeps the 100 records in one batch however slow the machine; flush()
    # sends at once.
    config: dict[str, object] = {"bootstrap.servers": broker.bootstrap, "linger.ms": 10_000}
    if one_record_per_batch:
        config["batch.size"] = 1
    producer = Producer(config)
    outcomes: dict[int, KafkaError | None] = {}

    def report(err: KafkaError | None, msg: object) -> None:
        outcomes[int(msg.value().rsplit(b"#", 1)[1])] = err  # type: ignore[attr-defined]

    for i in range(100):
        producer.produce(topic, value=f"record #{i}".encode(), partition=0,
                         key=None if i % 10 == 0 else f"k{i}".encode(), on_delivery=report)
    assert producer.flush(30) == 0
    keyless = [outcomes[i] for i in range(0, 100, 10)]
    keyed = [outcomes[i] for i in range(100) if i % 10]
    assert all(e is not None and e.code() == KafkaError.INVALID_RECORD for e in keyless)
    if one_record_per_batch:
        assert keyed == [None] * 90
        assert len(consume_to_end(broker.bootstrap, topic, 1)) == 90
    else:
        assert all(e is not None and e.code() == KafkaError._INVALID_DIFFERENT_RECORD
                   for e in keyed)
        assert consume_to_end(broker.bootstrap, topic, 1) == []
