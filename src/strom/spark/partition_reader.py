"""Executor side of the batch reader: fetch one partition's [start, end) into Arrow batches.

Runs inside a Python worker. Fetch requests go straight to the partition's leader through the
shared :class:`~strom.spark.clients.WorkerClient`; the raw record batches are decoded with
:func:`~strom.protocol.records.reader.decode_batches` and appended column by column (no
per-record objects besides the decoded records), then cut into ``pyarrow.RecordBatch``es of
at most ``batch_rows`` rows. Control batches (transaction markers) are skipped, like Spark's
Kafka source does with read_uncommitted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.client.cluster import Cluster
from strom.common.errors import NetworkError, StromError, error_for
from strom.common.types import TopicPartition
from strom.protocol.records.reader import decode_batches
from strom.protocol.versions import ApiKey
from strom.spark.clients import cluster_client
from strom.spark.schema import arrow_schema

DEFAULT_BATCH_ROWS = 10_000
FETCH_MAX_BYTES = 4 * 1024 * 1024
FETCH_MAX_WAIT_MS = 100
MAX_FETCH_ATTEMPTS = 20


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


class _Columns:
    """Column buffers of the rows not yet emitted."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def to_batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([t * 1000 for t in self.timestamps], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(rng: PartitionRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of at most ``rng.batch_rows`` rows."""
    if rng.start >= rng.end:
        return
    client = cluster_client(rng.bootstrap)
    schema = arrow_schema(rng.include_headers)
    tp = TopicPartition(rng.topic, rng.partition)
    cols = _Columns(rng.include_headers)
    position = rng.start
    failures = 0
    while position < rng.end:
        raw = client.run(_fetch(client.cluster, tp, position))
        if raw is None:
            failures += 1
            if failures > MAX_FETCH_ATTEMPTS:
                raise DataLossError(f"{tp}: no progress fetching at offset {position}")
            continue
        progressed = False
        for header, records in decode_batches(raw):
            next_offset = header.base_offset + header.last_offset_delta + 1
            if header.is_control:
                position = max(position, next_offset)
                progressed = True
                continue
            timestamp_type = 1 if header.is_log_append_time else 0
            for r in records:
                if r.offset < position:
                    continue
                if r.offset >= rng.end:
                    break
                cols.keys.append(r.key)
                cols.values.append(r.value)
                cols.offsets.append(r.offset)
                cols.timestamps.append(r.timestamp)
                cols.types.append(timestamp_type)
                if rng.include_headers:
                    cols.headers.append([{"key": k, "value": v} for k, v in r.headers])
                if len(cols) >= rng.batch_rows:
                    yield cols.to_batch(rng.topic, rng.partition, schema)
                    cols.clear()
            position = max(position, min(next_offset, rng.end))
            progressed = True
            if position >= rng.end:
                break
        failures = 0 if progressed else failures + 1
        if failures > MAX_FETCH_ATTEMPTS:
            raise DataLossError(f"{tp}: no records at offset {position} before {rng.end}")
    if len(cols):
        yield cols.to_batch(rng.topic, rng.partition, schema)


async def _fetch(cluster: Cluster, tp: TopicPartition, position: int) -> bytes | None:
    """One Fetch of ``tp`` at ``position``: the raw record bytes, or None to retry."""
    try:
        conn = await cluster.connection(await cluster.leader_for(tp))
        fields = {
            "replica_id": -1,
            "max_wait_ms": FETCH_MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": tp.topic, "partitions": [{
                "partition": tp.partition, "fetch_offset": position, "log_start_offset": -1,
                "partition_max_bytes": FETCH_MAX_BYTES}]}],
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
