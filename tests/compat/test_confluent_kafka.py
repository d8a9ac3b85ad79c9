"""librdkafka (confluent-kafka) against a real strom broker: produce, consume, admin."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_all, produce_all

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker: EmbeddedBroker, new_topic: Callable[..., str],
                                     codec: str) -> None:
    topic = new_topic(partitions=3)
    records = [(f"key-{i % 7}".encode() if i % 2 else None, f"value-{i}".encode() * 5)
               for i in range(2000)]
    delivered = produce_all(broker.bootstrap, topic, records, **{"compression.type": codec})
    assert len(delivered) == len(records)
    messages = consume_all(broker.bootstrap, topic, 3, len(records))
    assert len(messages) == len(records)
    by_partition: dict[int, list[object]] = {}
    for m in messages:
        by_partition.setdefault(m.partition(), []).append(m)  # type: ignore[attr-defined]
    for msgs in by_partition.values():
        offsets = [m.offset() for m in msgs]  # type: ignore[attr-defined]
        assert offsets == list(range(len(offsets)))
        values = [int(m.value().split(b"-")[1].split(b"v")[0]) for m in msgs]  # type: ignore[attr-defined]
        assert values == sorted(values)  # per-partition order preserved
    keyed = [m for m in messages if m.key() is not None]  # type: ignore[attr-defined]
    assert keyed and all(m.headers() == [("h", b"v")] for m in keyed)  # type: ignore[attr-defined]
    # Same key, same partition (librdkafka's consistent_random partitioner).
    partitions_by_key: dict[bytes, set[int]] = {}
    for m in keyed:
        partitions_by_key.setdefault(m.key(), set()).add(m.partition())  # type: ignore[attr-defined]
    assert all(len(p) == 1 for p in partitions_by_key.values())


def test_idempotent_producer(broker: EmbeddedBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    records = [(None, f"v{i}".encode()) for i in range(5000)]
    delivered = produce_all(broker.bootstrap, topic, records, **{"enable.idempotence": True,
                                                                 "acks": "all"})
    assert len(delivered) == 5000
    messages = consume_all(broker.bootstrap, topic, 2, 5000)
    assert sorted(m.value() for m in messages) == sorted(v for _, v in records)  # type: ignore[attr-defined]


def test_acks_zero_and_one(broker: EmbeddedBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce_all(broker.bootstrap, topic, [(None, b"a")] * 100, acks=0)
    produce_all(broker.bootstrap, topic, [(None, b"b")] * 100, acks=1)
    messages = consume_all(broker.bootstrap, topic, 1, 200)
    assert len(messages) == 200


def test_admin_operations(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"admin-{time.monotonic_ns()}"
    fs = admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "3600000"})])
    fs[name].result(10)
    # Creating it again fails with TOPIC_ALREADY_EXISTS.
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # Invalid names and configs get Kafka's errors.
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(name + "x", 1, 1, config={"retention.ms": "soon"})])[
            name + "x"].result(10)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG

    md = admin.list_topics(timeout=10)
    assert len(md.topics[name].partitions) == 2

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].is_default

    alter = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter])[alter].result(10)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"

    admin.create_partitions([NewPartitions(name, 4)])[name].result(10)
    assert len(admin.list_topics(timeout=10).topics[name].partitions) == 4

    cluster = admin.describe_cluster().result(10)
    assert len(cluster.nodes) == 1

    admin.delete_topics([name], operation_timeout=10)[name].result(10)
    deadline = time.monotonic() + 10
    while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in admin.list_topics(timeout=10).topics


def test_offsets_for_times_and_delete_records(broker: EmbeddedBroker,
                                              new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    base = int(time.time() * 1000) - 100_000
    for i in range(100):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=base + i * 10)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    # Records share batches; the lookup is still exact per record.
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 555)], timeout=10)
    assert found[0].offset == 56
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 100)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.delete_records([TopicPartition(topic, 0, 40)])
    for f in result.values():
        f.result(10)
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (40, 100)
    consumer.close()
