"""kafka-python 3.x against a real strom broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import (
    InvalidRecordError,
    KafkaError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
)

from strom.testing import EmbeddedBroker

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker: EmbeddedBroker, new_topic: Callable[..., str],
                         codec: str | None) -> None:
    topic = new_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                             linger_ms=5)
    futures = [
        producer.send(topic, value=f"v{i}".encode(), key=(f"k{i % 5}".encode() if i % 2 else None),
                      headers=[("n", str(i).encode())])
        for i in range(1000)
    ]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in metas}) == 1000

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    got = []
    for record in consumer:
        got.append(record)
        if len(got) == 1000:
            break
    consumer.close()
    assert len(got) == 1000
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))
    assert {r.value for r in got} == {f"v{i}".encode() for i in range(1000)}
    assert all(r.headers[0][0] == "n" for r in got)


def test_admin(broker: EmbeddedBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp-admin", 3, 1, topic_configs={"segment.ms": "60000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-admin", 3, 1)])
    assert "kp-admin" in admin.list_topics()
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
    text = repr(described)
    assert "segment.ms" in text and "60000" in text
    admin.delete_topics(["kp-admin"])
    admin.close()


def test_kafka_python_infers_kafka_4_3(broker: EmbeddedBroker) -> None:
    # kafka-python infers the broker's version from the ApiVersions it lists (3.8 before
    # the 4.x maxima); strom answers as Kafka 4.3 would (docs/protocol.md).
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin._client.check_version() == (4, 3)
    finally:
        admin.close()


@pytest.mark.parametrize("reset", ["earliest", "none"])
def test_seek_past_the_end_applies_auto_offset_reset(
    broker: EmbeddedBroker, new_topic: Callable[..., str], reset: str
) -> None:
    topic = new_topic()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(3):
        producer.send(topic, value=b"v%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset=reset)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 100)  # past the end: the fetch answers OFFSET_OUT_OF_RANGE
    if reset == "none":
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(timeout_ms=10_000)
    else:
        got: list[bytes] = []
        for _ in range(20):
            got += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
            if len(got) >= 3:
                break
        assert got == [b"v0", b"v1", b"v2"]
    consumer.close()


def test_record_errors_fail_only_the_records_at_fault(broker: EmbeddedBroker,
                                                      new_topic: Callable[..., str]) -> None:
    """A batch with keyless records on a compacted topic: the broker refuses the batch and
    lists the keyless records in record_errors (Produce v8+). kafka-python fails those with
    INVALID_RECORD and their message, the batch-mates with its "part of a batch" error."""
    topic = new_topic(config={"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=10_000, retries=0)
    futures = [producer.send(topic, value=b"v%d" % i, key=None if i in (1, 3) else b"k",
                             partition=0) for i in range(5)]
    producer.flush(30)
    errors = [f.exception for f in futures]  # type: ignore[attr-defined]
    producer.close()
    for i in (1, 3):
        assert isinstance(errors[i], InvalidRecordError)
        assert "without key" in str(errors[i])
    for i in (0, 2, 4):
        assert type(errors[i]) is KafkaError and "part of a batch" in str(errors[i])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=2000,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    assert list(consumer) == []  # nothing of the refused batch was appended
    consumer.close()
