"""The batch and streaming writers: Arrow rows (key, value, topic, partition, headers) → topics.

Like Spark's Kafka sink: ``value`` is required, ``key`` / ``partition`` / ``headers`` are
optional, the topic comes from a ``topic`` column or the ``topic`` option (the option wins,
as in Spark). Keys and values may be binary or string (strings are sent UTF-8 encoded).
A ``timestamp`` column (timestamp type), which Spark's Kafka sink ignores, sets the records'
create times here (null: the send time), so a copy keeps its source's timestamps. Each task
sends through the worker's shared idempotent producer and waits for every
acknowledgement before returning its commit message, so a successful job has written every
row at least once; ``abort`` cannot take back what was written (at-least-once, no
transactions yet), and a retried task may write its rows again. The streaming writer is the
same per micro-batch: a replayed micro-batch writes its rows again (at-least-once, as Spark's
Kafka sink documents). With ``exactlyOnce`` the writers of :mod:`strom.spark.exactly_once`
send the same rows (:func:`send_batches`) inside one transaction per task instead.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from strom.client.sync import SyncProducer
from strom.spark.clients import producer
from strom.spark.options import SinkOptions, StromSourceOptionError
from strom.spark.sink_encoder import SinkEncoder, coalesced


@dataclass
class StromCommitMessage(WriterCommitMessage):
    """What one task wrote: the number of records acknowledged."""

    records: int


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject a DataFrame the sink cannot write, on the driver, before any task runs."""
    names = {f.name: f.dataType for f in schema.fields}
    if "value" not in names:
        raise StromSourceOptionError("the DataFrame to write needs a 'value' column")
    for column in ("key", "value"):
        if column in names and not isinstance(names[column], BinaryType | StringType):
            raise StromSourceOptionError(
                f"column {column!r} must be binary or string, got {names[column].simpleString()}")
    if "timestamp" in names and not isinstance(names["timestamp"],
                                               TimestampType | TimestampNTZType):
        raise StromSourceOptionError(
            f"column 'timestamp' must be a timestamp, got {names['timestamp'].simpleString()}")
    if options.topic is None and "topic" not in names:
        raise StromSourceOptionError(
            "the topic must be given by the 'topic' option or a 'topic' column")


class StromArrowWriter(DataSourceArrowWriter):
    """Sends the rows of each task (:func:`write_batches`); picklable (holds only the parsed
    options)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StromCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task's records are acknowledged already; nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already acknowledged stay written (at-least-once, like Spark's Kafka sink)."""


class StromStreamArrowWriter(DataSourceStreamArrowWriter):
    """The streaming sink: each micro-batch's tasks send and wait like the batch writer."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StromCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch's records are acknowledged already; nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acknowledged records stay written; Spark replays the batch (at-least-once)."""


def write_batches(options: SinkOptions, iterator: Iterator[pa.RecordBatch]) -> StromCommitMessage:
    """The at-least-once task: every row through the worker's shared idempotent producer."""
    return StromCommitMessage(send_batches(producer(options.bootstrap, options.client),
                                           options, iterator))


def send_batches(sender: SyncProducer, options: SinkOptions,
                 batches: Iterable[pa.RecordBatch]) -> int:
    """Send every row of ``batches`` through ``sender``, then wait for every acknowledgement
    (raises the first failed batch's error); returns the number of rows.

    Rows are encoded column-wise (:class:`~strom.spark.sink_encoder.SinkEncoder`) a group of
    Arrow batches at a time, and the finished records sections go to ``sender`` through
    :meth:`~strom.client.sync.SyncProducer.send_encoded`, each partition's
    rows in row order.
    """
    encoder = SinkEncoder(options.topic, sender.producer.batch_size, sender.partition_count)
    outcomes: list[concurrent.futures.Future[None]] = []
    written = 0
    for batch in coalesced(iter(batches)):
        for topic, sections in encoder.encode(batch):
            outcomes.extend(sender.send_encoded(topic, sections))
        written += batch.num_rows
    sender.flush()
    for outcome in outcomes:
        outcome.result()
    return written
