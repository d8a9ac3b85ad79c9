"""The broker's :class:`~strom.coordinator.runtime.PartitionWriter`: internal-topic partitions
through the replica manager's one write path.

Appends are ``ReplicaManager.append(required_acks=-1, origin=COORDINATOR)`` of one
uncompressed v2 batch per coordinator write: refused at once (nothing appended) when this
broker does not lead the partition or the ISR is below ``min.insync.replicas``; committed once
the high watermark passed the batch and it is durable per the topic's flush policy; failed
later with the error the replica manager records (KAFKA_STORAGE_ERROR on a failed fsync,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT after ``timeout_ms``). Reads decode the
partition from its log start to its log end, a chunk at a time, when a shard loads — to the
end as it is when the last chunk is read (see :meth:`ReplicaPartitionWriter.read_batches`).
Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from strom.common.errors import NotLeaderOrFollowerError
from strom.common.types import TopicPartition
from strom.coordinator.runtime import ReplayRecord
from strom.protocol.records.reader import decode_batches
from strom.replication.partition import FetchIsolation
from strom.replication.replica_manager import AppendOrigin, ReplicaManager

READ_CHUNK = 1 << 20


class ReplicaPartitionWriter:
    """Coordinator writes and loads over the :class:`ReplicaManager`."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def append(self, tp: TopicPartition, batch: bytes, *, timeout_ms: int
               ) -> int | asyncio.Future[int]:
        outcome = self._replicas.append(
            {tp: memoryview(bytearray(batch))}, required_acks=-1,
            origin=AppendOrigin.COORDINATOR, timeout_ms=timeout_ms)
        result = outcome.results[tp]
        if outcome.done is None:  # final: refused (nothing appended) or already committed
            if result.error is not None:
                raise result.error
            return result.last_offset
        last = result.last_offset  # appended; its error reads REQUEST_TIMED_OUT until answered
        committed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def settle(_done: asyncio.Future[None]) -> None:
            error = outcome.results[tp].error
            if error is not None:
                committed.set_exception(error)
            else:
                committed.set_result(last)

        outcome.done.add_done_callback(settle)
        return committed

    def read_batches(self, tp: TopicPartition) -> Iterator[list[ReplayRecord]]:
        """To the log end *as it is when the last chunk is read*, not as it was when the load
        began: a transaction marker the WriteTxnMarkers path appends while the shard loads
        (the loader yields between chunks) finds the shard LOADING, so only the load can
        replay it — stopping at the first log end left its offsets pending for good."""
        partition = self._replicas.partition(tp)
        if partition is None:
            raise NotLeaderOrFollowerError(f"{tp} is not hosted here")
        offset = partition.log_start_offset
        while offset < partition.log_end_offset:
            result = partition.read(offset, READ_CHUNK, FetchIsolation.LOG_END, min_one=True)
            if not result.regions:
                return
            data = result.to_bytes()
            advanced = False
            for header, records in decode_batches(data):
                pid, epoch, control = header.producer_id, header.producer_epoch, header.is_control
                kept = [ReplayRecord(r.offset, pid, epoch, control, r.key, r.value)
                        for r in records if r.offset >= offset]
                if kept:
                    yield kept
                offset = header.next_offset
                advanced = True
            if not advanced:
                return
