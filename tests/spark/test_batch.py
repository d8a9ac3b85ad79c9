"""Batch write and read through Spark (local[2]) against an embedded strom broker."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.client.sync import SyncAdminClient, SyncProducer
from strom.testing import EmbeddedBroker

ROWS = 200


def _topic(admin_bootstrap: str, partitions: int = 2, prefix: str = "spark") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(admin_bootstrap) as admin:
        admin.create_topic(name, partitions, 1)
    return name


def _read(spark: Any, broker: EmbeddedBroker, **options: str) -> Any:
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_write_then_read_back(spark: Any, broker: EmbeddedBroker) -> None:
    topic = _topic(broker.bootstrap)
    before_ms = int(time.time() * 1000) - 1000
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}".encode(), i % 2, [("h", f"{i}".encode())]) for i in range(ROWS)],
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", topic).mode("append").save()
    after_ms = int(time.time() * 1000) + 1000

    read = _read(spark, broker, subscribe=topic, includeHeaders="true")
    assert read.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,"
        "headers:array<struct<key:string,value:binary>>>")
    rows = read.selectExpr("key", "value", "topic", "partition", "offset",
                           "unix_millis(timestamp) AS ms", "timestampType", "headers").collect()
    assert len(rows) == ROWS
    by_key = {bytes(r.key).decode(): r for r in rows}
    for i in range(ROWS):
        row = by_key[f"k{i}"]
        assert bytes(row.value) == f"v{i}".encode()
        assert row.topic == topic
        assert row.partition == i % 2
        assert before_ms <= row.ms <= after_ms
        assert row.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("h", f"{i}".encode())]
    for partition in (0, 1):
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(ROWS // 2))


def _produce(broker: EmbeddedBroker, topic: str, count: int, partitions: int = 2) -> None:
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), f"k{i}".encode(), partition=i % partitions,
                          timestamp=1_700_000_000_000 + i)
        producer.flush()


def test_starting_and_ending_offsets_json(spark: Any, broker: EmbeddedBroker) -> None:
    topic = _topic(broker.bootstrap)
    _produce(broker, topic, 40)  # 20 records per partition
    read = _read(spark, broker, subscribe=topic,
                 startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2}}}}',
                 endingOffsets=f'{{"{topic}": {{"0": 15, "1": -1}}}}')
    rows = read.select("partition", "offset", "value", "timestamp").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(5, 15)] + [(1, o) for o in range(20)]
    first = next(r for r in rows if r.partition == 0 and r.offset == 5)
    assert bytes(first.value) == b"v10"  # partition 0 holds the even records


def test_assign_and_latest(spark: Any, broker: EmbeddedBroker) -> None:
    topic = _topic(broker.bootstrap)
    _produce(broker, topic, 10)
    assert _read(spark, broker, assign=f'{{"{topic}": [1]}}').count() == 5
    assert _read(spark, broker, subscribe=topic, startingOffsets="latest").count() == 0


def test_subscribe_pattern(spark: Any, broker: EmbeddedBroker) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = _topic(broker.bootstrap, 1, prefix)
    second = _topic(broker.bootstrap, 1, prefix)
    other = _topic(broker.bootstrap, 1, "other")
    for topic, n in ((first, 3), (second, 4), (other, 5)):
        _produce(broker, topic, n, partitions=1)
    rows = _read(spark, broker, subscribePattern=f"{prefix}-.*").groupBy("topic").count() \
        .collect()
    assert {r.topic: r["count"] for r in rows} == {first: 3, second: 4}


def test_option_errors_surface_in_spark(spark: Any, broker: EmbeddedBroker) -> None:
    with pytest.raises(Exception, match="exactly one of"):
        _read(spark, broker).collect()
    with pytest.raises(Exception, match="topic"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("strom") \
            .option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()


def test_pattern_matching_no_topic_reads_nothing(spark: Any, broker: EmbeddedBroker) -> None:
    assert _read(spark, broker, subscribePattern="no-such-topic-.*").count() == 0


def test_min_partitions_splits_ranges_into_more_tasks(spark: Any, broker: EmbeddedBroker) -> None:
    topic = _topic(broker.bootstrap)
    _produce(broker, topic, 40)
    df = _read(spark, broker, subscribe=topic, minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == \
        sorted((p, o) for p in (0, 1) for o in range(20))


def test_timestamp_column_of_another_type_is_refused_before_any_task(
        spark: Any, broker: EmbeddedBroker) -> None:
    df = spark.createDataFrame([(b"v", "yesterday")], "value binary, timestamp string")
    with pytest.raises(Exception, match="column 'timestamp' must be a timestamp"):
        df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", "never-written").mode("append").save()
