"""The delayed operations of the data path: a produce waiting to be acknowledged, a parked fetch.

:class:`DelayedProduce` (Kafka's ``DelayedProduce``) waits, per partition, for what the
request's acks require: the high watermark past the appended records (acks=-1) and, when the
flush policy asks for it (``flush.messages``), the fsync round that makes them durable. It is
watched under each partition it waits for; the high watermark moving, an fsync round ending
or the partition leaving this broker re-checks it. Until a partition is satisfied its error is
REQUEST_TIMED_OUT, which is what expiry leaves (as in Kafka).

:class:`DelayedFetch` waits until a read returns at least ``min_bytes`` (or an error), and is
watched under each partition it reads; appends and high-watermark moves re-check it. Its
``read`` callable is the handler's: the operation only decides *when* to answer.

Both resolve an asyncio future in ``on_complete``; both are owned by the event-loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from strom.common.errors import KafkaError, RequestTimedOutError
from strom.common.types import TopicPartition
from strom.replication.purgatory import DelayedOperation

T = TypeVar("T")


@dataclass(slots=True)
class PartitionAppendResult:
    """The outcome of one partition's append, as the produce response reports it."""

    error: KafkaError | None = None
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class PendingAck:
    """One partition of a :class:`DelayedProduce` that is not acknowledged yet."""

    required_offset: int  # the appended records' end (last offset + 1)
    wait_for_high_watermark: bool
    wait_for_flush: bool


class AckSource(Protocol):
    """What a delayed produce asks of the replica manager: is this partition's append
    acknowledged (done, error)?"""

    def check_ack(self, tp: TopicPartition, pending: PendingAck) -> tuple[bool, KafkaError | None]:
        ...


def settle(
    pending: dict[TopicPartition, PendingAck],
    results: dict[TopicPartition, PartitionAppendResult],
    source: AckSource,
) -> None:
    """Remove from ``pending`` every partition that is acknowledged (or failed) now, with its
    outcome written into ``results``."""
    for tp, ack in list(pending.items()):
        done, error = source.check_ack(tp, ack)
        if done:
            del pending[tp]
            _settle_one(results[tp], error)


def _settle_one(result: PartitionAppendResult, error: KafkaError | None) -> None:
    result.error = error
    if error is not None:
        result.base_offset = -1


class DelayedProduce(DelayedOperation):
    """A produce (or coordinator write) waiting for its acks; see the module docstring."""

    __slots__ = ("_future", "_pending", "_results", "_source")

    def __init__(
        self,
        timeout_ms: int,
        pending: dict[TopicPartition, PendingAck],
        results: dict[TopicPartition, PartitionAppendResult],
        source: AckSource,
        future: asyncio.Future[None],
    ) -> None:
        super().__init__(timeout_ms)
        self._pending = pending
        self._results = results
        self._source = source
        self._future = future
        for tp in pending:
            results[tp].error = RequestTimedOutError(
                f"the append to {tp} was not acknowledged within {timeout_ms} ms")

    def fail(self, tp: TopicPartition, error: KafkaError, durable_up_to: int) -> None:
        """An fsync round failed for ``tp``: fail this request's records not yet durable."""
        pending = self._pending.get(tp)
        if pending is not None and pending.wait_for_flush and (
                durable_up_to < pending.required_offset):
            del self._pending[tp]
            self._set_error(tp, error)

    def _set_error(self, tp: TopicPartition, error: KafkaError) -> None:
        _settle_one(self._results[tp], error)

    def try_complete(self) -> bool:
        settle(self._pending, self._results, self._source)
        if self._pending:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        if not self._future.done():
            self._future.set_result(None)


class DelayedFetch(DelayedOperation, Generic[T]):
    """A fetch parked until ``read()`` reports at least ``min_bytes`` or an error.

    ``changed(key)`` (optional) tells whether partition ``key`` may now have something to
    answer (records, an error, a partition gone or re-led); with ``min_bytes`` 1 an event
    on a partition for which it says no cannot complete the fetch, so the read of every
    partition is skipped — a follower's fetch of a thousand partitions costs one check, not
    a thousand reads, per append to one of them."""

    __slots__ = ("_changed", "_future", "_min_bytes", "_read", "_result")

    def __init__(
        self,
        timeout_ms: int,
        min_bytes: int,
        read: Callable[[], tuple[T, int, bool]],
        future: asyncio.Future[T],
        changed: Callable[[Hashable], bool] | None = None,
    ) -> None:
        super().__init__(timeout_ms)
        self._min_bytes = min_bytes
        self._read = read
        self._future = future
        self._result: T | None = None
        self._changed = changed if min_bytes <= 1 else None

    def try_complete_for(self, key: Hashable) -> bool:
        if self._changed is not None and not self._changed(key):
            return False
        return self.try_complete()

    def try_complete(self) -> bool:
        result, size, errors = self._read()
        if size >= self._min_bytes or errors:
            self._result = result
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        result = self._result
        if result is None:  # expiry (or shutdown): answer with what is there now
            result = self._read()[0]
        if not self._future.done():
            self._future.set_result(result)
