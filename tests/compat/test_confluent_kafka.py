"""librdkafka (confluent-kafka) against a real strom broker: produce, consume, admin."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

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
from tests.compat.helpers import consume_all, create_topic, produce_all

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


def test_timestamps_out_of_range_fail_only_their_batch(broker: EmbeddedBroker,
                                                       new_topic: Callable[..., str]) -> None:
    """message.timestamp.after.max.ms (one hour by default): the records two hours ahead are
    listed in record_errors, so their batch-mate fails with _INVALID_DIFFERENT_RECORD (what
    librdkafka reports for records not at fault), and a later batch is delivered."""
    topic = new_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10_000})
    outcomes: dict[bytes, KafkaError | None] = {}
    now = int(time.time() * 1000)
    for value, ts in ((b"now", now), (b"late 1", now + 7_200_000), (b"late 2", now + 7_300_000)):
        producer.produce(topic, value=value, timestamp=ts, partition=0,
                         on_delivery=lambda err, msg: outcomes.update({msg.value(): err}))
    assert producer.flush(30) == 0
    fine = outcomes[b"now"]
    # Batched with the late ones it fails with them (a batch is all or nothing). On a loaded
    # machine librdkafka occasionally sends it in a batch of its own, which is then delivered.
    assert fine is None or fine.code() == KafkaError._INVALID_DIFFERENT_RECORD
    for late in (outcomes[b"late 1"], outcomes[b"late 2"]):
        assert late is not None and late.code() != KafkaError._INVALID_DIFFERENT_RECORD
    producer.produce(topic, value=b"again", partition=0)
    assert producer.flush(30) == 0
    expected = [b"again"] if fine is not None else [b"now", b"again"]
    messages = consume_all(broker.bootstrap, topic, 1, len(expected))
    assert [m.value() for m in messages] == expected  # type: ignore[attr-defined]


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


# -- fetch errors: the consumer recovers (auto.offset.reset) or reports the error, never hangs.
# A Fetch partition with an error once carried null records; librdkafka rejects the whole
# response for that ("invalid MessageSetSize -1"), never saw the error and fetched forever.


def poll_until(consumer: Consumer, stop: Callable[[list[Any]], bool],
               timeout: float = 30.0) -> list[Any]:
    """Messages and errors polled until ``stop(seen)`` holds (or the timeout passes)."""
    seen: list[Any] = []
    deadline = time.monotonic() + timeout
    while not stop(seen) and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            seen.append(message)
    return seen


def values(seen: list[Any]) -> list[bytes]:
    return [m.value() for m in seen if not m.error()]


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_seek_past_the_end_applies_auto_offset_reset(
    broker: EmbeddedBroker, new_topic: Callable[..., str], reset: str
) -> None:
    topic = new_topic()
    produce_all(broker.bootstrap, topic, [(None, b"old-%d" % i) for i in range(3)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "auto.offset.reset": reset, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 100)])  # past the end (3)
    if reset == "earliest":
        seen = poll_until(consumer, lambda s: len(values(s)) >= 3)
        assert values(seen) == [b"old-0", b"old-1", b"old-2"]
    elif reset == "latest":
        # Reset to the end (reported as end of partition at 3), then only what is produced
        # afterwards arrives.
        seen = poll_until(consumer, lambda s: any(m.error() for m in s))
        eof = [m for m in seen if m.error()]
        assert eof and eof[0].error().code() == KafkaError._PARTITION_EOF
        assert eof[0].offset() == 3
        produce_all(broker.bootstrap, topic, [(None, b"new")])
        seen = poll_until(consumer, lambda s: len(values(s)) >= 1)
        assert values(seen) == [b"new"]
    else:
        seen = poll_until(consumer, lambda s: any(m.error() for m in s))
        errors = [m.error() for m in seen if m.error()]
        assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET
        assert "Offset out of range" in errors[0].str()
        assert not values(seen)
    consumer.close()


def test_fetch_below_the_log_start_after_delete_records(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    produce_all(broker.bootstrap, topic, [(None, b"v%d" % i) for i in range(10)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 2)])  # deleted: below the log start (6)
    seen = poll_until(consumer, lambda s: len(values(s)) >= 4)
    assert values(seen) == [b"v6", b"v7", b"v8", b"v9"]
    assert [m.offset() for m in seen if not m.error()] == [6, 7, 8, 9]
    consumer.close()


@pytest.mark.parametrize("mode", ["subscribe", "assign"])
def test_topic_deleted_and_recreated_under_a_consumer(
    broker: EmbeddedBroker, new_topic: Callable[..., str], mode: str
) -> None:
    topic = new_topic()
    produce_all(broker.bootstrap, topic, [(None, b"old-%d" % i) for i in range(5)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000})
    if mode == "subscribe":
        consumer.subscribe([topic])
    else:  # the consumer keeps fetching its position from the topic that goes away
        consumer.assign([TopicPartition(topic, 0, 0)])
    assert values(poll_until(consumer, lambda s: len(values(s)) >= 5)) == [
        b"old-%d" % i for i in range(5)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=10).values():
        future.result(10)
    gone = poll_until(consumer, lambda s: any(m.error() for m in s),
                      timeout=15 if mode == "subscribe" else 2)
    if mode == "subscribe":  # a subscriber is told the topic is gone
        assert [m.error().code() for m in gone if m.error()][:1] == [
            KafkaError.UNKNOWN_TOPIC_OR_PART]
    # Re-created with fewer records than the consumer's position (5): it is reset and reads.
    create_topic(broker.bootstrap, topic)
    produce_all(broker.bootstrap, topic, [(None, b"new-%d" % i) for i in range(2)])
    seen = poll_until(consumer, lambda s: b"new-1" in values(s))
    assert values(seen) == [b"new-0", b"new-1"]
    consumer.close()
