"""The streaming reader: micro-batches of offset ranges, checkpointed by Spark.

Driver side (one long-lived Python process per query):

- ``initialOffset`` resolves the starting options once; Spark writes the answer to the
  query's offset log, so a restarted query continues from its checkpoint instead.
- ``latestOffset(start, limit)`` discovers partitions (new topics matching a pattern, new
  partitions of subscribed topics: they start at their log start offset, as in Spark) and
  returns the end of the next micro-batch: everything available, or ``maxOffsetsPerTrigger``
  spread by backlog (:func:`~strom.spark.limits.rate_limit`). With ``minOffsetsPerTrigger``
  it returns ``start`` unchanged (no batch) until enough offsets are waiting or
  ``maxTriggerDelay`` has passed since the last batch. After
  ``prepareForTriggerAvailableNow`` it never goes past the offsets that existed then.
- ``partitions(start, end)`` checks for offsets lost to retention (``failOnDataLoss``:
  fail, or skip to the log start) and cuts the ranges into tasks (``minPartitions``). It is
  deterministic given its arguments, so a replayed batch reads the same offsets.
- With ``commitOffsetsToGroup``, the offsets of every finished micro-batch are stored as that
  consumer group's committed offsets, so ``strom groups describe`` shows the query's lag.
  Spark calls ``commit(end)`` for a batch only when the next one is planned, so the start of
  ``latestOffset`` (always the end of a finished batch) is committed as well; otherwise a
  query stopped by ``Trigger.AvailableNow`` would leave its last batch uncommitted.

Every offset dict, returned or received, has Spark's Kafka checkpoint form
``{"topic": {"partition": offset}}``; an end always holds every partition of its start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from strom.client.sync import SyncAdminClient
from strom.common.errors import StromError
from strom.common.types import TopicPartition
from strom.spark.batch import StromInputPartition, input_partitions
from strom.spark.limits import backlog, rate_limit
from strom.spark.offsets import (
    Offsets,
    from_json,
    log_bounds,
    log_start_offsets,
    resolve_bound,
    to_json,
    topic_partitions,
)
from strom.spark.options import SourceOptions
from strom.spark.partition_reader import read_range, report_data_loss

log = logging.getLogger(__name__)


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's Kafka micro-batch stream on strom (picklable: the admin client stays behind)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: SyncAdminClient | None = None
        self._available_now: Offsets | None = None
        self.clock: Callable[[], float] = time.monotonic  # seconds; replaceable in tests
        self._last_batch_s = self.clock()
        self._committed: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors need only the options; the driver's admin client does not pickle.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    @property
    def admin(self) -> SyncAdminClient:
        if self._admin is None:
            self._admin = SyncAdminClient(self.options.bootstrap,
                                          client_id=self.options.client.client_id)
        return self._admin

    # -- offsets ------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        tps = topic_partitions(self.admin, self.options)
        starts = resolve_bound(self.admin, self.options, tps, self.options.starting,
                               self.options.starting_by_timestamp, "starting")
        return to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = topic_partitions(self.admin, self.options)
        self._available_now = log_bounds(self.admin, tps)[1]

    def reportLatestOffset(self) -> dict[str, Any] | None:
        tps = topic_partitions(self.admin, self.options)
        return to_json(log_bounds(self.admin, tps)[1]) if tps else None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self.commit(start)
        begin = from_json(start)
        current = topic_partitions(self.admin, self.options)
        low, high = log_bounds(self.admin, current)
        # Partitions that disappeared (deleted topics) keep their last offset in the dict.
        latest: Offsets = dict(begin)
        base: Offsets = dict(begin)
        for tp in current:
            if tp not in begin:
                base[tp] = low[tp]  # a new partition is read from its start, like Spark
            # Below the start only if the log went backwards (topic recreated): partitions()
            # reports that as data loss.
            latest[tp] = high[tp]
        if self._available_now is not None:
            target = self._available_now
            latest = {tp: min(off, target[tp]) if tp in target else base[tp]
                      for tp, off in latest.items()}
        end = self._limited(base, latest, limit)
        if end == begin:
            return start
        self._last_batch_s = self.clock()
        return to_json(end)

    def _limited(self, base: Offsets, latest: Offsets, limit: ReadLimit) -> Offsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        min_rows = (limit.min_rows if isinstance(limit, ReadMinRows)
                    else self.options.min_offsets_per_trigger)
        if min_rows is not None and self._available_now is None:
            waited_ms = (self.clock() - self._last_batch_s) * 1000
            if (backlog(base, latest) < min_rows
                    and waited_ms < self.options.max_trigger_delay_ms):
                return base
        if isinstance(limit, ReadMaxRows):
            return rate_limit(base, latest, limit.max_rows)
        return latest

    # -- planning and reading -------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        for tp in sorted(until):
            if tp in begin and until[tp] < begin[tp]:
                self._data_loss(f"the offset of {tp} went back from {begin[tp]} to "
                                f"{until[tp]} (topic recreated or truncated)")
        wanted = [tp for tp in sorted(until) if until[tp] > begin.get(tp, -1)]
        if not wanted:
            return []
        low = log_start_offsets(self.admin, wanted)
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for tp in wanted:
            first = begin.get(tp)
            if first is None:  # a partition added since the start: read from its beginning
                first = low[tp]
            if first < low[tp]:
                self._data_loss(
                    f"offsets {first}..{min(low[tp], until[tp]) - 1} of {tp} were deleted "
                    f"(retention or DeleteRecords) before they were read")
                first = low[tp]
            if first < until[tp]:
                ranges[tp] = (first, until[tp])
        return input_partitions(self.options, ranges)

    def _data_loss(self, message: str) -> None:
        report_data_loss(message, self.options.fail_on_data_loss)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, StromInputPartition):
            yield from read_range(partition.range)

    def commit(self, end: dict[str, Any]) -> None:
        group = self.options.commit_group
        if group is None or end == self._committed:
            return
        try:
            self.admin.alter_consumer_group_offsets(group, from_json(end))
            self._committed = end
        except StromError as exc:
            # Progress lives in Spark's checkpoint; the group's offsets are a view of it.
            log.warning("could not commit offsets of group %r: %s", group, exc)

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
