"""``Producer``: batches records per partition and sends them to partition leaders.

Flow: :meth:`Producer.send` picks a partition (:mod:`strom.client.partitioner`), appends the
record to that partition's open batch and returns a future of
:class:`~strom.client.records.RecordMetadata`. A batch closes when it reaches ``batch_size``
bytes or ``linger_ms`` after its first record (or on :meth:`Producer.flush`). The sender task
(owned by the producer) builds closed batches into v2 record batches, groups them by leader
and sends one Produce request per leader with at most one batch per partition, keeping up to
``max_in_flight`` batches per partition in flight (at most five when idempotent).

Retriable errors (leader moves, timeouts, lost connections) refresh metadata and resend the
same batch bytes after a backoff, until ``delivery_timeout_s``; retried batches go back in
their original order. With ``idempotent=True`` the producer gets a producer id from
InitProducerId and numbers each partition's batches (:mod:`strom.client.sequencing`), so the
broker drops duplicates from retries and keeps order; idempotence needs ``acks=-1``.

With ``transactional_id`` the producer is transactional (and idempotent): records are sent
between ``begin_transaction()`` and ``commit_transaction()`` / ``abort_transaction()``; the
state machine and the coordinator requests live in :mod:`strom.client.transactions`, which
the sender consults for which partitions may be sent and which unsent batches to drop.

Pre-encoded batches (:meth:`Producer.send_encoded`, for bulk encoders such as the Spark
writer) skip the per-record path: each is queued as a closed batch of its own and sealed
(codec, producer id / epoch / sequence, CRC) by the sender like any other batch.

Before a record is queued, ``send`` runs the interceptors' ``on_send``
(:mod:`strom.client.interceptors`), serializes key and value (:mod:`strom.client.serializers`;
bytes pass through untouched, the fast path) and picks the partition
(:func:`strom.client.partitioner.partitioner_for`). Errors found there — serialization, a
record larger than ``max_request_size`` or ``buffer_memory``, an unknown partition, no room or
no metadata within ``max_block_s`` — raise from ``send`` at once and are never retried.

Backpressure: at most ``buffer_memory`` bytes of records wait unsent; ``send`` waits for room
up to ``max_block_s`` (Kafka's ``max.block.ms``, which also bounds the wait for the topic's
metadata), then raises RequestTimedOutError.

Delivery timeout: a record is acknowledged or failed within ``delivery_timeout_s`` of its
batch's creation (Kafka's ``delivery.timeout.ms``; the batch opens at the first ``send`` into
it): batches still waiting when it is up fail with RequestTimedOutError, and retriable errors
are retried only while it lasts. As in Kafka, it must be ≥ ``linger_ms + request_timeout_s``.

A batch the broker refuses as MESSAGE_TOO_LARGE (the topic's ``max.message.bytes`` is below
``batch_size``) is split in two and each half resent, as Kafka's producer does, down to
single records, so only a record too large on its own fails (non-idempotent producers; an
idempotent producer fails the batch, since its sequence numbers are already spent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from strom.client.admin_types import OffsetAndMetadata
from strom.client.batching import build_batch, estimate_record_size
from strom.client.cluster import DEFAULT_BOOTSTRAP, Cluster
from strom.client.conn import DEFAULT_REQUEST_TIMEOUT_S, Connection
from strom.client.interceptors import InterceptorChain, ProducerInterceptor, ProducerRecord
from strom.client.metadata import BrokerNode
from strom.client.partitioner import PartitionerSpec, partitioner_for
from strom.client.records import ClientConfigError, Header, RecordMetadata, codec_id
from strom.client.security import ClientSecurity
from strom.client.sequencing import MAX_IN_FLIGHT, Sequencer
from strom.client.serializers import SerializerSpec, resolve_serializer
from strom.client.transactions import ConsumerGroupMetadata, TransactionManager
from strom.client.txn_errors import TransactionStateError
from strom.common.errors import (
    DuplicateSequenceNumberError,
    KafkaError,
    MessageTooLargeError,
    NetworkError,
    RequestTimedOutError,
    StromError,
    UnknownTopicOrPartitionError,
    error_for,
)
from strom.common.types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, TopicPartition
from strom.protocol.records.builder import EncodedRecords
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.producer")

#: ``on_delivery=`` of :meth:`Producer.send`: called once with ``(metadata, None)`` when the
#: record is acknowledged or ``(metadata with offset -1, exception)`` when it failed.
DeliveryCallback = Callable[[RecordMetadata, "BaseException | None"], None]

#: A record's future: asyncio's, or (from SyncProducer, resolved on the loop thread) a
#: running ``concurrent.futures.Future`` — which cannot be cancelled any more.
RecordFuture = asyncio.Future[RecordMetadata] | concurrent.futures.Future[RecordMetadata]

RETRY_BACKOFF_S = 0.1


class ProducerClosedError(StromError):
    """``send`` was called on a closed producer."""


#: A record for :meth:`Producer.send_many`: (partition, key, value, headers, timestamp).
BulkRecord = tuple[int | None, bytes | None, bytes | None, "Iterable[Header] | None", int | None]


@dataclass(slots=True)
class _PendingRecord:
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(slots=True)
class PreparedRecord:
    """A record :meth:`Producer.prepare` made ready to queue: serialized, size checked;
    ``partition`` is None until the partitioner picks one."""

    topic: str
    partition: int | None
    record: _PendingRecord
    size: int


@dataclass(slots=True, eq=False)
class _Batch:
    """Records for one partition, sent together. ``payload`` is built once, on first send.

    The records are either ``records`` (queued one by one) or ``encoded`` (queued as a
    whole by :meth:`Producer.send_encoded`, then ``records`` stays empty).
    """

    tp: TopicPartition
    created: float
    order: tuple[int, ...]  # creation order; parts of a split batch extend it: (n, 0), (n, 1)
    records: list[_PendingRecord] = field(default_factory=list)
    encoded: EncodedRecords | None = None
    # One entry per record, aligned with ``records``: None for records queued by send_many.
    futures: list[RecordFuture | None] = field(default_factory=list)
    outcome: asyncio.Future[None] | None = None  # for send_many: acknowledged, or the error
    last_error: KafkaError | None = None  # what made the last attempt fail, if any
    size: int = 0
    payload: bytes | None = None
    base_sequence: int = NO_SEQUENCE
    generation: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    deadline: float = 0.0

    @property
    def record_count(self) -> int:
        return len(self.records) if self.encoded is None else self.encoded.count


def _resolve(done: asyncio.Future[None], _: object) -> None:
    if not done.done():
        done.set_result(None)


def _parse_acks(acks: int | str) -> int:
    text = str(acks).strip().lower()
    if text == "all":
        return -1
    try:
        value = int(text)
    except ValueError:
        value = 99
    if value not in (-1, 0, 1):
        raise ClientConfigError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
    return value


class Producer:
    """An asyncio producer.

    Lifecycle: ``await start()`` (or ``async with``), any number of ``send`` calls from
    coroutines of the same loop, ``await flush()`` as needed, ``await close()`` (flushes first).
    """

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        acks: int | str = -1,
        compression: str | int | None = "none",
        linger_ms: float = 5.0,
        batch_size: int = 16384,
        max_request_size: int = 1048576,
        buffer_memory: int = 32 * 1024 * 1024,
        idempotent: bool = False,
        max_in_flight: int = 5,
        delivery_timeout_s: float = 120.0,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        partitioner: PartitionerSpec = None,
        client_id: str = "strom-producer",
        allow_auto_create_topics: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        security: ClientSecurity | None = None,
        key_serializer: SerializerSpec = None,
        value_serializer: SerializerSpec = None,
        interceptors: Sequence[ProducerInterceptor] = (),
        max_block_s: float = 60.0,
    ) -> None:
        self.acks = _parse_acks(acks)
        self.codec = codec_id(compression)
        if transactional_id is not None:
            if self.acks != -1:
                raise ClientConfigError("a transactional producer needs acks=all (-1)")
            idempotent = True
        if idempotent and self.acks != -1:
            raise ClientConfigError("an idempotent producer needs acks=all (-1)")
        if batch_size < 1 or max_request_size < 1 or max_in_flight < 1:
            raise ClientConfigError("batch_size, max_request_size and max_in_flight must be > 0")
        self.linger_s = max(linger_ms, 0.0) / 1000.0
        if delivery_timeout_s < self.linger_s + request_timeout_s:
            raise ClientConfigError(
                f"delivery_timeout_s={delivery_timeout_s:g} must be at least linger_ms + "
                f"request_timeout_s = {self.linger_s + request_timeout_s:g}s (Kafka's rule for "
                "delivery.timeout.ms)")
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.idempotent = idempotent
        self.max_in_flight = min(max_in_flight, MAX_IN_FLIGHT) if idempotent else max_in_flight
        self.delivery_timeout_s = delivery_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_block_s = max(max_block_s, 0.0)
        self.partitioner = partitioner_for(partitioner, batch_size)
        # Default (bytes) serializers and no interceptors: bytes go straight to the batch.
        self._raw = key_serializer is None and value_serializer is None and not interceptors
        self._serialize_key = resolve_serializer(key_serializer)
        self._serialize_value = resolve_serializer(value_serializer)
        self.interceptors = InterceptorChain(interceptors)
        self._intercepting = bool(self.interceptors)
        self.cluster = Cluster(bootstrap, client_id=client_id,
                               request_timeout_s=request_timeout_s,
                               allow_auto_create_topics=allow_auto_create_topics,
                               security=security)
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self._open: dict[TopicPartition, _Batch] = {}
        self._ready: dict[TopicPartition, deque[_Batch]] = defaultdict(deque)
        self._in_flight: dict[TopicPartition, int] = defaultdict(int)
        #: Partitions whose last answer carried a usable current-leader hint (KIP-951): their
        #: retry goes to the hinted leader without a metadata refresh.
        self._hinted: set[TopicPartition] = set()
        self._sequencer = Sequencer()
        self._order = itertools.count()
        self._incomplete: dict[_Batch, asyncio.Future[None]] = {}
        self._buffered = 0
        self._room = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._flushing = 0
        self._loop: asyncio.AbstractEventLoop  # set by start()
        self._waiting_for_room = 0  # sends waiting for buffer_memory: lingering is pointless
        self._closed = False
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refreshing: asyncio.Task[Any] | None = None
        self._connecting: dict[int, asyncio.Task[None]] = {}
        self.transactional_id = transactional_id
        self.transaction = None if transactional_id is None else TransactionManager(
            self, self.cluster, transactional_id, transaction_timeout_ms=transaction_timeout_ms,
            request_timeout_s=request_timeout_s, delivery_timeout_s=delivery_timeout_s)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> Producer:
        await self.cluster.start()
        if self.idempotent and self.transaction is None:
            await self._init_producer_id()
        self._loop = asyncio.get_running_loop()
        self._sender = asyncio.create_task(self._send_loop(), name="strom-producer-sender")
        return self

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush (up to ``timeout_s``), stop the sender and close connections."""
        if self._closed:
            return
        try:
            if self.transaction is not None and self._sender is not None:
                await self.transaction.close(timeout_s)  # aborts an open transaction
            if self._sender is not None:
                async with asyncio.timeout(timeout_s):
                    await self.flush()
        finally:
            self._closed = True
            for batch in list(self._incomplete):
                self._fail(batch, ProducerClosedError("producer closed before delivery"))
            for task in [self._sender, *self._tasks]:
                if task is not None:
                    task.cancel()
            for task in [self._sender, *self._tasks]:
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self.interceptors.close()
            await self.cluster.close()

    async def _init_producer_id(self) -> None:
        conn = await self.cluster.any_connection()
        response = await conn.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": None, "transaction_timeout_ms": 60000,
        })
        if response.error_code:
            raise error_for(response.error_code, "InitProducerId failed")
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch

    # -- sending -----------------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; the returned future resolves to its :class:`RecordMetadata`
        (partition, offset, topic, timestamp) once acknowledged, or raises what failed it.

        The three ways to send: ignore the future (fire-and-forget), ``await`` it (or
        :meth:`send_and_wait`, synchronous), or pass ``on_delivery`` (asynchronous with a
        callback, called on the producer's loop as ``on_delivery(metadata, exception)``).
        ``key`` / ``value`` go through the serializers; ``headers`` pass through as given.

        Waits only when ``buffer_memory`` is full or the topic's metadata is not known yet,
        both for at most ``max_block_s``. What fails here raises (the callback is not called
        then; the interceptors' ``on_acknowledgement`` is).
        """
        self._ensure_running()
        if (self._raw and not headers and (value is None or type(value) is bytes)
                and (key is None or type(key) is bytes)):
            # The hot path: nothing to intercept or serialize.
            ts = int(time.time() * 1000) if timestamp is None else timestamp
            size = self._record_size(key, value, ())
            future = await self._enqueue(topic, partition,
                                         _PendingRecord(ts, key, value, ()), size, on_delivery)
        else:
            prepared = self.prepare(topic, value, key, headers, partition, timestamp)
            future = await self._enqueue(prepared.topic, prepared.partition, prepared.record,
                                         prepared.size, on_delivery)
        return cast(asyncio.Future[RecordMetadata], future)  # no given future: asyncio's

    def prepare(self, topic: str, value: Any, key: Any = None,
                headers: Iterable[Header] | None = None, partition: int | None = None,
                timestamp: int | None = None) -> PreparedRecord:
        """The synchronous first half of :meth:`send`: interceptors' ``on_send``, the key and
        value serialized, the size checked (the timestamp defaults to now). Raises what
        fails (after telling the interceptors); touches no producer state, so it may run on
        any thread (:class:`~strom.client.sync.SyncProducer` runs it in the caller's)."""
        header_tuple = tuple(headers) if headers else ()
        if self._intercepting:
            record = self.interceptors.on_send(
                ProducerRecord(topic, value, key, header_tuple, partition, timestamp))
            topic, value, key = record.topic, record.value, record.key
            header_tuple, partition, timestamp = record.headers, record.partition, record.timestamp
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        try:
            if not (self._raw and (value is None or type(value) is bytes)
                    and (key is None or type(key) is bytes)):
                key = self._serialize_key(topic, key)
                value = self._serialize_value(topic, value)
            size = self._record_size(key, value, header_tuple)
        except Exception as exc:
            self.report_send_failure(topic, partition, ts, exc)
            raise
        return PreparedRecord(topic, partition, _PendingRecord(ts, key, value, header_tuple),
                              size)

    async def send_prepared(self, prepared: PreparedRecord,
                            on_delivery: DeliveryCallback | None = None,
                            future: concurrent.futures.Future[RecordMetadata] | None = None
                            ) -> RecordFuture:
        """The second half of :meth:`send`: pick the partition and queue the record. With
        ``future`` (a running concurrent future), the outcome goes there instead of to a
        new asyncio future, saving a hop per record for a caller on another thread."""
        self._ensure_running()
        return await self._enqueue(prepared.topic, prepared.partition, prepared.record,
                                   prepared.size, on_delivery, future)

    async def _enqueue(self, topic: str, partition: int | None, record: _PendingRecord,
                       size: int, on_delivery: DeliveryCallback | None,
                       given: concurrent.futures.Future[RecordMetadata] | None = None
                       ) -> RecordFuture:
        """Pick the partition (waiting for metadata) and queue the record (waiting for
        room), both within ``max_block_s``; returns the record's future (``given``, if
        any)."""
        try:
            deadline = time.monotonic() + self.max_block_s
            count = self.cluster.metadata.partition_count(topic)
            if count is None:
                count = await self.cluster.topic_partitions(topic, timeout_s=self.max_block_s)
            partition = self._partition_for(topic, count, partition, record.key, size)
            future: RecordFuture = self._loop.create_future() if given is None else given
            if self._intercepting or on_delivery is not None:
                future.add_done_callback(functools.partial(
                    self._delivered, RecordMetadata(partition, -1, topic, record.timestamp),
                    on_delivery))
            await self._queue(TopicPartition(topic, partition), size, record, future, deadline)
        except Exception as exc:
            self.report_send_failure(topic, partition, record.timestamp, exc)
            raise
        return future

    def report_send_failure(self, topic: str, partition: int | None, timestamp: int,
                     error: BaseException) -> None:
        """Tell the interceptors that a record failed before it was queued."""
        if self._intercepting:
            self.interceptors.on_acknowledgement(
                RecordMetadata(-1 if partition is None else partition, -1, topic, timestamp),
                error)

    def _delivered(self, failed: RecordMetadata, on_delivery: DeliveryCallback | None,
                   future: RecordFuture) -> None:
        """A record's outcome to the interceptors, then to its ``on_delivery`` callback
        (``failed`` is the metadata they get when it failed)."""
        if future.cancelled():
            error: BaseException | None = ProducerClosedError("the send was cancelled")
        else:
            error = future.exception()
        metadata = failed if error is not None else future.result()
        if self.interceptors:
            self.interceptors.on_acknowledgement(metadata, error)
        if on_delivery is not None:
            try:
                on_delivery(metadata, error)
            except Exception:
                log.exception("on_delivery callback %r failed (ignored)", on_delivery)

    async def send_many(self, topic: str,
                        records: Iterable[BulkRecord]) -> list[asyncio.Future[None]]:
        """Queue many records of ``topic`` in order, without a future per record.

        Each record is ``(partition or None, key, value, headers or None, timestamp or
        None)``; a None partition is chosen by the partitioner as in :meth:`send`. Returns
        one future per batch the records went into: it resolves when that batch is
        acknowledged and raises what failed it. Per-partition order is the call order, and
        records of ``send`` and ``send_many`` calls interleave correctly. A bulk path for
        bytes: keys and values are not serialized and interceptors do not see the records.
        """
        self._ensure_running()
        count = await self.cluster.topic_partitions(topic)
        outcomes: dict[int, asyncio.Future[None]] = {}
        loop = asyncio.get_running_loop()
        wall_ms = int(time.time() * 1000)
        for partition, key, value, headers, timestamp in records:
            header_tuple = tuple(headers) if headers else ()
            size = self._record_size(key, value, header_tuple)
            partition = self._partition_for(topic, count, partition, key, size)
            batch = await self._queue(
                TopicPartition(topic, partition), size,
                _PendingRecord(wall_ms if timestamp is None else timestamp, key, value,
                               header_tuple), None, time.monotonic() + self.max_block_s)
            if batch.outcome is None:
                batch.outcome = loop.create_future()
                outcomes[id(batch)] = batch.outcome
        return list(outcomes.values())

    async def send_encoded(self, topic: str, batches: Iterable[tuple[int, EncodedRecords]]
                           ) -> list[asyncio.Future[None]]:
        """Queue pre-encoded batches of ``topic``: ``(partition, records)`` pairs, in order.

        Each goes out as one record batch of its own, sealed when sent with the producer's
        codec (the whole records section compressed as one stream), producer id, epoch and
        sequence numbers. The partition's open batch is closed first, so records of earlier
        ``send`` / ``send_many`` calls stay ahead of it. Limits, checked before anything is
        queued: a batch larger than ``max_request_size`` (header included, uncompressed)
        raises MessageTooLargeError, as a record that large would; one of several records
        must fit ``batch_size`` (encoders split by it), else ValueError. A partition out of
        range raises UnknownTopicOrPartitionError. Returns one future per batch: it resolves
        when that batch is acknowledged and raises what failed it.
        """
        self._ensure_running()
        count = await self.cluster.topic_partitions(topic)
        checked = [(TopicPartition(topic, self._partition_for(topic, count, partition, None, 0)),
                    self._checked_encoded(encoded)) for partition, encoded in batches]
        loop = asyncio.get_running_loop()
        outcomes: list[asyncio.Future[None]] = []
        for tp, encoded in checked:
            size = encoded.size_in_bytes
            if self._buffered + size > self.buffer_memory and self._buffered > 0:
                await self._wait_for_room(size, time.monotonic() + self.max_block_s)
            current = self._open.get(tp)
            if current is not None:
                self._close_batch(current)
            batch = self._new_batch(tp)
            batch.encoded = encoded
            batch.outcome = loop.create_future()
            batch.size = size
            self._buffered += size
            self._ready[tp].append(batch)
            outcomes.append(batch.outcome)
        self._wakeup.set()
        await asyncio.sleep(0)  # let the sender start on them, as after a full batch in send()
        return outcomes

    def _checked_encoded(self, encoded: EncodedRecords) -> EncodedRecords:
        size = encoded.size_in_bytes
        if encoded.count < 1:
            raise ValueError("an encoded batch needs at least one record")
        if size > self.max_request_size:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds max_request_size={self.max_request_size}")
        if encoded.count > 1 and size > self.batch_size:
            raise ValueError(f"encoded batch of {encoded.count} records and {size} bytes "
                             f"exceeds batch_size={self.batch_size}")
        return encoded

    async def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (from metadata; fetched if not known yet)."""
        return await self.cluster.topic_partitions(topic)

    def _ensure_running(self) -> None:
        if self._closed or self._sender is None:
            raise ProducerClosedError("the producer is not running (call start() first)")
        if self._sender.done():
            self._sender.result()  # re-raise what stopped the sender
        if self.transaction is not None:
            self.transaction.check_send()

    def _record_size(self, key: bytes | None, value: bytes | None,
                     headers: tuple[Header, ...]) -> int:
        """The record's estimated size, checked against ``max_request_size``."""
        size = estimate_record_size(key, value, headers)
        if size + 128 > self.max_request_size:
            raise MessageTooLargeError(
                f"record of about {size} bytes exceeds max_request_size={self.max_request_size}"
            )
        if size > self.buffer_memory:
            raise MessageTooLargeError(
                f"record of about {size} bytes exceeds buffer_memory={self.buffer_memory}")
        return size

    def _partition_for(self, topic: str, count: int, partition: int | None,
                       key: bytes | None, size: int) -> int:
        """``partition`` checked against the topic's ``count`` partitions, or the
        partitioner's choice when None."""
        if partition is None:
            return self.partitioner.partition(topic, key, count, size)
        if not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist (it has {count})"
            )
        return partition

    async def _queue(self, tp: TopicPartition, size: int, record: _PendingRecord,
                     future: RecordFuture | None, deadline: float) -> _Batch:
        """Append ``record`` to ``tp``'s open batch (waiting for ``buffer_memory`` room until
        the monotonic ``deadline``); returns that batch."""
        batch = self._open.get(tp)
        if (batch is not None and batch.size + size < self.batch_size
                and self._buffered + size <= self.buffer_memory):
            # The common case, inlined: room in the open batch (which stays open) and in
            # the buffer. Same effect as the general path below.
            batch.records.append(record)
            batch.futures.append(future)
            batch.size += size
            self._buffered += size
            return batch
        if self._buffered + size > self.buffer_memory and self._buffered > 0:
            await self._wait_for_room(size, deadline)
        batch, closed = self._batch_for(tp, size)
        batch.records.append(record)
        batch.futures.append(future)
        if self._added(batch, size) or closed:
            # A full batch is ready: let the sender run, as Kafka's sender thread would, so a
            # tight send loop does not buffer everything until flush().
            await asyncio.sleep(0)
        return batch

    async def _wait_for_room(self, size: int, deadline: float) -> None:
        """Wait until ``size`` more bytes fit ``buffer_memory`` (or nothing is buffered);
        RequestTimedOutError at the monotonic ``deadline`` (Kafka's max.block.ms)."""
        while self._buffered + size > self.buffer_memory and self._buffered > 0:
            self._room.clear()
            self._waiting_for_room += 1
            self._wakeup.set()  # the sender sends open batches now (see _close_lingered)
            left = deadline - time.monotonic()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    await self._room.wait()
            except TimeoutError:
                raise RequestTimedOutError(
                    f"no room for a record of {size} bytes in buffer_memory="
                    f"{self.buffer_memory} within max_block_s={self.max_block_s:g}") from None
            finally:
                self._waiting_for_room -= 1
            if self._closed:
                raise ProducerClosedError("producer closed while waiting for buffer space")

    def _batch_for(self, tp: TopicPartition, size: int) -> tuple[_Batch, bool]:
        """The open batch of ``tp`` with room for ``size`` more bytes (a full one is closed
        and a new one opened); the flag tells whether a batch was closed."""
        batch = self._open.get(tp)
        closed = False
        if batch is not None and batch.records and batch.size + size > self.batch_size:
            self._close_batch(batch)
            batch = None
            closed = True
        if batch is None:
            batch = self._open[tp] = self._new_batch(tp)
            self._wakeup.set()  # the sender starts the linger timer
        return batch, closed

    def _new_batch(self, tp: TopicPartition) -> _Batch:
        """A new, empty batch of ``tp``, counted as incomplete until acknowledged or failed
        (and, in a transaction, its partition added to the transaction)."""
        now = time.monotonic()
        batch = _Batch(tp, now, (next(self._order),), deadline=now + self.delivery_timeout_s)
        if self.transaction is not None:
            self.transaction.add_partition(tp)
        self._incomplete[batch] = asyncio.get_running_loop().create_future()
        return batch

    def _added(self, batch: _Batch, size: int) -> bool:
        """Account a record just appended to ``batch``; close the batch when it is full."""
        batch.size += size
        self._buffered += size
        if batch.size >= self.batch_size:
            self._close_batch(batch)
            return True
        return False

    async def send_and_wait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Iterable[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """``send``, close the open batches at once, and wait for the acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp)
        for batch in list(self._open.values()):
            self._close_batch(batch)
        return await future

    async def flush(self) -> None:
        """Send everything queued so far and wait until each record is acknowledged or failed."""
        self._flushing += 1
        try:
            for batch in list(self._open.values()):
                self._close_batch(batch)
            waiting = list(self._incomplete.values())
            if waiting:
                await asyncio.gather(*(asyncio.shield(f) for f in waiting))
        finally:
            self._flushing -= 1

    def _close_batch(self, batch: _Batch) -> None:
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
            self._ready[batch.tp].append(batch)
            self._wakeup.set()

    # -- the sender task ---------------------------------------------------------------------
    async def _send_loop(self) -> None:
        while True:
            self._wakeup.clear()
            if self.transaction is not None:
                self._transaction_round(self.transaction)
            next_wake = self._close_lingered(time.monotonic())
            while True:
                started, retry_at = self._dispatch_ready(time.monotonic())
                if retry_at is not None:
                    next_wake = retry_at if next_wake is None else min(next_wake, retry_at)
                if not started:
                    break
            timeout = None if next_wake is None else max(next_wake - time.monotonic(), 0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    def _close_lingered(self, now: float) -> float | None:
        """Close open batches whose linger time is up (all of them while flushing or while a
        send waits for buffer room, as Kafka's accumulator does when its memory is
        exhausted); return when the next one is due."""
        next_due: float | None = None
        send_all = self._flushing or self._waiting_for_room
        for batch in list(self._open.values()):
            due = batch.created + self.linger_s
            if send_all or due <= now:
                self._close_batch(batch)
            else:
                next_due = due if next_due is None else min(next_due, due)
        return next_due

    def _dispatch_ready(self, now: float) -> tuple[bool, float | None]:
        """Start requests for sendable batches (at most one per partition per request).

        Only leaders with an open connection get requests (as Kafka's sender only sends to
        ready nodes); the others are connected first. A request task gets its connection
        here and writes before its first await, so a partition's requests reach the broker in
        the order they were dispatched — which idempotence relies on: a broker takes any first
        sequence from a producer it has no state for, so a batch overtaking earlier ones
        would leave those out of order for good.

        Returns whether any request started, and the earliest time a backed-off batch may go.
        """
        by_leader: dict[int, list[_Batch]] = defaultdict(list)
        conns: dict[int, Connection] = {}
        next_retry: float | None = None
        for tp, queue in self._ready.items():
            while queue and queue[0].deadline <= now:
                self._expire(queue.popleft(), now)
            if not queue or self._in_flight[tp] >= self.max_in_flight:
                continue
            if self.transaction is not None and not self.transaction.may_send(tp):
                continue  # waiting for AddPartitionsToTxn
            batch = queue[0]
            if batch.retry_at > now:
                if next_retry is None or batch.retry_at < next_retry:
                    next_retry = batch.retry_at
                continue
            leader = self.cluster.metadata.leader(tp)
            if leader is None:
                self._refresh_soon(tp)
                if next_retry is None or batch.deadline < next_retry:
                    next_retry = batch.deadline
                continue
            conn = conns.get(leader)
            if conn is None:
                conn = self.cluster.ready_connection(leader)
            if conn is None:
                self._connect_soon(leader)
                continue
            conns[leader] = conn
            queue.popleft()
            self._in_flight[tp] += 1
            by_leader[leader].append(batch)
        for leader, batches in by_leader.items():
            for request in self._split(batches):
                task = asyncio.create_task(self._produce(leader, conns[leader], request))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return bool(by_leader), next_retry

    def _expire(self, batch: _Batch, now: float) -> None:
        """Fail a batch not acknowledged within the delivery timeout (counted from its
        creation, as Kafka's), with what failed its last attempt if anything did."""
        if batch.last_error is not None:
            error: KafkaError = batch.last_error
        elif self.cluster.metadata.leader(batch.tp) is None:
            error = RequestTimedOutError(f"no leader for {batch.tp} within the delivery "
                                         f"timeout of {self.delivery_timeout_s:g}s")
        else:
            error = RequestTimedOutError(
                f"expiring {batch.record_count} record(s) for {batch.tp}: "
                f"{(now - batch.created) * 1000:.0f} ms has passed since batch creation "
                f"(delivery_timeout_s={self.delivery_timeout_s:g})")
        self._fail_for_good(batch, error)

    def _split(self, batches: list[_Batch]) -> list[list[_Batch]]:
        """Group batches into requests no larger than ``max_request_size``."""
        requests: list[list[_Batch]] = [[]]
        size = 0
        for batch in batches:
            payload = self._payload(batch)
            if requests[-1] and size + len(payload) > self.max_request_size:
                requests.append([])
                size = 0
            requests[-1].append(batch)
            size += len(payload)
        return requests

    def _payload(self, batch: _Batch) -> bytes:
        """The batch's bytes, built on first send (and rebuilt when its sequence numbers
        belong to a generation that ended because an earlier batch failed)."""
        if batch.payload is not None and (
            not self.idempotent or self._sequencer.is_current(batch.tp, batch.generation)
        ):
            return batch.payload
        if self.idempotent:
            batch.base_sequence, batch.generation = self._sequencer.assign(
                batch.tp, batch.record_count
            )
        if batch.encoded is not None:
            batch.payload = batch.encoded.seal(
                compression=self.codec, producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, base_sequence=batch.base_sequence,
                transactional=self.transaction is not None)
            return batch.payload
        batch.payload = build_batch(
            [(r.timestamp, r.key, r.value, r.headers) for r in batch.records],
            codec=self.codec,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=batch.base_sequence,
            transactional=self.transaction is not None,
        )
        return batch.payload

    # -- transactions (see strom.client.transactions) ----------------------------------------
    def _transactions(self) -> TransactionManager:
        if self.transaction is None:
            raise TransactionStateError("transactional call on a producer without "
                                        "transactional_id")
        return self.transaction

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Register ``transactional_id`` with its coordinator: get the producer id and epoch
        (fencing older producers with the same id and aborting what they left open). Call
        once, after ``start()``; on RequestTimedOutError call again to keep waiting."""
        self._ensure_started()
        await self._transactions().init(timeout_s)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent until commit / abort belong to it."""
        self._transactions().begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str, timeout_s: float | None = None,
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offsets to read) as part of the
        transaction: they become the group's committed offsets only if it commits."""
        await self._transactions().send_offsets(offsets, group_metadata, timeout_s)

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn). Raises
        AbortableTransactionError when a record failed (abort then) and
        FatalTransactionError / FencedProducerError when the producer must close."""
        await self._transactions().commit(timeout_s)

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        those sent are discarded by read_committed consumers."""
        await self._transactions().abort(timeout_s)

    def _ensure_started(self) -> None:
        if self._closed or self._sender is None:
            raise ProducerClosedError("the producer is not running (call start() first)")

    def _transaction_round(self, txn: TransactionManager) -> None:
        """Per sender round: fail unsent batches the transaction no longer wants, and add
        the partitions new to it (one AddPartitionsToTxn for all of them)."""
        error = txn.unsent_error()
        if error is not None:
            unsent = list(self._open.values())
            for queue in self._ready.values():
                unsent.extend(queue)
                queue.clear()
            for batch in unsent:
                self._open.pop(batch.tp, None)
                self._fail_for_good(batch, error)
        txn.maybe_add_partitions()

    # SenderHooks of the transaction manager
    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._sequencer = Sequencer()

    def wake(self) -> None:
        self._wakeup.set()

    def _refresh_soon(self, tp: TopicPartition) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            return

        async def refresh() -> None:
            try:
                await self.cluster.refresh([tp.topic])
            except KafkaError as exc:
                log.debug("metadata refresh for %s failed: %s", tp, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
            self._wakeup.set()

        self._refreshing = asyncio.create_task(refresh())
        self._tasks.add(self._refreshing)
        self._refreshing.add_done_callback(self._tasks.discard)

    def _connect_soon(self, leader: int) -> None:
        """Open the connection to ``leader`` in the background, then wake the sender. If that
        fails, the first waiting batch of each of its partitions counts it as a failed
        attempt (retried after a backoff, or failed once its delivery timeout is up)."""
        if leader in self._connecting:
            return

        async def connect() -> None:
            try:
                await self.cluster.connection(leader)
            except Exception as exc:
                error = exc if isinstance(exc, KafkaError) else error_for(-1, str(exc))
                log.debug("connecting to broker %d failed: %s", leader, error)
                self._connect_failed(leader, error)
            finally:
                self._connecting.pop(leader, None)
                self._wakeup.set()

        task = asyncio.create_task(connect())
        self._connecting[leader] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _connect_failed(self, leader: int, error: KafkaError) -> None:
        now = time.monotonic()
        for tp, queue in list(self._ready.items()):
            if queue and queue[0].retry_at <= now and self.cluster.metadata.leader(tp) == leader:
                self._retry_or_fail(queue.popleft(), error)

    async def _produce(self, leader: int, conn: Connection, batches: list[_Batch]) -> None:
        try:
            # No await before the request is written (see _dispatch_ready).
            results = await self._request(conn, batches)
        except KafkaError as exc:
            results = dict.fromkeys((b.tp for b in batches), (exc, -1))
        except Exception as exc:  # never leave a batch unresolved
            log.exception("unexpected error producing to broker %d", leader)
            results = dict.fromkeys((b.tp for b in batches), (error_for(-1, str(exc)), -1))
        for batch in batches:
            self._in_flight[batch.tp] -= 1
            error, base_offset = results.get(
                batch.tp, (error_for(-1, f"no response for {batch.tp}"), -1)
            )
            if error is None:
                self._complete(batch, base_offset)
            else:
                hinted = batch.tp in self._hinted
                self._hinted.discard(batch.tp)
                self._retry_or_fail(batch, error, hinted=hinted)
        self._wakeup.set()

    async def _request(
        self, conn: Connection, batches: list[_Batch]
    ) -> dict[TopicPartition, tuple[KafkaError | None, int]]:
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for batch in batches:
            by_topic[batch.tp.topic].append(
                {"index": batch.tp.partition, "records": self._payload(batch)}
            )
        fields = {
            "transactional_id": self.transactional_id,
            "acks": self.acks,
            "timeout_ms": int(self.request_timeout_s * 1000),
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()],
        }
        if self.acks == 0:
            await conn.request(ApiKey.PRODUCE, fields, expect_response=False)
            return {b.tp: (None, -1) for b in batches}
        response = await conn.request(ApiKey.PRODUCE, fields,
                                      timeout_s=self.request_timeout_s + 5.0)
        out: dict[TopicPartition, tuple[KafkaError | None, int]] = {}
        endpoints = [BrokerNode(e.node_id, e.host, e.port, e.rack)
                     for e in getattr(response, "node_endpoints", None) or ()]
        for topic in response.responses:
            for p in topic.partition_responses:
                tp = TopicPartition(topic.name, p.index)
                hint = getattr(p, "current_leader", None)  # Produce v10+ (KIP-951)
                if p.error_code and hint is not None and self.cluster.apply_leader_hint(
                        tp, hint.leader_id, hint.leader_epoch, endpoints):
                    self._hinted.add(tp)
                if p.error_code == DuplicateSequenceNumberError.code:
                    out[tp] = (None, -1)
                elif p.error_code:
                    message = getattr(p, "error_message", None) or f"producing to {tp}"
                    out[tp] = (error_for(p.error_code, message), -1)
                else:
                    out[tp] = (None, p.base_offset)
        return out

    def _complete(self, batch: _Batch, base_offset: int) -> None:
        if self.idempotent:
            self._sequencer.acknowledged(batch.tp, batch.base_sequence, batch.record_count)
        partition, topic = batch.tp.partition, batch.tp.topic
        new = tuple.__new__  # RecordMetadata without its Python-level __new__ (hot path)
        for i, (future, record) in enumerate(zip(batch.futures, batch.records, strict=False)):
            if future is not None and not future.done():
                metadata = new(RecordMetadata, (partition, -1 if base_offset < 0
                                                else base_offset + i))
                metadata.topic, metadata.timestamp = topic, record.timestamp
                future.set_result(metadata)
        if batch.outcome is not None and not batch.outcome.done():
            batch.outcome.set_result(None)
        self._finish(batch)

    def _retry_or_fail(self, batch: _Batch, error: KafkaError, *, hinted: bool = False) -> None:
        """Retry a retriable error (after refreshing the partition's metadata, unless the
        answer's leader hint already updated it) or fail the batch for good."""
        now = time.monotonic()
        if (isinstance(error, MessageTooLargeError) and len(batch.records) > 1
                and batch.outcome is None and not self.idempotent and not self._closed):
            self._split_too_large(batch)
            return
        retry = error.retriable
        if self.idempotent:
            retry = self._sequencer.should_retry(batch.tp, batch.base_sequence, error)
        if retry and not self._closed and now + RETRY_BACKOFF_S < batch.deadline:
            batch.attempts += 1
            batch.last_error = error
            batch.retry_at = now + min(RETRY_BACKOFF_S * 2 ** (batch.attempts - 1), 1.0)
            if not hinted:
                self.cluster.invalidate(batch.tp)
            log.debug("retrying batch for %s after %s", batch.tp, error)
            self._requeue(batch)
            return
        self._fail_for_good(batch, error)

    def _fail_for_good(self, batch: _Batch, error: BaseException) -> None:
        if self.transaction is not None:
            self.transaction.batch_failed(batch.tp, error, batch.base_sequence != NO_SEQUENCE)
        self._fail(batch, error)
        if self.idempotent and batch.base_sequence != NO_SEQUENCE:
            # Its sequences were sent, so later ones will never be accepted (a batch that
            # never got any, e.g. its leader could not be reached, leaves no gap).
            self._sequencer.reset(batch.tp)

    def _split_too_large(self, batch: _Batch) -> None:
        """Resend a batch refused as MESSAGE_TOO_LARGE as two halves (same deadline, same
        place in the partition's order): the topic's ``max.message.bytes`` may be below
        ``batch_size``, and only a record too large on its own should fail. Only batches of
        ``send()`` records (one future each) are split."""
        half = len(batch.records) // 2
        loop = asyncio.get_running_loop()
        parts = [_Batch(batch.tp, batch.created, (*batch.order, i), records=records,
                        futures=futures, deadline=batch.deadline, size=sum(
                            estimate_record_size(r.key, r.value, r.headers) for r in records))
                 for i, (records, futures) in enumerate((
                     (batch.records[:half], batch.futures[:half]),
                     (batch.records[half:], batch.futures[half:])))]
        for part in parts:
            self._incomplete[part] = loop.create_future()
        done = self._incomplete.pop(batch, None)
        if done is not None:  # flush() may be waiting for the whole batch
            both = asyncio.gather(*(self._incomplete[part] for part in parts))
            both.add_done_callback(functools.partial(_resolve, done))
        for part in parts:
            self._requeue(part)
        log.debug("split a batch of %d records for %s after MESSAGE_TOO_LARGE",
                  len(batch.records), batch.tp)

    def _requeue(self, batch: _Batch) -> None:
        """Put a batch back before every later-created batch of its partition."""
        queue = self._ready[batch.tp]
        index = 0
        while index < len(queue) and queue[index].order < batch.order:
            index += 1
        queue.insert(index, batch)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        for future in batch.futures:
            if future is not None and not future.done():
                future.set_exception(error)
        if batch.outcome is not None and not batch.outcome.done():
            batch.outcome.set_exception(error)
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        self._buffered -= batch.size
        batch.size = 0
        self._room.set()
        done = self._incomplete.pop(batch, None)
        if done is not None and not done.done():
            done.set_result(None)
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]


__all__ = ["NetworkError", "Producer", "ProducerClosedError", "RecordMetadata"]
