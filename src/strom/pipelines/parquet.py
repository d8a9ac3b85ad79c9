"""Topic → Parquet files: records of a stream written to a directory of Parquet files.

Each record becomes one row with the columns ``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp`` (and ``date``, the record's day in the session time zone, when
``partition_by_date``: the files then sit in ``date=YYYY-MM-DD`` sub-directories).
``key`` and ``value`` are strings (UTF-8 decoded) when ``strings`` is set, else binary.

Restarts and delivery: exactly-once. Spark's file sink records each micro-batch's files in
``<path>/_spark_metadata`` and the source offsets in the checkpoint; a replayed micro-batch
replaces its files, so readers that go through Spark (``spark.read.parquet(path)``), which
honour ``_spark_metadata``, see every record exactly once. Other readers may see files of a
micro-batch that never committed.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.pipelines.common import CONTINUOUS, Source, Trigger, read_stream, start

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


def parquet_rows(records: DataFrame, *, strings: bool, partition_by_date: bool) -> DataFrame:
    """The columns written for each record (see the module)."""
    columns = [F.col(c).cast("string").alias(c) if strings and c in ("key", "value")
               else F.col(c) for c in COLUMNS]
    if partition_by_date:
        columns.append(F.to_date("timestamp").alias("date"))
    return records.select(*columns)


def topic_to_parquet(spark: SparkSession, source: Source, path: str | Path,
                     checkpoint: str | Path, trigger: Trigger = CONTINUOUS, *,
                     strings: bool = True, partition_by_date: bool = False) -> StreamingQuery:
    """Start writing ``source``'s records as Parquet files under ``path``; returns the query."""
    rows = parquet_rows(read_stream(spark, source), strings=strings,
                        partition_by_date=partition_by_date)
    writer = rows.writeStream.format("parquet").option("path", str(path))
    if partition_by_date:
        writer = writer.partitionBy("date")
    return start(writer, checkpoint, trigger)
