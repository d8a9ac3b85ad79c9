"""Structured Streaming through the strom source and sink on real PySpark (local[2])."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.client.admin_types import ConfigResource, OffsetSpec
from strom.client.sync import SyncAdminClient, SyncProducer
from strom.common.types import TopicPartition
from strom.testing import EmbeddedBroker


def _topic(broker: EmbeddedBroker, partitions: int = 2, prefix: str = "ss") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.create_topic(name, partitions, 1)
    return name


def _produce(broker: EmbeddedBroker, topic: str, start: int, count: int,
             partitions: int = 2) -> None:
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(start, start + count):
            producer.send(topic, f"v{i}".encode(), f"k{i}".encode(), partition=i % partitions)
        producer.flush()


class Collector:
    """A foreachBatch sink on the driver: (batch id, partition, offset, value) per row."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [(batch_id, r.partition, r.offset, bytes(r.value).decode())
               for r in df.select("partition", "offset", "value").collect()]
        with self.lock:
            self.rows.extend(got)


def _stream(spark: Any, broker: EmbeddedBroker, **options: str) -> Any:
    """A stream from the earliest offsets unless ``startingOffsets`` is given (Spark's
    default for a stream, latest, is tested on its own)."""
    reader = spark.readStream.format("strom") \
        .option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_available_now(df: Any, sink: Collector, checkpoint: Path) -> None:
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def test_restart_from_checkpoint_reads_each_record_once(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = _topic(broker)
    group = f"spark-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 0, 100)
    sink = Collector()
    options = {"subscribe": topic, "maxOffsetsPerTrigger": "30", "commitOffsetsToGroup": group}
    _run_available_now(_stream(spark, broker, **options), sink, tmp_path / "cp")
    assert sorted(v for _, _, _, v in sink.rows) == sorted(f"v{i}" for i in range(100))
    per_batch: dict[int, int] = {}
    for batch_id, *_ in sink.rows:
        per_batch[batch_id] = per_batch.get(batch_id, 0) + 1
    assert sorted(per_batch.values()) == [10, 30, 30, 30]  # the read limit held

    _produce(broker, topic, 100, 50)
    again = Collector()
    _run_available_now(_stream(spark, broker, **options), again, tmp_path / "cp")
    assert sorted(v for _, _, _, v in again.rows) == sorted(f"v{i}" for i in range(100, 150))
    assert min(b for b, *_ in again.rows) > max(per_batch)  # batch ids continue
    with SyncAdminClient(broker.bootstrap) as admin:
        committed = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 75, 1: 75}


def test_stream_into_spark_and_back_to_strom(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    source, target = _topic(broker), _topic(broker, 1)
    _produce(broker, source, 0, 40)
    upper = _stream(spark, broker, subscribe=source) \
        .selectExpr("key", "upper(cast(value AS string)) AS value")
    query = upper.writeStream.format("strom") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", target) \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", target).load().selectExpr("CAST(key AS string) AS k",
                                                        "CAST(value AS string) AS v").collect()
    assert sorted((r.k, r.v) for r in rows) == sorted((f"k{i}", f"V{i}") for i in range(40))


@pytest.fixture(scope="module")
def retaining_broker() -> Iterator[EmbeddedBroker]:
    """A broker whose retention task runs every 100 ms."""
    with EmbeddedBroker(config={"log.retention.check.interval.ms": 100}) as embedded:
        yield embedded


@pytest.mark.parametrize("fail", [True, False])
def test_retention_deleting_unread_offsets(
        spark: Any, retaining_broker: EmbeddedBroker, tmp_path: Path, fail: bool) -> None:
    broker = retaining_broker
    topic = f"ret-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    hour_ago = int(time.time() * 1000) - 3_600_000
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, 1, 1, {"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(10):
            producer.send_and_wait(topic, b"v" * 100, partition=0, timestamp=hour_ago + i)
    options = {"subscribe": topic, "failOnDataLoss": str(fail).lower()}
    first = Collector()
    _run_available_now(_stream(spark, broker, **options), first, tmp_path / "cp")
    assert len(first.rows) == 10
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(10, 30):  # hour-old records in 100-byte batches: many 1 KiB segments
            producer.send_and_wait(topic, b"v" * 100, partition=0, timestamp=hour_ago + i)
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.alter_configs(ConfigResource.topic(topic), {
            "segment.bytes": "1024", "file.delete.delay.ms": "0", "retention.ms": "60000"})
        deadline = time.monotonic() + 30
        while (log_start := admin.list_offsets({tp: OffsetSpec.EARLIEST})[tp].offset) <= 10:
            assert time.monotonic() < deadline, "retention deleted nothing"
            time.sleep(0.1)
    assert log_start < 30  # the active segment stays
    second = Collector()
    if fail:
        with pytest.raises(Exception, match="failOnDataLoss"):
            _run_available_now(_stream(spark, broker, **options), second, tmp_path / "cp")
        assert second.rows == []
    else:
        _run_available_now(_stream(spark, broker, **options), second, tmp_path / "cp")
        assert sorted(o for _, _, o, _ in second.rows) == list(range(log_start, 30))


def test_a_stream_without_starting_offsets_reads_only_new_records(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    """As Spark's Kafka source: a query switched to ``strom`` by its format name alone
    starts at the latest offsets, then continues from its checkpoint."""
    topic = _topic(broker)
    _produce(broker, topic, 0, 20)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", topic).load()
    first = Collector()
    _run_available_now(df, first, tmp_path / "cp")
    assert first.rows == []
    _produce(broker, topic, 20, 10)
    second = Collector()
    _run_available_now(df, second, tmp_path / "cp")
    assert sorted(v for _, _, _, v in second.rows) == sorted(f"v{i}" for i in range(20, 30))


def test_bad_streaming_option_fails_at_load_with_a_clear_message(
        spark: Any, broker: EmbeddedBroker) -> None:
    with pytest.raises(Exception, match="option 'maxOffsetsPerTrigger' must be a number"):
        _stream(spark, broker, subscribe="t", maxOffsetsPerTrigger="lots")
