"""Windowed word count: words per event-time window, into a compacted topic.

Event time is each record's ``timestamp`` (CreateTime as set by the producer, or the
broker's LogAppendTime). Windows are ``size`` long and start every ``slide`` (tumbling when
``slide`` is omitted or equal to ``size``, hopping — overlapping — when shorter; a record
then counts in every window that contains it). Windows are aligned to the epoch, as Spark's
``window()`` does.

Output (Spark's ``update`` mode), one record per (word, window) whose count changed in a
micro-batch: key = ``word@<window start>`` with the start in ISO-8601 at second precision
(``hello@2024-05-01T12:00:00Z``; the offset is the Spark session's time zone, so run with
``spark.sql.session.timeZone=UTC`` — the ``strom pipeline`` command does — for stable ``Z``
keys); value = the window's count so far as a decimal string. The output topic is created
with ``cleanup.policy=compact`` if missing, so it keeps the latest count per window.

Late records: the watermark is the largest event time seen so far minus ``watermark``; Spark
moves it between micro-batches (a micro-batch uses the one its predecessors left, and the
checkpoint keeps it across restarts). A window's count is re-emitted each time it changes
while the window is open; once the watermark reaches a window's end, the window is final —
its state is dropped and records that still arrive for it are ignored (not counted, not
written; for hopping windows, only in the windows that are final). A record at most
``watermark`` behind the latest event time seen is therefore always counted.

Restarts and delivery: counts and the watermark are kept in the checkpoint (state store and
offset log), so a restarted query continues them; writes are at-least-once, and a replayed
micro-batch rewrites the same counts (harmless in a compacted topic). Written through
``foreachBatch`` because Python data source streaming sinks accept only ``append`` mode.
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
from strom.pipelines.word_count import COMPACTED
from strom.pipelines.words import explode_words

ISO_SECONDS = "yyyy-MM-dd'T'HH:mm:ssXXX"


def windowed_counts(records: DataFrame, size: str, slide: str | None,
                    watermark: str) -> DataFrame:
    """``(key, value)`` rows: ``word@<window start>`` and the window's count so far."""
    timed = explode_words(records, "timestamp").withWatermark("timestamp", watermark)
    window = F.window("timestamp", size, slide) if slide else F.window("timestamp", size)
    counts = timed.groupBy(window.alias("window"), "word").count()
    key = F.concat(F.col("word"), F.lit("@"), F.date_format("window.start", ISO_SECONDS))
    return counts.select(key.alias("key"), F.col("count").cast("string").alias("value"))


def windowed_word_count(spark: SparkSession, source: Source, sink: Endpoint,
                        checkpoint: str | Path, trigger: Trigger = CONTINUOUS, *,
                        size: str = "1 minute", slide: str | None = None,
                        watermark: str = "1 minute",
                        output_partitions: int = -1) -> StreamingQuery:
    """Start counting words per window of ``size`` (every ``slide``; tumbling if None),
    accepting records up to ``watermark`` late. Durations are Spark's (``"10 seconds"``,
    ``"5 minutes"``). Returns the started query."""
    ensure_topic(sink.bootstrap, sink.topic, output_partitions, COMPACTED)

    def write(batch: DataFrame, batch_id: int) -> None:
        write_batch(batch, sink)

    counts = windowed_counts(read_stream(spark, source), size, slide, watermark)
    writer = counts.writeStream.outputMode("update").foreachBatch(write)
    return start(writer, checkpoint, trigger)
