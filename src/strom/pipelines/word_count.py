"""Word count: a text topic → a compacted topic of the latest count per word (a KTable).

Reads the source's record values as UTF-8 text (see :mod:`strom.pipelines.words` for how
they are split). Writes one record per word whose count changed in a micro-batch (Spark's
``update`` output mode): key = the word (UTF-8), value = its total count so far as a decimal
string (``b"42"``). The output topic is created with ``cleanup.policy=compact`` if it does
not exist, so after compaction it holds the latest count of every word.

Restarts: the counts live in Spark's state store inside the checkpoint, and the source
offsets in its offset log, so a query started again from the same checkpoint continues the
counts (it neither starts from zero nor counts a record twice). Delivery is at-least-once:
a micro-batch replayed after a crash writes the same counts again, which is harmless in a
compacted topic (the latest value per word is still right).

Why ``foreachBatch``: PySpark's Python data source streaming sinks accept only the
``append`` output mode, and a running count needs ``update``. Each micro-batch is therefore
written with the ``strom`` batch writer (same records, same guarantees).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.pipelines.common import (
    CONTINUOUS,
    Endpoint,
    Source,
    Trigger,
    ensure_topic,
    read_stream,
    start,
    write_batch,
)
from strom.pipelines.words import explode_words

COMPACTED = {"cleanup.policy": "compact"}


def word_counts(lines: DataFrame) -> DataFrame:
    """``(key, value)`` rows: each word and its running count as a decimal string."""
    counts = explode_words(lines).groupBy("word").count()
    return counts.select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))


def word_count(spark: SparkSession, source: Source, sink: Endpoint, checkpoint: str | Path,
               trigger: Trigger = CONTINUOUS, *, output_partitions: int = -1) -> StreamingQuery:
    """Start counting the words of ``source`` into the compacted topic ``sink``.

    ``output_partitions`` is used only when the output topic is created (-1: the broker's
    default). Returns the started query; with ``Trigger(available_now=True)`` it stops by
    itself once everything available at the start is counted.
    """
    ensure_topic(sink.bootstrap, sink.topic, output_partitions, COMPACTED)

    def write(batch: DataFrame, batch_id: int) -> None:
        write_batch(batch, sink)

    writer = word_counts(read_stream(spark, source)).writeStream \
        .outputMode("update").foreachBatch(write)
    return start(writer, checkpoint, trigger)
