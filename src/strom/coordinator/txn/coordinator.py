"""The transaction coordinator: routes each transactional id to the shard that owns it.

A transactional id lives in partition ``partition_for(id, partitions)`` of
``__transaction_state``; that partition's :class:`~strom.coordinator.txn.shard.TxnShard`
exists on this broker only while the broker leads the partition (the runtime loads and unloads
it). A partition that is loading answers COORDINATOR_LOAD_IN_PROGRESS, one not led here
NOT_COORDINATOR, as Kafka does; then the shard validates, writes and answers through a
callback. The broker registers :attr:`TxnCoordinator.runtime` as the leadership listener of
``__transaction_state``. Owned by the broker's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from strom.common.clock import Clock
from strom.common.errors import KafkaError
from strom.common.timer import Scheduler
from strom.common.types import TopicPartition
from strom.coordinator.runtime import (
    COORDINATOR_LOAD_IN_PROGRESS,
    CoordinatorRuntime,
    PartitionWriter,
    ShardContext,
)
from strom.coordinator.txn.model import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState
from strom.coordinator.txn.records import TXN_TOPIC, partition_for
from strom.coordinator.txn.shard import (
    INVALID_REQUEST,
    TRANSACTIONAL_ID_NOT_FOUND,
    ErrorCallback,
    InitCallback,
    MarkerSender,
    TxnSettings,
    TxnShard,
    TxnView,
)

__all__ = ["TXN_TOPIC", "TxnCoordinator", "TxnSettings", "TxnView"]


class TxnCoordinator:
    """Every transactional id this broker coordinates (those of the partitions it leads)."""

    def __init__(self, writer: PartitionWriter, scheduler: Scheduler, clock: Clock,
                 settings: TxnSettings, new_producer_id: Callable[[], int],
                 markers: MarkerSender, *, loop: asyncio.AbstractEventLoop | None = None
                 ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.markers = markers
        self._new_producer_id = new_producer_id
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TXN_TOPIC, writer, clock, self._new_shard, scheduler=scheduler,
            write_timeout_ms=settings.write_timeout_ms, loop=loop)

    def _new_shard(self, context: ShardContext) -> TxnShard:
        return TxnShard(context, self.scheduler, self.clock, self.settings,
                        self._new_producer_id, self.markers)

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.settings.partitions)

    def _route(self, transactional_id: str | None) -> TxnShard | int:
        if not transactional_id:
            return INVALID_REQUEST
        try:
            return self.runtime.shard(self.partition_for(transactional_id))
        except KafkaError as exc:
            return exc.code

    # -- client operations -------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None, callback: InitCallback) -> None:
        shard = self._route(transactional_id)
        if isinstance(shard, int):
            return callback(shard, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        return shard.init_producer_id(transactional_id, timeout_ms, expected, callback)

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition], callback: ErrorCallback) -> None:
        shard = self._route(transactional_id)
        if isinstance(shard, int):
            return callback(shard)
        return shard.add_partitions(transactional_id, producer_id, epoch, partitions, callback)

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        shard = self._route(transactional_id)
        if isinstance(shard, int):
            return dict.fromkeys(partitions, shard)
        return shard.verify_partitions(transactional_id, producer_id, epoch, partitions)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                callback: ErrorCallback) -> None:
        shard = self._route(transactional_id)
        if isinstance(shard, int):
            return callback(shard)
        return shard.end_txn(transactional_id, producer_id, epoch, commit, callback)

    # -- introspection (KIP-664) -------------------------------------------------------------
    def describe(self, transactional_id: str) -> tuple[int, TxnView | None]:
        """(error, view): TRANSACTIONAL_ID_NOT_FOUND when the id is unknown here."""
        shard = self._route(transactional_id)
        if isinstance(shard, int):
            return shard, None
        view = shard.view(transactional_id)
        return (0, view) if view is not None else (TRANSACTIONAL_ID_NOT_FOUND, None)

    def list_transactions(self, states: set[TxnState] | None = None,
                          producer_ids: set[int] | None = None, min_duration_ms: int = -1
                          ) -> tuple[int, list[TxnView]]:
        """(error, views) over every partition led here; COORDINATOR_LOAD_IN_PROGRESS while
        one loads, as Kafka."""
        if self.runtime.any_loading():
            return COORDINATOR_LOAD_IN_PROGRESS, []
        now = self.clock.now_ms()
        out = []
        for shard in self.runtime.active_shards():
            for view in shard.views():
                if states and view.state not in states:
                    continue
                if producer_ids and view.producer_id not in producer_ids:
                    continue
                if min_duration_ms >= 0 and (view.state is not TxnState.ONGOING
                                             or now - view.start_ms < min_duration_ms):
                    continue
                out.append(view)
        return 0, out

    # -- lifecycle ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.runtime.close()
