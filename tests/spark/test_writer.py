"""The batch writer through Spark (local[2]) against an embedded broker: what it writes reads
back the same through strom's reader and through confluent-kafka (librdkafka), for every
codec, and keyed rows land where Kafka's default partitioner puts them."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
pytest.importorskip("confluent_kafka")

from strom.client.partitioner import key_partition
from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_to_end, create_topic, produce_all

ROWS = 400
PARTITIONS = 3
SCHEMA = ("key string, value binary, partition int, timestamp timestamp, "
          "headers array<struct<key:string,value:binary>>")
BASE = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def _row(i: int) -> tuple[Any, ...]:
    """Row i: every 10th without key, every 7th with a null value (but never both: a row is
    known by its key or value), every 5th with an explicit partition, every 4th without
    timestamp, headers absent / empty / several (a null header value, a non-ASCII key)."""
    key = None if i % 10 == 0 else f"k{i}"
    value = None if i % 7 == 0 and key is not None else f"v{i}:".encode() + b"x" * (i % 3 * 50)
    partition = i % PARTITIONS if i % 5 == 0 else None
    timestamp = None if i % 4 == 0 else BASE + datetime.timedelta(milliseconds=i * 997 - 50_000)
    headers = (None if i % 3 == 0 else [] if i % 3 == 1 else
               [("h", f"{i}".encode()), ("ключ", None), ("h", b"")])
    return key, value, partition, timestamp, headers


def _index(key: bytes | None, value: bytes | None) -> int:
    """The row a record came from."""
    if key is not None:
        return int(key[1:])
    assert value is not None
    return int(value[1:value.index(b":")])


def _expected_headers(i: int) -> list[tuple[str, bytes | None]]:
    headers = _row(i)[4]
    return [(k, v) for k, v in headers] if headers else []


def _expected_ms(i: int) -> int | None:
    timestamp = _row(i)[3]
    return None if timestamp is None else int(timestamp.timestamp() * 1000)


def _check(i: int, partition: int, key: bytes | None, value: bytes | None, ms: int,
           headers: list[tuple[str, bytes | None]]) -> None:
    row_key, row_value, explicit, _, _ = _row(i)
    assert key == (None if row_key is None else row_key.encode())
    assert value == row_value
    if explicit is not None:
        assert partition == explicit
    elif row_key is not None:
        assert partition == key_partition(row_key.encode(), PARTITIONS)
    if _expected_ms(i) is not None:
        assert ms == _expected_ms(i)
    assert headers == _expected_headers(i)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_write_then_read_back_with_keys_nulls_headers_partitions(
        spark: Any, broker: EmbeddedBroker, codec: str) -> None:
    topic = f"writer-{codec}-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    df = spark.createDataFrame([_row(i) for i in range(ROWS)], SCHEMA).coalesce(1)
    df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("kafka.compression.type", codec).option("topic", topic).mode("append").save()

    read = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", topic).option("includeHeaders", "true").load() \
        .selectExpr("key", "value", "partition", "offset", "unix_millis(timestamp) AS ms",
                    "timestampType", "headers").collect()
    assert len(read) == ROWS
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for r in read:
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        i = _index(key, value)
        _check(i, r.partition, key, value, r.ms,
               [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers])
        assert r.timestampType == 0
        by_partition.setdefault(r.partition, []).append((r.offset, i))
    assert sorted(i for rows in by_partition.values() for _, i in rows) == list(range(ROWS))
    for rows in by_partition.values():  # one writing task: each partition in row order
        rows.sort()
        assert [offset for offset, _ in rows] == list(range(len(rows)))
        assert [i for _, i in rows] == sorted(i for _, i in rows)

    # librdkafka decodes the same batches (and their codec) to the same records.
    messages: list[Any] = consume_to_end(broker.bootstrap, topic, PARTITIONS)
    assert len(messages) == ROWS
    for m in messages:
        i = _index(m.key(), m.value())
        assert (m.offset(), i) in by_partition[m.partition()]
        assert m.timestamp()[0] == 1  # TIMESTAMP_CREATE_TIME
        _check(i, m.partition(), m.key(), m.value(), m.timestamp()[1], m.headers() or [])


def test_keyed_rows_land_where_librdkafka_murmur2_puts_them(
        spark: Any, broker: EmbeddedBroker) -> None:
    """Kafka's default partitioner as librdkafka implements it (``murmur2_random``, the
    Java-compatible one), keys of every tail length, against the writer's choice."""
    keys = [f"key-{i}-{'x' * (i % 9)}".encode() for i in range(300)]
    ours, theirs = (f"{side}-{uuid.uuid4().hex[:8]}" for side in ("spark", "librdkafka"))
    for topic in (ours, theirs):
        create_topic(broker.bootstrap, topic, 7)
    spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary").write \
        .format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", ours).mode("append").save()
    produce_all(broker.bootstrap, theirs, [(k, b"v") for k in keys],
                partitioner="murmur2_random")
    where = {side: {m.key(): m.partition() for m in consume_to_end(broker.bootstrap, side, 7)}
             for side in (ours, theirs)}
    assert where[ours] == where[theirs]
    assert len(set(where[ours].values())) == 7


def test_topic_column_routes_rows_and_large_values_get_batches_of_their_own(
        spark: Any, broker: EmbeddedBroker) -> None:
    """Rows of several topics in one task, interleaved; a value larger than a batch."""
    topics = [f"routed-{n}-{uuid.uuid4().hex[:8]}" for n in range(2)]
    for topic in topics:
        create_topic(broker.bootstrap, topic, 2)
    big = b"B" * 300_000  # > the writer's 256 KiB batches
    rows = [(topics[i % 2], f"k{i}", big if i == 5 else f"v{i}".encode()) for i in range(60)]
    spark.createDataFrame(rows, "topic string, key string, value binary").coalesce(1).write \
        .format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .mode("append").save()
    for n, topic in enumerate(topics):
        got = consume_to_end(broker.bootstrap, topic, 2)
        assert sorted((m.key(), m.value()) for m in got) == sorted(  # type: ignore[attr-defined]
            (k.encode(), v) for t, k, v in rows if t == topics[n])


@pytest.mark.parametrize(("rows", "schema", "message"), [
    ([(b"v", 9)], "value binary, partition int", "partition 9 of topic"),
    ([(b"v", [(None, b"x")])], "value binary, headers array<struct<key:string,value:binary>>",
     "header key is null"),
    ([(b"v", None)], "value binary, topic string", "null topic"),
])
def test_rows_that_cannot_be_written_fail_the_write(
        spark: Any, broker: EmbeddedBroker, rows: list[Any], schema: str, message: str) -> None:
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    writer = spark.createDataFrame(rows, schema).write.format("strom") \
        .option("kafka.bootstrap.servers", broker.bootstrap).mode("append")
    if "topic" not in schema:
        writer = writer.option("topic", topic)
    with pytest.raises(Exception, match=message):
        writer.save()
    assert consume_to_end(broker.bootstrap, topic, 3) == []
