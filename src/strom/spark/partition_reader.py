"""Executor side of the batch reader: fetch one partition's [start, end) into Arrow batches.

Runs inside a Python worker. Fetch requests go straight to the partition's leader through the
shared :class:`~strom.spark.clients.WorkerClient`; each fetched record set is decoded
column-wise straight into one ``pyarrow.RecordBatch`` by
:func:`~strom.spark.arrow_records.decode_to_arrow` (no per-record Python objects), which is
yielded in zero-copy slices of at most ``batch_rows`` rows. Control batches (transaction
markers) are skipped, like Spark's Kafka source does with read_uncommitted.

Offsets deleted between planning and reading (retention, DeleteRecords) make the broker answer
OFFSET_OUT_OF_RANGE: with ``fail_on_data_loss`` the task fails with :class:`DataLossError`,
otherwise it continues from the log start offset, as Spark's Kafka source does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from strom.client.admin_types import OffsetSpec
from strom.client.cluster import Cluster
from strom.client.offsets import list_offsets
from strom.common.errors import NetworkError, StromError, error_class, error_for
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey
from strom.spark.arrow_records import decode_to_arrow
from strom.spark.clients import cluster_client

DEFAULT_BATCH_ROWS = 100_000
FETCH_MAX_BYTES = 4 * 1024 * 1024
FETCH_MAX_WAIT_MS = 100
MAX_FETCH_ATTEMPTS = 20

OffsetOutOfRangeError = error_class("OFFSET_OUT_OF_RANGE")

log = logging.getLogger(__name__)


class DataLossError(StromError):
    """Offsets the reader was asked for are no longer in the log (retention / truncation)."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Everything an executor needs to read one topic-partition (picklable)."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    fail_on_data_loss: bool = True
    max_bytes: int = FETCH_MAX_BYTES
    max_wait_ms: int = FETCH_MAX_WAIT_MS


def read_range(rng: PartitionRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of at most ``rng.batch_rows`` rows.

    The next Fetch is already under way on the client's loop thread while Spark consumes the
    batches of the previous one (one fetch of read-ahead per partition). Raises
    :class:`DataLossError` after ``MAX_FETCH_ATTEMPTS`` fetches in a row that move the
    position no further (nothing returned, or nothing at or after the position).
    """
    if rng.start >= rng.end:
        return
    client = cluster_client(rng.bootstrap)
    tp = TopicPartition(rng.topic, rng.partition)

    def fetch(at: int) -> concurrent.futures.Future[bytes | None]:
        return client.loop.submit(_fetch(client.cluster, tp, at, rng.max_bytes,
                                         rng.max_wait_ms))

    position = rng.start
    failures = 0
    pending = fetch(position)
    try:
        while position < rng.end:
            try:
                raw = pending.result()
            except OffsetOutOfRangeError:
                position = _after_lost_offsets(client.run(_log_start(client.cluster, tp)),
                                               rng, position)
                pending = fetch(position)
                continue
            batch, next_position = (None, position) if raw is None else decode_to_arrow(
                raw, rng.topic, rng.partition, position, rng.end, rng.include_headers)
            if next_position > position:
                position, failures = next_position, 0
            else:
                failures += 1
                if failures > MAX_FETCH_ATTEMPTS:
                    raise DataLossError(
                        f"{tp}: no records at offset {position} before {rng.end}")
            if position < rng.end:
                pending = fetch(position)
            if batch is not None:
                yield from _slices(batch, rng.batch_rows)
    finally:
        pending.cancel()


def report_data_loss(message: str, fail: bool) -> None:
    """Offsets were lost before being read: raise :class:`DataLossError` (``fail``, Spark's
    ``failOnDataLoss=true``), or log that they are skipped."""
    if fail:
        raise DataLossError(f"{message}. Some data may have been lost. If you want the query "
                            "to skip lost offsets, set the source option failOnDataLoss=false.")
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def _after_lost_offsets(log_start: int, rng: PartitionRange, position: int) -> int:
    """Where to continue after ``position`` was found deleted (or fail)."""
    tp = f"{rng.topic}-{rng.partition}"
    if log_start <= position:
        # Out of range above the log end: the log was truncated or recreated.
        report_data_loss(f"offset {position} of {tp} is beyond the end of the log",
                         rng.fail_on_data_loss)
        return rng.end
    report_data_loss(f"offsets {position}..{min(log_start, rng.end) - 1} of {tp} were "
                     "deleted before they were read", rng.fail_on_data_loss)
    return min(log_start, rng.end)


async def _log_start(cluster: Cluster, tp: TopicPartition) -> int:
    found = await list_offsets(cluster, {tp: OffsetSpec.EARLIEST},
                               timeout_s=cluster.request_timeout_s)
    return found[tp].offset


def _slices(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` in zero-copy slices of at most ``rows`` rows (at least one row each)."""
    step = max(rows, 1)
    for first in range(0, batch.num_rows, step):
        yield batch.slice(first, step)


async def _fetch(cluster: Cluster, tp: TopicPartition, position: int, max_bytes: int,
                 max_wait_ms: int) -> bytes | None:
    """One Fetch of ``tp`` at ``position``: the raw record bytes, or None to retry."""
    try:
        conn = await cluster.connection(await cluster.leader_for(tp))
        fields = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": tp.topic, "partitions": [{
                "partition": tp.partition, "fetch_offset": position, "log_start_offset": -1,
                "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = await conn.request(ApiKey.FETCH, fields,
                                      timeout_s=cluster.request_timeout_s + 1)
    except NetworkError:
        cluster.invalidate(tp)
        await asyncio.sleep(0.1)
        return None
    if getattr(response, "error_code", 0):
        raise error_for(response.error_code, f"Fetch of {tp}")
    for topic in response.responses:
        for p in topic.partitions:
            if p.partition_index != tp.partition:
                continue
            if p.error_code:
                error = error_for(p.error_code, f"fetching {tp} at offset {position}")
                if error.retriable:
                    cluster.invalidate(tp)
                    await asyncio.sleep(0.1)
                    return None
                raise error
            return bytes(p.records) if p.records else None
    return None
