"""The batch and streaming writers: Arrow rows (key, value, topic, partition, headers) → topics.

Like Spark's Kafka sink: ``value`` is required, ``key`` / ``partition`` / ``headers`` are
optional, the topic comes from a ``topic`` column or the ``topic`` option (the option wins,
as in Spark). Keys and values may be binary or string (strings are sent UTF-8 encoded).
Each task sends through the worker's shared idempotent producer and waits for every
acknowledgement before returning its commit message, so a successful job has written every
row at least once; ``abort`` cannot take back what was written (at-least-once, no
transactions yet), and a retried task may write its rows again. The streaming writer is the
same per micro-batch: a replayed micro-batch writes its rows again (at-least-once, as Spark's
Kafka sink documents).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from strom.client.records import RecordMetadata
from strom.spark.clients import producer
from strom.spark.options import SinkOptions, StromSourceOptionError

WRITABLE_COLUMNS = ("key", "value", "topic", "partition", "headers")


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
    if options.topic is None and "topic" not in names:
        raise StromSourceOptionError(
            "the topic must be given by the 'topic' option or a 'topic' column")


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class StromArrowWriter(DataSourceArrowWriter):
    """Sends each row as one record; picklable (holds only the parsed options)."""

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
    """Send every row of ``iterator``, then wait for every acknowledgement (raises the first
    failed send)."""
    sender = producer(options.bootstrap, options.client)
    futures: list[concurrent.futures.Future[RecordMetadata]] = []
    for batch in iterator:
        columns = {name: batch.column(name).to_pylist()
                   for name in WRITABLE_COLUMNS if name in batch.schema.names}
        values = columns["value"]
        n = len(values)
        keys = columns.get("key", [None] * n)
        topics = [options.topic] * n if options.topic else columns["topic"]
        partitions = columns.get("partition", [None] * n)
        headers = columns.get("headers", [None] * n)
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise StromSourceOptionError("a row to write has a null topic")
            row_headers = ([(h["key"], _as_bytes(h["value"])) for h in headers[i]]
                           if headers[i] else None)
            futures.append(sender.send(topic, _as_bytes(values[i]), _as_bytes(keys[i]),
                                       row_headers, partitions[i]))
    sender.flush()
    for future in futures:
        future.result()
    return StromCommitMessage(len(futures))
