"""Blocking facades over the asyncio clients, for scripts and the CLI.

Each facade owns a :class:`LoopThread`: a daemon thread running a private event loop on which
the wrapped asyncio client lives. Calls hop onto that loop and block for the result (with an
optional timeout). Facades are context managers; ``close()`` closes the client, stops the loop
and joins the thread. They may be used from any one thread at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, cast, overload

from strom.client.admin import AdminClient
from strom.client.admin_types import (
    AbortTransactionSpec,
    AlterConfigOp,
    BrokerApiVersions,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    ProducerState,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from strom.client.consumer.consumer import CommitCallback, Consumer
from strom.client.fetcher import Fetcher
from strom.client.metadata import BrokerNode
from strom.client.partition_admin import ElectionType, PartitionReassignment
from strom.client.producer import BulkRecord, DeliveryCallback, PreparedRecord, Producer
from strom.client.quota_admin import Component, QuotaAlteration
from strom.client.records import ConsumerRecord, Header, RecordMetadata
from strom.client.scram_admin import ScramDelete, ScramUpsert, UserScramCredentials
from strom.client.transactions import ConsumerGroupMetadata
from strom.common.acl import AclBinding, AclFilter
from strom.common.errors import KafkaError, RequestTimedOutError
from strom.common.types import TopicPartition
from strom.protocol.records.builder import EncodedRecords

T = TypeVar("T")
_log = logging.getLogger("strom.client.sync")

DEFAULT_MAX_PENDING_SENDS = 10000


class LoopThread:
    """An event loop in a daemon thread; :meth:`run` executes a coroutine there and waits."""

    def __init__(self, name: str = "strom-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (TimeoutError after ``timeout_s``)."""
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class _Facade:
    """Shared lifecycle: start the async client on the loop thread; close it and the loop."""

    _client: AdminClient | Producer | Fetcher | Consumer

    def __init__(self, name: str) -> None:
        self._loop = LoopThread(name)

    def _start(self, start: Awaitable[Any]) -> None:
        async def go() -> None:
            await start

        try:
            self._loop.run(go())
        except BaseException:
            self._loop.stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return self._loop.run(coro, timeout_s)

    def close(self) -> None:
        """Close the client and stop the loop; a second call does nothing (as in Kafka's
        clients)."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SyncAdminClient(_Facade):
    """Blocking :class:`~strom.client.admin.AdminClient` (same methods, same results)."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        super().__init__("strom-admin")
        self._client = self.admin = AdminClient(bootstrap, **options)
        self._start(self.admin.start())

    def create_topics(self, topics: Sequence[NewTopic], *,
                      validate_only: bool = False) -> dict[str, CreatedTopic]:
        return self._run(self.admin.create_topics(topics, validate_only=validate_only))

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: Mapping[str, str | None] | None = None, *,
                     validate_only: bool = False) -> CreatedTopic:
        return self._run(self.admin.create_topic(name, num_partitions, replication_factor,
                                                 configs, validate_only=validate_only))

    def delete_topics(self, names: Iterable[str]) -> None:
        self._run(self.admin.delete_topics(names))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._run(self.admin.list_topics(include_internal=include_internal))

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._run(self.admin.describe_topics(names))

    def create_partitions(self, new_counts: Mapping[str, int], *,
                          validate_only: bool = False) -> None:
        self._run(self.admin.create_partitions(new_counts, validate_only=validate_only))

    def describe_configs(self, resources: Sequence[ConfigResource], *,
                         include_synonyms: bool = False, include_documentation: bool = False,
                         keys: Sequence[str] | None = None
                         ) -> dict[ConfigResource, list[ConfigEntry]]:
        return self._run(self.admin.describe_configs(
            resources, include_synonyms=include_synonyms,
            include_documentation=include_documentation, keys=keys))

    def alter_configs(self, resource: ConfigResource, configs: Mapping[str, str | None], *,
                      validate_only: bool = False) -> None:
        self._run(self.admin.alter_configs(resource, configs, validate_only=validate_only))

    def incremental_alter_configs(self, resource: ConfigResource, ops: Sequence[AlterConfigOp],
                                  *, validate_only: bool = False) -> None:
        self._run(self.admin.incremental_alter_configs(resource, ops,
                                                       validate_only=validate_only))

    @overload
    def delete_records(self, offsets: Mapping[TopicPartition, int], *,
                       partial: Literal[False] = ...) -> dict[TopicPartition, int]: ...

    @overload
    def delete_records(self, offsets: Mapping[TopicPartition, int], *,
                       partial: Literal[True]) -> dict[TopicPartition, int | KafkaError]: ...

    def delete_records(self, offsets: Mapping[TopicPartition, int], *,
                       partial: bool = False) -> Mapping[TopicPartition, int | KafkaError]:
        return self._run(self.admin.delete_records(offsets, partial=partial))

    @overload
    def list_offsets(self, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
                     partial: Literal[False] = ...) -> dict[TopicPartition, OffsetAndTimestamp]:
        ...

    @overload
    def list_offsets(self, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
                     partial: Literal[True]
                     ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]: ...

    def list_offsets(self, specs: Mapping[TopicPartition, int], *, isolation_level: int = 0,
                     partial: bool = False
                     ) -> Mapping[TopicPartition, OffsetAndTimestamp | KafkaError]:
        return self._run(self.admin.list_offsets(specs, isolation_level=isolation_level,
                                                 partial=partial))

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self.admin.describe_cluster())

    def elect_leaders(self, election_type: ElectionType = ElectionType.PREFERRED,
                      partitions: Iterable[TopicPartition] | None = None
                      ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(self.admin.elect_leaders(election_type, partitions))

    def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(self.admin.alter_partition_reassignments(reassignments))

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, PartitionReassignment]:
        return self._run(self.admin.list_partition_reassignments(partitions))

    def describe_log_dirs(self, broker_ids: Iterable[int] | None = None,
                          partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[int, list[LogDirDescription]]:
        return self._run(self.admin.describe_log_dirs(broker_ids, partitions))

    def describe_api_versions(self, broker_id: int) -> BrokerApiVersions:
        return self._run(self.admin.describe_api_versions(broker_id))

    def find_coordinator(self, group_id: str) -> BrokerNode:
        return self._run(self.admin.find_coordinator(group_id))

    def find_coordinators(self, group_ids: Iterable[str]) -> dict[str, BrokerNode]:
        return self._run(self.admin.find_coordinators(group_ids))

    def list_groups(self, states: Iterable[str] | None = None, *,
                    types: Iterable[str] | None = None) -> list[GroupListing]:
        return self._run(self.admin.list_groups(states, types=types))

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        return self._run(self.admin.describe_groups(group_ids))

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._run(self.admin.describe_group(group_id))

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._run(self.admin.list_consumer_group_offsets(group_id, partitions))

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                                     ) -> None:
        self._run(self.admin.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        self._run(self.admin.delete_consumer_groups(group_ids))

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[TopicPartition]) -> None:
        self._run(self.admin.delete_consumer_group_offsets(group_id, partitions))

    def describe_producers(self, partitions: Iterable[TopicPartition], *,
                           broker_id: int | None = None, partial: bool = False,
                           ) -> Mapping[TopicPartition, list[ProducerState] | KafkaError]:
        return self._run(self.admin.describe_producers(partitions, broker_id=broker_id,
                                                       partial=partial))

    def list_transactions(self, states: Iterable[str] | None = None,
                          producer_ids: Iterable[int] | None = None,
                          duration_ms: int | None = None) -> list[TransactionListing]:
        return self._run(self.admin.list_transactions(states, producer_ids, duration_ms))

    def describe_transactions(self, transactional_ids: Iterable[str]
                              ) -> dict[str, TransactionDescription]:
        return self._run(self.admin.describe_transactions(transactional_ids))

    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        self._run(self.admin.abort_transaction(spec))

    def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None) -> list[UserScramCredentials]:
        return self._run(self.admin.describe_user_scram_credentials(users))

    def alter_user_scram_credentials(self, changes: Iterable[ScramUpsert | ScramDelete]) -> None:
        self._run(self.admin.alter_user_scram_credentials(changes))

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        self._run(self.admin.create_acls(bindings))

    def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        return self._run(self.admin.describe_acls(acl_filter))

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        return self._run(self.admin.delete_acls(filters))

    def describe_client_quotas(
            self, components: Iterable[Component] = (), *, strict: bool = False
    ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        return self._run(self.admin.describe_client_quotas(components, strict=strict))

    def alter_client_quotas(self, alterations: Iterable[QuotaAlteration], *,
                            validate_only: bool = False) -> None:
        self._run(self.admin.alter_client_quotas(alterations, validate_only=validate_only))


class DeliveryFuture(concurrent.futures.Future[T]):
    """The future :meth:`SyncProducer.send` returns: a ``concurrent.futures.Future`` that is
    running from the start (it cannot be cancelled) and shares one condition variable with
    every other DeliveryFuture instead of creating its own — creating a Condition per record
    cost more than the rest of ``send`` together. ``result()`` / ``exception()`` re-check
    their own state after every wake-up, since a notification may be for another future;
    ``concurrent.futures.wait`` / ``as_completed`` work as with any future.
    """

    _shared = threading.Condition()

    def __init__(self) -> None:  # no super().__init__(): that builds the Condition
        self._condition = self._shared
        self._state = "RUNNING"
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    def _wait_finished(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._state != "FINISHED":
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError()
                self._condition.wait(left)

    def result(self, timeout: float | None = None) -> T:
        self._wait_finished(timeout)
        if self._exception is not None:
            raise self._exception
        return cast(T, self._result)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_finished(timeout)
        return self._exception


class SyncProducer(_Facade):
    """Blocking :class:`~strom.client.producer.Producer`.

    :meth:`send` returns a ``concurrent.futures.Future`` at once. Interceptors' ``on_send``
    and the serializers run in the caller's thread (their errors raise from ``send``); the
    records then cross to the loop thread through a queue drained by one task (no thread hop
    per record); ``send`` blocks when ``max_pending`` records wait in that queue, until the
    task takes them (backpressure), for at most ``max_block_s`` (RequestTimedOutError).
    ``on_delivery(metadata, exception)`` and the interceptors' ``on_acknowledgement`` run on
    the loop thread: keep them quick.
    """

    def __init__(self, bootstrap: str, *, max_pending: int = DEFAULT_MAX_PENDING_SENDS,
                 **options: Any) -> None:
        super().__init__("strom-producer")
        self._client = self.producer = Producer(bootstrap, **options)
        self._max_pending = max(max_pending, 1)
        self._room = threading.Event()
        self._lock = threading.Lock()
        self._queue: deque[tuple[PreparedRecord, concurrent.futures.Future[RecordMetadata],
                                 DeliveryCallback | None]] = deque()
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None
        self._start(self.producer.start())

    def send(self, topic: str, value: Any, key: Any = None,
             headers: Iterable[Header] | None = None, partition: int | None = None,
             timestamp: int | None = None, *, on_delivery: DeliveryCallback | None = None
             ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record; the future resolves to its :class:`RecordMetadata` or raises
        (see :meth:`Producer.send`). A transactional producer raises at once when no
        transaction is open (or it failed)."""
        if self.producer.transaction is not None:
            self.producer.transaction.check_send()
        prepared = self.producer.prepare(topic, value, key, headers, partition, timestamp)
        future: DeliveryFuture[RecordMetadata] = DeliveryFuture()
        with self._lock:
            full = len(self._queue) >= self._max_pending
            if not full:
                self._queue.append((prepared, future, on_delivery))
                wake = not self._draining
                self._draining = True
            else:
                self._room.clear()
        if not full:
            if wake:
                self._loop.loop.call_soon_threadsafe(self._start_drain)
            return future
        if not self._room.wait(self.producer.max_block_s):
            error = RequestTimedOutError(f"{self._max_pending} records wait to be queued; "
                                         f"no room within max_block_s="
                                         f"{self.producer.max_block_s:g}")
            self.producer.report_send_failure(topic, partition, prepared.record.timestamp, error)
            raise error
        with self._lock:
            self._queue.append((prepared, future, on_delivery))
            wake = not self._draining
            self._draining = True
        if wake:
            self._loop.loop.call_soon_threadsafe(self._start_drain)
        return future

    def _start_drain(self) -> None:
        self._drain_task = self._loop.loop.create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                items = list(self._queue)
                self._queue.clear()
                self._room.set()
            for prepared, future, on_delivery in items:
                try:
                    await self.producer.send_prepared(prepared, on_delivery, future)
                except Exception as exc:
                    future.set_exception(exc)
                    if on_delivery is not None:  # send() returned already: report it here
                        _call_back(on_delivery, prepared, exc)

    def send_many(self, topic: str, records: Sequence[BulkRecord]
                  ) -> list[concurrent.futures.Future[None]]:
        """Queue ``records`` (see :meth:`Producer.send_many`) after every earlier ``send``;
        returns one future per batch used, resolved on acknowledgement."""
        async def go() -> list[asyncio.Future[None]]:
            await self._flush_queue()
            return await self.producer.send_many(topic, records)

        return _chained(self._run(go()))

    def send_encoded(self, topic: str, batches: Sequence[tuple[int, EncodedRecords]]
                     ) -> list[concurrent.futures.Future[None]]:
        """Queue pre-encoded batches (see :meth:`Producer.send_encoded`) after every earlier
        ``send``; returns one future per batch, resolved on acknowledgement."""
        async def go() -> list[asyncio.Future[None]]:
            await self._flush_queue()
            return await self.producer.send_encoded(topic, batches)

        return _chained(self._run(go()))

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (see :meth:`Producer.partition_count`)."""
        return self._run(self.producer.partition_count(topic))

    def send_and_wait(self, topic: str, value: Any, key: Any = None,
                      headers: Iterable[Header] | None = None, partition: int | None = None,
                      timestamp: int | None = None) -> RecordMetadata:
        return self._run(self.producer.send_and_wait(topic, value, key, headers, partition,
                                                     timestamp))

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent so far is acknowledged or failed."""
        self._run(self._flush(), timeout_s)

    # -- transactions (see Producer; timeouts are the producer's, so a call that timed out
    # can be made again to keep waiting) --------------------------------------------------
    def init_transactions(self, timeout_s: float | None = None) -> None:
        self._run(self.producer.init_transactions(timeout_s))

    def begin_transaction(self) -> None:
        async def go() -> None:
            self.producer.begin_transaction()

        self._run(go())

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str, timeout_s: float | None = None,
    ) -> None:
        async def go() -> None:
            await self._flush_queue()
            await self.producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)

        self._run(go())

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        async def go() -> None:
            await self._flush_queue()  # records sent before this call belong to it
            await self.producer.commit_transaction(timeout_s)

        self._run(go())

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        async def go() -> None:
            await self._flush_queue()
            await self.producer.abort_transaction(timeout_s)

        self._run(go())

    def close(self) -> None:
        """Deliver what was sent (records still queued here included), then close."""
        try:
            self._run(self._flush())
        finally:
            super().close()

    async def _flush_queue(self) -> None:
        # Records queued before this call are handed over first (the drain task was scheduled
        # before this coroutine, both through call_soon_threadsafe).
        while self._drain_task is not None and not self._drain_task.done():
            await asyncio.shield(self._drain_task)

    async def _flush(self) -> None:
        await self._flush_queue()
        await self.producer.flush()


def _call_back(on_delivery: DeliveryCallback, prepared: PreparedRecord,
               error: BaseException) -> None:
    partition = -1 if prepared.partition is None else prepared.partition
    try:
        on_delivery(RecordMetadata(partition, -1, prepared.topic, prepared.record.timestamp),
                    error)
    except Exception:
        _log.exception("on_delivery callback %r failed (ignored)", on_delivery)


def _chained(outcomes: list[asyncio.Future[None]]) -> list[concurrent.futures.Future[None]]:
    """A thread-safe future mirroring each of ``outcomes``."""
    out: list[concurrent.futures.Future[None]] = []
    for outcome in outcomes:
        target: concurrent.futures.Future[None] = concurrent.futures.Future()
        outcome.add_done_callback(functools.partial(_chain, target))
        out.append(target)
    return out


def _chain(target: concurrent.futures.Future[T], source: asyncio.Future[T]) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


class SyncFetcher(_Facade):
    """Blocking :class:`~strom.client.fetcher.Fetcher`; iterate it or call :meth:`poll`."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        super().__init__("strom-fetcher")
        self._client = self.fetcher = Fetcher(bootstrap, **options)
        self._start(self.fetcher.start())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)

        async def go() -> None:
            self.fetcher.assign(tps)

        self._run(go())

    def assign_topic(self, topic: str,
                     partitions: Iterable[int] | None = None) -> list[TopicPartition]:
        return self._run(self.fetcher.assign_topic(topic, partitions))

    def assignment(self) -> list[TopicPartition]:
        return self.fetcher.assignment()

    def position(self, tp: TopicPartition) -> int | None:
        return self.fetcher.position(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        async def go() -> None:
            self.fetcher.seek(tp, offset)

        self._run(go())

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._run(self.fetcher.seek_to_beginning(partitions))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._run(self.fetcher.seek_to_end(partitions))

    def seek_to_timestamp(self, timestamp_ms: int,
                          partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[TopicPartition, int]:
        return self._run(self.fetcher.seek_to_timestamp(timestamp_ms, partitions))

    def end_offsets(self, partitions: Iterable[TopicPartition] | None = None
                    ) -> dict[TopicPartition, int]:
        return self._run(self.fetcher.end_offsets(partitions))

    def poll(self, timeout_s: float | None = None) -> list[ConsumerRecord]:
        """One fetch round (waits up to the fetcher's ``max_wait_ms`` for data)."""
        return self._run(self.fetcher.fetch(), timeout_s)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll()


class _ThreadedListener:
    """A rebalance listener whose plain methods run in a worker thread, so they may call the
    :class:`SyncConsumer` (whose loop thread is meanwhile waiting for them)."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener
        for hook in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"):
            fn = getattr(listener, hook, None)
            if fn is not None:
                setattr(self, hook, self._threaded(fn))

    @staticmethod
    def _threaded(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any) -> Any:
            result = await asyncio.to_thread(fn, *args)
            if isinstance(result, Awaitable):
                return await result
            return result

        return call


class SyncConsumer(_Facade):
    """Blocking :class:`~strom.client.consumer.consumer.Consumer`: the same methods (the
    asynchronous ones block). Rebalance listeners and commit callbacks run in a worker
    thread while ``poll`` waits for them, so they may call this consumer (e.g. commit)."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        super().__init__("strom-consumer")
        self._client = self.consumer = Consumer(bootstrap, **options)
        self._start(self.consumer.start())

    def _on_loop(self, fn: Callable[[], T]) -> T:
        async def go() -> T:
            return fn()

        return self._run(go())

    def subscribe(self, topics: Any = None, *, pattern: Any = None, listener: Any = None
                  ) -> None:
        wrapped = None if listener is None else _ThreadedListener(listener)
        self._on_loop(lambda: self.consumer.subscribe(topics, pattern=pattern,
                                                      listener=wrapped))

    def unsubscribe(self) -> None:
        self._run(self.consumer.unsubscribe())

    def subscription(self) -> set[str]:
        return self._on_loop(self.consumer.subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)
        self._on_loop(lambda: self.consumer.assign(tps))

    def assignment(self) -> set[TopicPartition]:
        return self._on_loop(self.consumer.assignment)

    def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        return self._run(self.consumer.poll(timeout_s))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll()

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
               ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._run(self.consumer.commit(offsets))

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                     = None, callback: CommitCallback | None = None) -> None:
        threaded = None if callback is None else _ThreadedListener._threaded(callback)
        self._on_loop(lambda: self.consumer.commit_async(offsets, threaded))

    def committed(self, partitions: Iterable[TopicPartition]
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._run(self.consumer.committed(list(partitions)))

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._on_loop(self.consumer.group_metadata)

    def position(self, tp: TopicPartition) -> int:
        return self._run(self.consumer.position(tp))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._on_loop(lambda: self.consumer.seek(tp, offset))

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._run(self.consumer.seek_to_beginning(partitions))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._run(self.consumer.seek_to_end(partitions))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._run(self.consumer.offsets_for_times(timestamps))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        return self._run(self.consumer.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self.consumer.end_offsets(list(partitions)))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)
        self._on_loop(lambda: self.consumer.pause(tps))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)
        self._on_loop(lambda: self.consumer.resume(tps))

    def paused(self) -> set[TopicPartition]:
        return self._on_loop(self.consumer.paused)
