"""Sink rows → Kafka record batches, independent of how they are sent (the Spark writers').

:class:`SinkEncoder` turns one Arrow batch of sink rows (``key`` / ``value`` string or
binary, optional ``topic``, ``partition``, ``timestamp``, ``headers``, as checked by
:func:`strom.spark.writer.check_sink_schema`) into, per topic, the records sections of its
partitions: ``(partition, EncodedRecords)`` pairs, each partition's rows in row order, each
section at most ``batch_size`` bytes once sealed (a single larger record alone). Nothing is
sent: the at-least-once writer hands the sections to an idempotent producer
(:meth:`~strom.client.sync.SyncProducer.send_encoded`), and a transactional producer can
seal and send the same sections (:meth:`~strom.protocol.records.builder.EncodedRecords.seal`
stamps codec, producer id / epoch / sequence and the CRC at send time).

Partitions are the client producer's: the ``partition`` column where given (checked to
exist), else murmur2 of the key (Kafka's default partitioner), else sticky
(:mod:`strom.spark.partitioning`). Timestamps are the ``timestamp`` column in ms, floored
(null or absent: the encoding time; before 1970: refused, as Kafka's producer does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.records.batch import HEADER_SIZE
from strom.protocol.records.builder import EncodedRecords
from strom.spark.arrow_encode import InvalidRecordColumnError, RecordColumns, encode_records
from strom.spark.options import StromSourceOptionError
from strom.spark.partitioning import StickyPartitioner, assign_partitions

_MICROS = pa.timestamp("us", tz="UTC")

Sections = list[tuple[int, EncodedRecords]]


class SinkEncoder:
    """Encodes Arrow batches of sink rows for ``topic`` (None: each row's ``topic`` column).

    ``partition_count(topic)`` is asked once per topic (then cached). Holds the sticky
    partitioner's state across batches; one owner (a writer task), not thread-safe.
    """

    def __init__(self, topic: str | None, batch_size: int,
                 partition_count: Callable[[str], int]) -> None:
        self.topic = topic
        self.limit = max(batch_size - HEADER_SIZE, 1)
        self._partition_count = partition_count
        self._counts: dict[str, int] = {}
        self._sticky = StickyPartitioner(batch_size)

    def encode(self, batch: pa.RecordBatch, now_ms: int | None = None
               ) -> list[tuple[str, Sections]]:
        """The sections of each topic the rows of ``batch`` go to, topics in order of first
        row. Raises StromSourceOptionError for a row that cannot be a record (null topic,
        null header or header key) and UnknownTopicOrPartitionError for a partition the
        topic does not have."""
        if not batch.num_rows:
            return []
        columns = _record_columns(batch, int(time.time() * 1000) if now_ms is None else now_ms)
        explicit = batch.column("partition") if "partition" in batch.schema.names else None
        out: list[tuple[str, Sections]] = []
        for topic, rows in _topic_rows(batch, self.topic):
            selected, given = columns, explicit
            if rows is not None:
                selected = columns.take(rows)
                given = None if explicit is None else explicit.take(pa.array(rows))
            count = self._counts.get(topic)
            if count is None:
                count = self._counts[topic] = self._partition_count(topic)
            partitions = assign_partitions(topic, count, given, selected.keys,
                                           selected.fixed_sizes, self._sticky)
            out.append((topic, encode_records(selected, partitions, self.limit)))
        return out


#: Arrow batches are encoded in groups of at least this many rows (or bytes), so the fixed
#: cost of each encoding step is spread over many records (Spark hands over 10,000 rows a
#: batch by default).
GROUP_ROWS = 65_536
GROUP_BYTES = 16 * 1024 * 1024


def coalesced(iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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
    if len(millis) and int(millis.min()) < 0:
        # Kafka's ProducerRecord refuses these too (-1 would read as "no timestamp").
        raise StromSourceOptionError(
            f"a row's timestamp is before 1970 ({int(millis.min())} ms): Kafka record "
            "timestamps are non-negative")
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
