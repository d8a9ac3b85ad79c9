"""Stream-table join: each record of a stream topic joined with a compacted topic read as a
table (the latest value per key), like a Kafka Streams KStream-KTable join.

The table is the whole table topic: for every key, the record with the highest offset; a key
whose latest record has a null value (a tombstone) is deleted. Keys are assumed to live in
one partition each (the default partitioner puts them there, and compaction relies on it).
The table is read again with the ``strom`` batch reader at the start of every micro-batch,
so a stream record meets the table as it is when its micro-batch runs (processing time, not
event time); fine for tables that fit a quick batch read — compaction keeps them small.

Join key: the stream record's key equals the table record's key (bytes). ``how="inner"``
drops stream records without a table value; ``how="left"`` keeps them (``"table": null``).
Stream records with a null key never match.

Output, one record per joined stream record: key = the stream record's key; value = a JSON
object ``{"stream": <stream value>, "table": <table value>}`` with both values as UTF-8
strings (not parsed; null when absent), e.g. ``{"stream":"order 7","table":"alice"}``.

Restarts and delivery: stream offsets are checkpointed; writes are at-least-once. A
micro-batch replayed after a crash is joined with the table as it is then, so its output
may differ from the first attempt if the table changed in between.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.pipelines.common import (
    CONTINUOUS,
    FORMAT,
    Endpoint,
    PipelineError,
    Source,
    Trigger,
    read_stream,
    start,
    write_batch,
)

JOIN_TYPES = ("inner", "left")


def read_table(spark: SparkSession, table: Endpoint) -> DataFrame:
    """``(key, value)`` rows: the latest non-deleted value of every key of the table topic."""
    records = spark.read.format(FORMAT).options(**table.reader_options()).load()
    latest = records.where(F.col("key").isNotNull()).groupBy("key") \
        .agg(F.max_by("value", "offset").alias("value"))
    return latest.where(F.col("value").isNotNull())


def join_with_table(stream: DataFrame, table: DataFrame, how: str) -> DataFrame:
    """``(key, value)`` rows of ``stream`` records joined with ``table`` (see the module)."""
    s, t = stream.alias("s"), table.alias("t")
    joined = s.join(t, F.col("s.key") == F.col("t.key"), how)
    value = F.to_json(F.struct(F.col("s.value").cast("string").alias("stream"),
                               F.col("t.value").cast("string").alias("table")),
                      {"ignoreNullFields": "false"})
    return joined.select(F.col("s.key").alias("key"), value.alias("value"))


def stream_table_join(spark: SparkSession, source: Source, table: Endpoint, sink: Endpoint,
                      checkpoint: str | Path, trigger: Trigger = CONTINUOUS, *,
                      how: str = "inner") -> StreamingQuery:
    """Start joining ``source`` records with ``table`` into ``sink``; returns the query."""
    if how not in JOIN_TYPES:
        raise PipelineError(f"join type must be one of {', '.join(JOIN_TYPES)}, got {how!r}")

    def process(batch: DataFrame, batch_id: int) -> None:
        write_batch(join_with_table(batch, read_table(batch.sparkSession, table), how), sink)

    writer = read_stream(spark, source).select("key", "value").writeStream.foreachBatch(process)
    return start(writer, checkpoint, trigger)
