"""The batch reader: one Spark input partition per topic-partition.

``partitions()`` runs on the driver: it lists the partitions the options select and resolves
their [start, end) offsets with ListOffsets, so the whole read is fixed before any task runs.
``read()`` runs in executor workers on a pickled copy of the reader and needs nothing but the
:class:`StromInputPartition` it is given.

Each non-empty topic-partition range is one Spark task, or several contiguous pieces when
``minPartitions`` asks for more tasks than there are partitions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from strom.client.sync import SyncAdminClient
from strom.common.types import TopicPartition
from strom.spark.limits import split_ranges
from strom.spark.offsets import resolve_ranges, topic_partitions
from strom.spark.options import SourceOptions
from strom.spark.partition_reader import PartitionRange, read_range


class StromInputPartition(InputPartition):
    """One topic-partition's offset range; ``value`` is the :class:`PartitionRange`."""

    def __init__(self, rng: PartitionRange) -> None:
        super().__init__(rng)
        self.range = rng


def input_partitions(options: SourceOptions,
                     ranges: Mapping[TopicPartition, tuple[int, int]]) -> list[InputPartition]:
    """One task per non-empty range (split further to reach ``minPartitions``)."""
    return [
        StromInputPartition(PartitionRange(
            options.bootstrap, tp.topic, tp.partition, start, end, options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            max_bytes=min(options.client.max_partition_fetch_bytes,
                          options.client.fetch_max_bytes),
            max_wait_ms=options.client.fetch_max_wait_ms))
        for tp, start, end in split_ranges(ranges, options.min_partitions)
    ]


class StromBatchReader(DataSourceReader):
    """Reads a fixed offset range of each selected partition (picklable)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        with SyncAdminClient(self.options.bootstrap) as admin:
            tps = topic_partitions(admin, self.options)
            ranges = resolve_ranges(admin, self.options, tps)
        return input_partitions(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StromInputPartition):
            # partitions() returned nothing (e.g. a pattern matching no topic): PySpark then
            # runs one task with a placeholder partition, which has nothing to read.
            return
        yield from read_range(partition.range)
