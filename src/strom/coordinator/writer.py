"""The broker's :class:`~strom.coordinator.runtime.PartitionWriter`: internal-topic partitions
through the replica manager's one write path.

Appends are ``ReplicaManager.append(required_acks=-1, origin=COORDINATOR)`` of one
uncompressed v2 batch per coordinator write: refused at once (nothing appended) when this
broker does not lead the partition or the ISR is below ``min.insync.replicas``; committed once
the high watermark passed the batch and it is durable per the topic's flush policy — also when
the ISR shrank below ``min.insync.replicas`` meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND is
only reported once the high watermark passed the records: they are committed, and a replay
of the log would apply them). An appended write is waited for without a time limit (the
runtime times out its answers, not its writes); it fails only when this broker stopped
leading the partition (NOT_LEADER_OR_FOLLOWER) or an fsync round failed
(KAFKA_STORAGE_ERROR). Reads decode the partition from its log start to its log end, a chunk
at a time, when a shard loads — to the end as it is when the last chunk is read (see
:meth:`ReplicaPartitionWriter.read_batches`). Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from strom.common.errors import KafkaError, NotLeaderOrFollowerError, error_class
from strom.common.types import TopicPartition
from strom.coordinator.runtime import ReplayRecord
from strom.protocol.records.reader import decode_batches
from strom.replication.partition import FetchIsolation
from strom.replication.replica_manager import AppendOrigin, ReplicaManager, VerificationGuard

READ_CHUNK = 1 << 20
#: How long the replica manager keeps an appended coordinator write waiting for its
#: acknowledgement: as good as forever (about 24 days); the runtime answers at its timeout.
COMMIT_WAIT_MS = 2**31 - 1
_COMMITTED_LATE = error_class("NOT_ENOUGH_REPLICAS_AFTER_APPEND").code


def _committed(error: KafkaError | None) -> bool:
    return error is None or error.code == _COMMITTED_LATE


class ReplicaPartitionWriter:
    """Coordinator writes and loads over the :class:`ReplicaManager`."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def append(self, tp: TopicPartition, batch: bytes, *,
               verification_guard: VerificationGuard | None = None
               ) -> int | asyncio.Future[int]:
        outcome = self._replicas.append(
            {tp: memoryview(bytearray(batch))}, required_acks=-1,
            origin=AppendOrigin.COORDINATOR, timeout_ms=COMMIT_WAIT_MS,
            verification_guards=None if verification_guard is None
            else {tp: verification_guard})
        result = outcome.results[tp]
        last = result.last_offset  # -1 unless the records reached the log
        if outcome.done is None:  # final: refused, committed, or failed after the append
            if _committed(result.error):
                return last
            if last < 0:
                assert result.error is not None
                raise result.error  # nothing appended
            failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            failed.set_exception(result.error)  # type: ignore[arg-type]
            return failed
        committed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def settle(_done: asyncio.Future[None]) -> None:
            error = outcome.results[tp].error
            if _committed(error):
                committed.set_result(last)
            else:
                assert error is not None
                committed.set_exception(error)

        outcome.done.add_done_callback(settle)
        return committed

    def read_batches(self, tp: TopicPartition) -> Iterator[list[ReplayRecord]]:
        """To the log end *as it is when the last chunk is read*, not as it was when the load
        began: a transaction marker the WriteTxnMarkers path appends while the shard loads
        (the loader yields between chunks) finds the shard LOADING, so only the load can
        replay it — stopping at the first log end left its offsets pending for good."""
        partition = self._replicas.partition(tp)
        if partition is None or not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{tp} is not led here")
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
