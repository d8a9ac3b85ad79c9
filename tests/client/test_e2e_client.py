"""The client against a real strom broker (the ``strom_broker`` fixture from strom.testing)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import confluent_kafka
import pytest

from strom.client import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConsumerRecord,
    Fetcher,
    NewTopic,
    OffsetSpec,
    Producer,
    SyncAdminClient,
    SyncFetcher,
    SyncProducer,
)
from strom.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.common.types import TopicPartition
from strom.protocol.records import reader
from strom.protocol.versions import ADVERTISED, ApiKey
from tests.native_twins import choose_implementation


def bootstrap_of(broker: Any) -> str:
    return str(getattr(broker, "bootstrap", broker))


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


def test_admin_topic_lifecycle(strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    name = unique()

    async def test() -> None:
        async with AdminClient(bootstrap) as admin:
            created = await admin.create_topic(name, 2, 1, {"retention.ms": "3600000"})
            assert created.num_partitions in (2, -1)
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topic(name, 1)
            with pytest.raises(InvalidConfigError):
                await admin.create_topics([NewTopic(unique(), 1, 1, {"retention.ms": "x"})])
            validated = await admin.create_topics([NewTopic(unique(), 1, 1)],
                                                  validate_only=True)
            assert len(validated) == 1
            assert name in await admin.list_topics()
            [desc] = await admin.describe_topics([name])
            assert [p.partition for p in desc.partitions] == [0, 1]
            assert all(p.leader >= 0 and p.isr for p in desc.partitions)

            topic = ConfigResource.topic(name)
            configs = (await admin.describe_configs([topic], include_synonyms=True))[topic]
            by_name = {c.name: c for c in configs}
            assert by_name["retention.ms"].value == "3600000"
            assert by_name["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
            assert by_name["retention.ms"].synonyms
            await admin.incremental_alter_configs(topic, [
                AlterConfigOp("cleanup.policy", AlterConfigOpType.SET, "compact"),
                AlterConfigOp("retention.ms", AlterConfigOpType.DELETE),
            ])
            configs = (await admin.describe_configs([topic]))[topic]
            overrides = {c.name: c.value for c in configs if c.source == 1}
            assert overrides == {"cleanup.policy": "compact"}
            await admin.alter_configs(topic, {"retention.ms": "1000"})
            configs = (await admin.describe_configs([topic]))[topic]
            assert {c.name: c.value for c in configs if c.source == 1} == {"retention.ms": "1000"}

            await admin.create_partitions({name: 3})
            [desc] = await admin.describe_topics([name])
            assert len(desc.partitions) == 3
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions({name: 2})

            cluster = await admin.describe_cluster()
            assert cluster.brokers and cluster.controller_id >= 0
            broker_configs = await admin.describe_configs(
                [ConfigResource.broker(cluster.brokers[0].node_id)])
            assert any(c.name == "log.retention.hours" for c in broker_configs.popitem()[1])
            dirs = await admin.describe_log_dirs()
            replicas = [r for ds in dirs.values() for d in ds for r in d.replicas]
            assert {r.partition for r in replicas if r.topic == name} == {0, 1, 2}

            await admin.delete_topics([name])
            assert name not in await admin.list_topics()
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.delete_topics([name])

    run(test)


def test_produce_fetch_offsets_and_delete_records(strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    name = unique()

    async def test() -> None:
        async with AdminClient(bootstrap) as admin:
            await admin.create_topic(name, 2, 1)
        start = int(time.time() * 1000)
        async with Producer(bootstrap, linger_ms=2, idempotent=True) as producer:
            futures = []
            for i in range(100):
                futures.append(await producer.send(
                    name, b"value-%d" % i, key=b"key-%d" % (i % 7),
                    headers=[("n", str(i).encode())], timestamp=start + i,
                ))
            await producer.flush()
        results = [f.result() for f in futures]
        per_partition: dict[int, list[int]] = {}
        for md in results:
            per_partition.setdefault(md.partition, []).append(md.offset)
        for offsets in per_partition.values():
            assert offsets == list(range(len(offsets)))

        tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
        async with Fetcher(bootstrap, auto_offset_reset="earliest", max_wait_ms=100) as fetcher:
            fetcher.assign(tps)
            records: list[ConsumerRecord] = []
            while len(records) < 100:
                records += await fetcher.fetch()
            assert len(records) == 100
            values = sorted(int(r.value.split(b"-")[1]) for r in records if r.value)
            assert values == list(range(100))
            sample = next(r for r in records if r.value == b"value-42")
            assert sample.key == b"key-0" and sample.headers == (("n", b"42"),)
            assert sample.timestamp == start + 42
            # Keyed records land where the Java client would put them.
            assert sample.partition == results[42].partition

            found = await fetcher.seek_to_timestamp(start + 50)
            after: list[ConsumerRecord] = []
            while sum(fetcher.high_watermark(tp) - (fetcher.position(tp) or 0)
                      for tp in tps) > 0:
                after += await fetcher.fetch()
            assert sorted(r.timestamp for r in after) == list(range(start + 50, start + 100))
            assert set(found) == set(tps)

        async with AdminClient(bootstrap) as admin:
            tp0 = TopicPartition(name, 0)
            latest = await admin.list_offsets({tp0: OffsetSpec.LATEST})
            earliest = await admin.list_offsets({tp0: OffsetSpec.EARLIEST})
            assert earliest[tp0].offset == 0 and latest[tp0].offset == len(per_partition[0])
            newest = await admin.list_offsets({tp0: OffsetSpec.MAX_TIMESTAMP})
            assert newest[tp0].offset == latest[tp0].offset - 1
            low = await admin.delete_records({tp0: 2})
            assert low == {tp0: 2}
            earliest = await admin.list_offsets({tp0: OffsetSpec.EARLIEST})
            assert earliest[tp0].offset == 2
            await admin.delete_topics([name])

    run(test)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(strom_broker: Any, codec: str) -> None:
    bootstrap = bootstrap_of(strom_broker)
    name = unique(codec)
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, 1, 1)
    with SyncProducer(bootstrap, compression=codec, acks=1) as producer:
        futures = [producer.send(name, b"x" * 100 + b"%d" % i) for i in range(50)]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(50))
    with SyncFetcher(bootstrap, auto_offset_reset="earliest", max_wait_ms=100) as fetcher:
        fetcher.assign_topic(name)
        records: list[ConsumerRecord] = []
        while len(records) < 50:
            records += fetcher.poll()
        assert [r.offset for r in records] == list(range(50))
        assert records[7].value == b"x" * 100 + b"7"


def test_unknown_topic_is_a_clear_error(strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    with SyncFetcher(bootstrap) as fetcher, pytest.raises(UnknownTopicOrPartitionError,
                                                          match="does not exist"):
        fetcher.assign_topic(unique("missing"))


def test_producer_and_fetcher_survive_a_broker_restart(strom_broker_factory: Any) -> None:
    broker = strom_broker_factory()
    name = unique("restart")

    async def test() -> None:
        async with AdminClient(broker.bootstrap) as admin:
            await admin.create_topic(name, 1, 1)
        async with Producer(broker.bootstrap, linger_ms=0, idempotent=True) as producer, \
                Fetcher(broker.bootstrap, auto_offset_reset="earliest",
                        max_wait_ms=50) as fetcher:
            assert (await producer.send_and_wait(name, b"before")).offset == 0
            await fetcher.assign_topic(name)
            assert [r.value for r in await fetcher.fetch()] == [b"before"]
            await asyncio.to_thread(broker.restart)
            assert (await producer.send_and_wait(name, b"after")).offset == 1
            records: list[ConsumerRecord] = []
            while not records:
                records = await fetcher.fetch()
            assert [r.value for r in records] == [b"after"]

    run(test)


def test_admin_partial_results_and_api_versions(strom_broker: Any) -> None:
    """With ``partial``, one partition's error comes back as its value and the others'
    results are kept; without it, the same call raises."""
    bootstrap = bootstrap_of(strom_broker)
    name = unique()

    async def test() -> None:
        async with AdminClient(bootstrap, request_timeout_s=5) as admin:
            await admin.create_topic(name, 2, 1)
            async with Producer(bootstrap) as producer:
                for partition in (0, 1):
                    for _ in range(3):
                        await producer.send(name, b"x", partition=partition)
                await producer.flush()
            tp0, tp1, gone = TopicPartition(name, 0), TopicPartition(name, 1), \
                TopicPartition(unique("gone"), 0)
            results = await admin.delete_records({tp0: 2, tp1: 9, gone: 1}, partial=True)
            assert results[tp0] == 2
            assert isinstance(results[tp1], OffsetOutOfRangeError)
            assert isinstance(results[gone], UnknownTopicOrPartitionError)
            with pytest.raises(OffsetOutOfRangeError):
                await admin.delete_records({tp1: 9})
            found = await admin.list_offsets({tp0: OffsetSpec.EARLIEST, gone: OffsetSpec.LATEST},
                                             partial=True)
            assert not isinstance(found[tp0], Exception) and found[tp0].offset == 2
            assert isinstance(found[gone], UnknownTopicOrPartitionError)

            versions = await admin.describe_api_versions(0)
            assert versions.node.node_id == 0
            assert versions.ranges == ADVERTISED  # what ApiVersions lists (Produce from v0)
            assert versions.usable[ApiKey.FETCH] == 12  # the client stops at Fetch v12
            await admin.delete_topics([name])

    run(test)


@pytest.fixture(params=["native", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fetcher's record decoding in C (when built), then in its Python twin."""
    return choose_implementation(request, monkeypatch, reader, "native_decode")


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_records_from_librdkafka_decode_alike_in_c_and_python(
        strom_broker: Any, decoder: str, timestamps: str) -> None:
    """librdkafka's batches (lz4, headers, null keys and values, empty values), read back
    through the fetcher by either decoder: the same records, field by field."""
    bootstrap = bootstrap_of(strom_broker)
    name = unique(f"decode-{decoder}")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, 1, 1, configs={"message.timestamp.type": timestamps})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                         "compression.type": "lz4"})
    start = int(time.time() * 1000) - 10_000
    sent = []
    for i in range(300):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 5 == 0 else b"" if i % 7 == 0 else b"value-%d" % i
        headers = [("h\u00e9", b"%d" % i), ("nil", None)] if i % 4 == 0 else None
        producer.produce(name, value, key, partition=0, timestamp=start + i, headers=headers)
        sent.append((key, value, tuple(headers or ())))
    assert producer.flush(30) == 0
    with SyncFetcher(bootstrap, auto_offset_reset="earliest", max_wait_ms=100) as fetcher:
        fetcher.assign_topic(name)
        records: list[ConsumerRecord] = []
        while len(records) < len(sent):
            records += fetcher.poll()
    assert [(r.key, r.value, r.headers) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))
    assert all(type(r) is ConsumerRecord and r.partition == 0 for r in records)
    if timestamps == "CreateTime":
        assert [(r.timestamp, r.timestamp_type) for r in records] == \
            [(start + i, 0) for i in range(len(sent))]
    else:  # the broker's time when it appended the batch, for each record of the batch
        assert all(r.timestamp > start + 10_000 - 60_000 and r.timestamp_type == 1
                   for r in records)
