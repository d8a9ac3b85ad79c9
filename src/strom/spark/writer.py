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
Kafka sink documents).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
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

from strom.protocol.records.batch import HEADER_SIZE
from strom.spark.arrow_encode import InvalidRecordColumnError, RecordColumns, encode_records
from strom.spark.clients import producer
from strom.spark.options import SinkOptions, StromSourceOptionError
from strom.spark.partitioning import StickyPartitioner, assign_partitions

_MICROS = pa.timestamp("us", tz="UTC")


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
    failed batch's error).

    Rows are encoded column-wise (:mod:`strom.spark.arrow_encode`) a group of Arrow batches
    at a time, and the finished record batches go to the worker's shared producer through
    :meth:`~strom.client.sync.SyncProducer.send_encoded`, each partition's rows in row order.
    """
    sender = producer(options.bootstrap, options.client)
    batch_size = sender.producer.batch_size
    limit = max(batch_size - HEADER_SIZE, 1)
    sticky = StickyPartitioner(batch_size)
    counts: dict[str, int] = {}
    outcomes: list[concurrent.futures.Future[None]] = []
    written = 0
    for batch in _coalesced(iterator):
        columns = _record_columns(batch, int(time.time() * 1000))
        explicit = batch.column("partition") if "partition" in batch.schema.names else None
        for topic, rows in _topic_rows(batch, options.topic):
            selected, given = columns, explicit
            if rows is not None:
                selected = columns.take(rows)
                given = None if explicit is None else explicit.take(pa.array(rows))
            count = counts.get(topic)
            if count is None:
                count = counts[topic] = sender.partition_count(topic)
            partitions = assign_partitions(topic, count, given, selected.keys,
                                           selected.fixed_sizes, sticky)
            outcomes.extend(sender.send_encoded(topic, encode_records(selected, partitions,
                                                                      limit)))
        written += batch.num_rows
    sender.flush()
    for outcome in outcomes:
        outcome.result()
    return StromCommitMessage(written)


#: Arrow batches are encoded in groups of at least this many rows (or bytes), so the fixed
#: cost of each encoding step is spread over many records (Spark hands over 10,000 rows a
#: batch by default).
GROUP_ROWS = 65_536
GROUP_BYTES = 16 * 1024 * 1024


def _coalesced(iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of ``iterator`` combined into groups of about GROUP_ROWS rows or
    GROUP_BYTES bytes, in order."""
    group: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in iterator:
        if not batch.num_rows:
            continue
        group.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= GROUP_ROWS or size >= GROUP_BYTES:
            yield _combined(group)
            group, rows, size = [], 0, 0
    if group:
        yield _combined(group)


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches).combine_chunks()
    return table.to_batches()[0]


def _record_columns(batch: pa.RecordBatch, now_ms: int) -> RecordColumns:
    """The rows of ``batch`` as records: string keys / values UTF-8 encoded, timestamps in
    ms (the send time where null or absent)."""
    n = batch.num_rows
    names = batch.schema.names
    keys = _binary(batch.column("key")) if "key" in names else pa.nulls(n, pa.binary())
    headers = batch.column("headers") if "headers" in names else None
    try:
        return RecordColumns.of(keys, _binary(batch.column("value")),
                                _timestamps_ms(batch, now_ms), headers)
    except InvalidRecordColumnError as exc:
        raise StromSourceOptionError(f"a row cannot be written: {exc}") from None


def _binary(column: pa.Array) -> pa.Array:
    """A binary or string column as binary (strings are UTF-8 already: no copy)."""
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    return column


def _timestamps_ms(batch: pa.RecordBatch, now_ms: int) -> npt.NDArray[np.int64]:
    """The ``timestamp`` column in epoch milliseconds; ``now_ms`` where null or absent."""
    if "timestamp" not in batch.schema.names:
        return np.full(batch.num_rows, now_ms, dtype=np.int64)
    # A timestamp column (checked by check_sink_schema on the driver).
    micros = batch.column("timestamp").cast(_MICROS).cast(pa.int64())
    millis = np.asarray(micros.fill_null(0), dtype=np.int64) // 1000  # floor, as Python's //
    if micros.null_count:
        millis[np.asarray(micros.is_null())] = now_ms
    return millis


def _topic_rows(batch: pa.RecordBatch, topic: str | None
                ) -> list[tuple[str, npt.NDArray[np.int64] | None]]:
    """Each topic the rows go to, with its rows (None: all of them), in order of first row.
    The ``topic`` option wins over the column; a null topic is an error."""
    if topic is not None:
        return [(topic, None)]
    column = batch.column("topic")
    if column.null_count:
        raise StromSourceOptionError("a row to write has a null topic")
    encoded = pc.dictionary_encode(column)
    names = encoded.dictionary.to_pylist()
    if len(names) == 1:
        return [(names[0], None)]
    codes = np.asarray(encoded.indices)
    return [(name, np.flatnonzero(codes == code)) for code, name in enumerate(names)]
