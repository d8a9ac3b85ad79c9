"""The streaming reader's driver side against a real broker, without a SparkSession.

Spark calls these methods from its planner process; calling them directly checks the offset
arithmetic deterministically (read limits, AvailableNow, partition discovery, data loss).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from strom.client.sync import SyncAdminClient, SyncProducer
from strom.common.types import TopicPartition
from strom.spark.batch import StromInputPartition
from strom.spark.options import parse_source_options
from strom.spark.partition_reader import DataLossError, PartitionRange, read_range
from strom.spark.stream import StromStreamReader
from strom.testing import EmbeddedBroker


def _topic(broker: EmbeddedBroker, partitions: int = 2, prefix: str = "st") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.create_topic(name, partitions, 1)
    return name


def _produce(broker: EmbeddedBroker, topic: str, per_partition: dict[int, int]) -> None:
    with SyncProducer(broker.bootstrap) as producer:
        for partition, count in per_partition.items():
            for i in range(count):
                producer.send(topic, f"v{i}".encode(), partition=partition)
        producer.flush()


def _reader(broker: EmbeddedBroker, **options: str) -> StromStreamReader:
    """A stream reader from the earliest offsets unless ``startingOffsets`` is given (the
    default, latest as in Spark's Kafka source, is checked on its own)."""
    return StromStreamReader(parse_source_options(
        {"kafka.bootstrap.servers": broker.bootstrap, "startingOffsets": "earliest",
         **options}, streaming=True))


def test_initial_offsets_and_read_all(broker: EmbeddedBroker) -> None:
    topic = _topic(broker)
    _produce(broker, topic, {0: 5, 1: 3})
    reader = _reader(broker, subscribe=topic)
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 5, "1": 3}}
    assert reader.latestOffset(end, ReadAllAvailable()) is end  # nothing new: start as is
    latest = _reader(broker, subscribe=topic, startingOffsets="latest")
    assert latest.initialOffset() == {topic: {"0": 5, "1": 3}}


def test_a_stream_starts_at_the_latest_offsets_by_default(broker: EmbeddedBroker) -> None:
    topic = _topic(broker)
    _produce(broker, topic, {0: 5, 1: 3})
    reader = StromStreamReader(parse_source_options(
        {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=True))
    assert reader.initialOffset() == {topic: {"0": 5, "1": 3}}


def test_max_offsets_per_trigger_splits_by_backlog(broker: EmbeddedBroker) -> None:
    topic = _topic(broker)
    _produce(broker, topic, {0: 30, 1: 10})
    reader = _reader(broker, subscribe=topic, maxOffsetsPerTrigger="8")
    assert reader.getDefaultReadLimit() == ReadMaxRows(8)
    offset = reader.initialOffset()
    seen = []
    for _ in range(10):
        nxt = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if nxt is offset:
            break
        seen.append(nxt)
        offset = nxt
    assert seen[0] == {topic: {"0": 6, "1": 2}}  # 30:10 backlog → 6:2 of 8
    assert offset == {topic: {"0": 30, "1": 10}}
    assert len(seen) == 5


def test_min_offsets_per_trigger_waits_for_the_delay(broker: EmbeddedBroker) -> None:
    topic = _topic(broker, 1)
    _produce(broker, topic, {0: 3})
    now = [1000.0]
    reader = _reader(broker, subscribe=topic, minOffsetsPerTrigger="10",
                     maxTriggerDelay="30s")
    reader.clock = lambda: now[0]
    reader._last_batch_s = now[0]
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    start = reader.initialOffset()
    assert reader.latestOffset(start, limit) is start  # 3 < 10 and no delay passed yet
    _produce(broker, topic, {0: 7})
    assert reader.latestOffset(start, limit) == {topic: {"0": 10}}  # enough now
    later = {topic: {"0": 10}}
    _produce(broker, topic, {0: 1})
    now[0] += 29.9
    assert reader.latestOffset(later, limit) is later
    now[0] += 0.2
    assert reader.latestOffset(later, limit) == {topic: {"0": 11}}  # the delay has passed


def test_available_now_stops_at_the_offsets_of_its_start(broker: EmbeddedBroker) -> None:
    topic = _topic(broker)
    _produce(broker, topic, {0: 4, 1: 4})
    reader = _reader(broker, subscribe=topic, maxOffsetsPerTrigger="5")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _produce(broker, topic, {0: 10, 1: 10})  # after the trigger's start: not read
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    second = reader.latestOffset(first, reader.getDefaultReadLimit())
    assert second == {topic: {"0": 4, "1": 4}}
    assert reader.latestOffset(second, reader.getDefaultReadLimit()) is second


def test_new_partitions_and_pattern_topics_are_picked_up(broker: EmbeddedBroker) -> None:
    prefix = f"disc{uuid.uuid4().hex[:6]}"
    first = _topic(broker, 1, prefix)
    reader = _reader(broker, subscribePattern=f"{prefix}-.*")
    start = reader.initialOffset()
    assert start == {first: {"0": 0}}
    second = _topic(broker, 1, prefix)
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.create_partitions({first: 2})
    _produce(broker, second, {0: 2})
    _produce(broker, first, {1: 3})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {first: {"0": 0, "1": 3}, second: {"0": 2}}
    ranges = sorted((p.range.topic, p.range.partition, p.range.start, p.range.end)
                    for p in reader.partitions(start, end)
                    if isinstance(p, StromInputPartition))
    assert ranges == sorted([(first, 1, 0, 3), (second, 0, 0, 2)])


def _delete_before(broker: EmbeddedBroker, topic: str, offset: int) -> None:
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, 0): offset})


def test_offsets_lost_to_retention_fail_or_are_skipped(broker: EmbeddedBroker) -> None:
    topic = _topic(broker, 1)
    _produce(broker, topic, {0: 10})
    strict = _reader(broker, subscribe=topic)
    lenient = _reader(broker, subscribe=topic, failOnDataLoss="false")
    start: dict[str, Any] = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    _delete_before(broker, topic, 6)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        strict.partitions(start, end)
    [part] = lenient.partitions(start, end)
    assert isinstance(part, StromInputPartition)
    assert (part.range.start, part.range.end) == (6, 10)


def test_commit_stores_progress_as_group_offsets(broker: EmbeddedBroker) -> None:
    topic = _topic(broker)
    _produce(broker, topic, {0: 2, 1: 3})
    group = f"g-{uuid.uuid4().hex[:6]}"
    reader = _reader(broker, subscribe=topic, commitOffsetsToGroup=group)
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.commit(end)
    with SyncAdminClient(broker.bootstrap) as admin:
        committed = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 2, 1: 3}


def test_starting_timestamp_resolves_per_partition(broker: EmbeddedBroker) -> None:
    topic = _topic(broker, 1)
    base = 1_700_000_000_000
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(10):
            producer.send(topic, b"v", partition=0, timestamp=base + i * 1000)
        producer.flush()
    assert _reader(broker, subscribe=topic, startingTimestamp=str(base + 3500)) \
        .initialOffset() == {topic: {"0": 4}}
    by_partition = f'{{"{topic}": {{"0": {base + 7000}}}}}'
    assert _reader(broker, subscribe=topic, startingOffsetsByTimestamp=by_partition) \
        .initialOffset() == {topic: {"0": 7}}
    future = str(base + 10**9)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        _reader(broker, subscribe=topic, startingTimestamp=future).initialOffset()
    assert _reader(broker, subscribe=topic, startingTimestamp=future,
                   startingOffsetsByTimestampStrategy="latest").initialOffset() == \
        {topic: {"0": 10}}


def test_executor_fails_or_skips_offsets_deleted_after_planning(broker: EmbeddedBroker) -> None:
    topic = _topic(broker, 1)
    _produce(broker, topic, {0: 10})
    _delete_before(broker, topic, 4)
    planned = PartitionRange(broker.bootstrap, topic, 0, 0, 10)
    with pytest.raises(DataLossError, match=r"offsets 0\.\.3 .* deleted"):
        list(read_range(planned))
    lenient = dataclasses.replace(planned, fail_on_data_loss=False)
    offsets = [o for b in read_range(lenient) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(4, 10))
