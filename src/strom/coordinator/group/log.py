"""The ``__consumer_offsets`` partitions as the coordinator sees them: append and replay.

:class:`OffsetsLog` is the seam (an in-memory twin drives the unit tests);
:class:`PartitionOffsetsLog` is the broker's implementation over the replica manager: records
are built into one uncompressed v2 batch per write (no producer id) and appended through the
partition's leader append path, like any produced batch (the topic is created on the first
write if it does not exist yet); reads decode the whole partition from
the log start at load time. Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.reader import decode_batches
from strom.replication.partition import FetchIsolation
from strom.replication.replica_manager import AppendOrigin, AppendOutcome, ReplicaManager

RawRecord = tuple[bytes, bytes | None]


class OffsetsLog(Protocol):
    def append(self, partition: int, records: list[RawRecord], now_ms: int) -> (
        Awaitable[None] | None
    ):
        """Append synchronously; return an awaitable when the write must also be fsynced
        before it is acknowledged (``flush.messages``), else None. Raises KafkaError."""
        ...

    def read(self, partition: int) -> Iterator[RawRecord]:
        """Every record of the partition with a key, in offset order."""
        ...


def build_batch(records: list[RawRecord], now_ms: int) -> bytes:
    builder = BatchBuilder()
    for key, value in records:
        builder.append(now_ms, key, value)
    return builder.build()


READ_CHUNK = 1 << 20
WRITE_TIMEOUT_MS = 30_000


async def _acknowledged(outcome: AppendOutcome, tp: TopicPartition) -> None:
    assert outcome.done is not None
    await outcome.done
    error = outcome.results[tp].error
    if error is not None:
        raise error


class PartitionOffsetsLog:
    """``__consumer_offsets`` through the replica manager (leader append path)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        ensure_topic: Callable[[], None],
    ) -> None:
        self._replicas = replicas
        self._ensure_topic = ensure_topic

    def append(self, partition: int, records: list[RawRecord], now_ms: int) -> (
        Awaitable[None] | None
    ):
        target = self._replicas.get(OFFSETS_TOPIC, partition)
        if target is None:
            self._ensure_topic()  # created on first use, as Kafka does
            target = self._replicas.get(OFFSETS_TOPIC, partition)
        if target is None:
            raise error_class("COORDINATOR_NOT_AVAILABLE")(
                f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        batch = bytearray(build_batch(records, now_ms))
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        outcome = self._replicas.append({tp: memoryview(batch)}, required_acks=-1,
                                        origin=AppendOrigin.COORDINATOR,
                                        timeout_ms=WRITE_TIMEOUT_MS)
        error = outcome.results[tp].error
        if error is not None:
            raise error
        if outcome.done is None:
            return None
        return _acknowledged(outcome, tp)

    def read(self, partition: int) -> Iterator[RawRecord]:
        target = self._replicas.get(OFFSETS_TOPIC, partition)
        if target is None:
            return
        plog = target.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            result = target.read(offset, READ_CHUNK, FetchIsolation.LOG_END, min_one=True)
            if not result.regions:
                return
            data = b"".join(
                os.pread(region.file.fileno(), region.size, region.position)
                for region in result.regions
            )
            advanced = False
            for header, records in decode_batches(data):
                for record in records:
                    if record.key is not None and record.offset >= offset:
                        yield record.key, record.value
                offset = header.base_offset + header.last_offset_delta + 1
                advanced = True
            if not advanced:
                return
