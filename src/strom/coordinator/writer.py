"""The broker's :class:`~strom.coordinator.runtime.PartitionWriter`: internal-topic partitions
through the replica manager.

Appends go through the partition's leader append path (one uncompressed v2 batch per
coordinator write); the write is committed once the high watermark passed it and it is durable
per the topic's flush policy. Reads decode the partition from its log start to its log end,
chunk by chunk, when a shard loads. Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator

from strom.common.errors import KafkaError, KafkaStorageError, NotLeaderOrFollowerError
from strom.common.types import TopicPartition
from strom.coordinator.runtime import LeadershipListener, ReplayRecord
from strom.protocol.records.reader import decode_batches
from strom.replication.flusher import Flushable
from strom.replication.replica_manager import ReplicaManager

READ_CHUNK = 1 << 20


class ReplicaPartitionWriter:
    """Coordinator writes and loads over the :class:`ReplicaManager`."""

    def __init__(
        self, replicas: ReplicaManager, flush: Callable[[Flushable, int], Awaitable[None]]
    ) -> None:
        self._replicas = replicas
        self._flush = flush

    def append(self, tp: TopicPartition, batch: bytes, *, timeout_ms: int
               ) -> int | asyncio.Future[int]:
        target = self._replicas.get(tp.topic, tp.partition)
        if target is None:
            raise NotLeaderOrFollowerError(f"{tp} is not hosted here")
        try:
            result = target.append_as_leader(memoryview(bytearray(batch)))
        except OSError as exc:  # full disk, I/O error: what the produce path answers
            raise KafkaStorageError(f"cannot append to {tp}: {exc}") from exc
        last = result.last_offset
        if not target.log.needs_flush():
            return last
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        flushed = asyncio.ensure_future(self._flush(target.log, last + 1))

        def settle(future: asyncio.Future[None]) -> None:
            if done.done():
                return
            exc = None if future.cancelled() else future.exception()
            if future.cancelled():
                done.set_exception(KafkaError("flush cancelled"))
            elif isinstance(exc, KafkaError):
                done.set_exception(exc)
            elif exc is not None:  # fsync failure
                done.set_exception(KafkaStorageError(f"cannot fsync {tp}: {exc}"))
            else:
                done.set_result(last)

        flushed.add_done_callback(settle)
        return done

    def read_batches(self, tp: TopicPartition) -> Iterator[list[ReplayRecord]]:
        target = self._replicas.get(tp.topic, tp.partition)
        if target is None:  # never an empty shard for a partition that is not here
            raise NotLeaderOrFollowerError(f"{tp} is not hosted here")
        plog = target.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            result = plog.read(offset, READ_CHUNK, upper_bound=end, min_one=True)
            if not result.regions:
                return
            data = b"".join(
                os.pread(region.file.fileno(), region.size, region.position)
                for region in result.regions
            )
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


def lead_hosted_partitions(listener: LeadershipListener, topic: str,
                           replicas: ReplicaManager) -> None:
    """Tell ``listener`` this broker leads every hosted partition of ``topic`` (single broker:
    every hosted partition is led here). Idempotent for an unchanged leader epoch."""
    for partition in replicas.partitions():
        if partition.tp.topic == topic:
            listener.on_become_leader(partition.tp.partition, partition.leader_epoch)
