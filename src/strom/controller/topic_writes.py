"""Topic creations and partition additions from many requests, written in few metadata writes.

:class:`TopicWriteQueue` is how CreateTopics and CreatePartitions reach the metadata store.
Each request is queued whole; one task takes every queued request (up to
:data:`MAX_BATCH_BYTES` of new znodes, and :data:`MAX_BATCH_REQUESTS` requests), plans
them one after another against the current image (:func:`plan_batch`: Kafka's rules through
:class:`~strom.controller.topics.TopicAdmin`, each request seeing the topics of those before
it) and writes everything in one conditional write. Requests that arrive meanwhile form the
next batch, so the cost per write (an fsync, or a ZooKeeper multi-op) is shared by every
request that waited for it: a group commit (after a shared write the next one waits
:data:`LINGER_S` for the answered clients' next requests). A request's answer is ready once
the image holding its topics is installed here, as with the synchronous path.

On one broker (file-backed metadata) creation stays all or nothing: the logs of the new
partitions are created before the write, a slice at a time (see below), and removed again
when the write does not happen (a topic whose logs cannot be created gets
KAFKA_STORAGE_ERROR alone). In a cluster (ZooKeeper: ``commit``) the write comes first and
every replica — this broker's too — creates its logs when the new image arrives, off its
event loop, as Kafka's brokers do after its controller's write; a log that cannot be
created leaves that replica offline until a later image.

Per request the outcome is the same as if the requests had been planned one at a time in
queue order: a topic created earlier in the batch makes a later one with the same (or a
colliding) name TOPIC_ALREADY_EXISTS (INVALID_TOPIC_EXCEPTION); a request adding partitions
to a topic an earlier request of the batch touched waits for the next batch; a request
refused whole by Kafka's record bound (:func:`~strom.controller.limits.check_records`)
counts nothing.

The event loop is never held for long: a batch is planned in slices
(:func:`plan_batch_steps`, :mod:`strom.common.slices`), logs are created through the replica
manager (``prepare_new``: files on a worker thread, ``Log`` objects on the loop in slices),
on ZooKeeper metadata the write itself runs on a writer thread (``commit``: the store's
write for a thread other than its owner's), and on the file-backed store the changes are
applied and encoded in slices and written on a worker thread (``write``: its
``write_async``). A write that lost a race (another writer moved the image) is planned again
against the image that won, once it is installed here (ZooKeeper reports the loss before its
watch delivers the newer image; planning at once would lose again against the same image);
the batch's requests get REQUEST_TIMED_OUT only after losing for :data:`WRITE_TIMEOUT_S`
(the controller's own writes — leaders and ISRs of the topics just created — race with the
next creations while a burst lasts, so a count of losses would fail a busy cluster).

Lifecycle: created with the broker state; the task starts with the first request and ends
at :meth:`close` (the broker's stop), which cancels a batch in progress (its created logs are
removed, unless its write was being made: then it completes, and the logs of the partitions
it names stay) and the requests still queued. Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from strom.common.errors import (
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    StromError,
    TopicAlreadyExistsError,
    error_class,
)
from strom.common.slices import Steps, run_at_once, run_in_slices
from strom.controller.limits import BrokerPartitionCounts, check_records, requested_partitions
from strom.controller.topics import PartitionStorage, TopicAdmin, colliding_topic
from strom.metadata.changes import MetadataChange, PutTopic, SetPartitions
from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo
from strom.metadata.store import MetadataStore, StaleMetadataError

log = logging.getLogger("strom.controller")

#: What one batch may add to a ZooKeeper multi-op (:func:`write_bytes`): well below
#: ZooKeeper's 1 MiB request bound, with room for the write's topic delta; a larger request
#: is a batch of its own. (2,000 partitions of one-partition topics, the bound before, made
#: 1.4 MB: ZooKeeper closed the connection.)
MAX_BATCH_BYTES = 400_000
MAX_BATCH_REQUESTS = 1_000
#: After a write shared by several requests, how long the next one waits for the answered
#: clients' next requests (a lone client's requests never wait).
LINGER_S = 0.003
#: How long a batch may keep losing races before its requests get REQUEST_TIMED_OUT.
WRITE_TIMEOUT_S = 20.0
#: How long to wait for the image of a ZooKeeper write to be installed here.
INSTALL_TIMEOUT_S = 10.0

RequestTimedOutError = error_class("REQUEST_TIMED_OUT")


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic of a CreateTopics request (-1: the broker default)."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """One topic of a CreatePartitions request: its new total count."""

    name: str
    total: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class Creations:
    """A CreateTopics request's topics (after the handler's own checks)."""

    topics: tuple[NewTopic, ...]


@dataclass(frozen=True, slots=True)
class Additions:
    """A CreatePartitions request's topics."""

    topics: tuple[NewPartitions, ...]


Request = Creations | Additions
#: Per topic: the topic as created (or grown), or why not.
Outcome = TopicInfo | KafkaError


@dataclass(slots=True)
class Planned:
    """One request planned within a batch: its outcomes and changes; ``deferred`` when it
    must wait for the next batch."""

    outcomes: list[Outcome]
    changes: list[MetadataChange]
    deferred: bool = False


def plan_batch(admin: TopicAdmin, image: MetadataImage, requests: Sequence[Request]
               ) -> list[Planned]:
    """Plan ``requests`` in order against ``image`` as if each saw the ones before it."""
    return run_at_once(plan_batch_steps(admin, image, requests))


def plan_batch_steps(admin: TopicAdmin, image: MetadataImage, requests: Sequence[Request]
                     ) -> Steps[list[Planned]]:
    """:func:`plan_batch` as steps (:mod:`strom.common.slices`): one per topic."""
    counts = admin.partition_counts(image)
    created: dict[str, None] = {}   # names created in this batch (a Mapping for collisions)
    touched: set[str] = set()       # names created or grown in this batch
    planned = []
    for request in requests:
        trial = BrokerPartitionCounts(dict(counts.hosted()), counts.limit)
        if isinstance(request, Additions):
            result = yield from _plan_additions(admin, image, trial, request.topics, touched)
        else:
            result = yield from _plan_creations(admin, image, trial, request.topics, created)
        if not result.deferred:
            counts = trial
            for change in result.changes:
                touched.add(_topic_name(change))
                if isinstance(change, PutTopic):
                    created[change.topic.name] = None
        planned.append(result)
    return planned


def _topic_name(change: MetadataChange) -> str:
    if isinstance(change, PutTopic):
        return change.topic.name
    assert isinstance(change, SetPartitions)
    return change.topic


def _plan_creations(admin: TopicAdmin, image: MetadataImage, counts: BrokerPartitionCounts,
                    topics: Sequence[NewTopic], created: Mapping[str, None]
                    ) -> Steps[Planned]:
    outcomes: list[Outcome] = []
    for t in topics:
        yield
        try:
            if t.name in created:
                raise TopicAlreadyExistsError(f"Topic '{t.name}' already exists.")
            other = colliding_topic(created, t.name)
            if other is not None:
                raise InvalidTopicError(f"Topic '{t.name}' collides with existing topic: {other}")
            outcomes.append(admin.plan_topic(image, counts, t.name, t.partitions,
                                             t.replication_factor, t.configs,
                                             assignments=t.assignments))
        except KafkaError as exc:
            outcomes.append(exc)
    ok = [o for o in outcomes if isinstance(o, TopicInfo)]
    try:
        check_records(ok)
    except KafkaError as exc:
        return Planned([exc] * len(topics), [])
    return Planned(outcomes, [PutTopic(o) for o in ok])


def _plan_additions(admin: TopicAdmin, image: MetadataImage, counts: BrokerPartitionCounts,
                    topics: Sequence[NewPartitions], touched: set[str]) -> Steps[Planned]:
    if any(t.name in touched for t in topics):
        return Planned([], [], deferred=True)
    outcomes: list[Outcome] = []
    changes: list[MetadataChange] = []
    for t in topics:
        yield
        try:
            change, grown = admin.plan_added_partitions(image, counts, t.name, t.total,
                                                        t.assignments)
        except KafkaError as exc:
            outcomes.append(exc)
            continue
        outcomes.append(grown)
        changes += change
    return Planned(outcomes, changes)


def write_bytes(name: str, partitions: int, *, new: bool = False) -> int:
    """About what creating topic ``name`` (``new``; else growing it) with ``partitions`` new
    partitions adds to a ZooKeeper multi-op, a little over: the topic's znodes (topic,
    ``partitions``, config: path, data, operation header) and per partition its znode and
    state's, whose paths repeat the name; a chroot of up to 40 characters)."""
    return (3 if new else 1) * (len(name) + 200) + partitions * (2 * len(name) + 400)


@dataclass(slots=True)
class _Queued:
    request: Request
    future: asyncio.Future[list[Outcome]]
    size: int


class TopicWriteQueue:
    """See the module doc. ``commit``: a conditional write callable from another thread
    (ZooKeeper); else ``write``, a conditional write that persists off the event loop
    (the file-backed store's ``write_async``), or ``store.write`` on the loop."""

    def __init__(self, admin: TopicAdmin, store: MetadataStore,
                 storage: PartitionStorage | None = None, *,
                 commit: Callable[[int, Sequence[MetadataChange]], object] | None = None,
                 write: Callable[[int, Sequence[MetadataChange]], Awaitable[object]]
                 | None = None,
                 default_partitions: Callable[[], int] = lambda: 1) -> None:
        self._admin = admin
        self._store = store
        self._storage = storage
        self._commit = commit
        self._write_async = write
        self._default_partitions = default_partitions
        self._queue: list[_Queued] = []
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._closed = False

    async def create_topics(self, topics: Sequence[NewTopic]) -> list[Outcome]:
        """Create ``topics`` (one CreateTopics request); an outcome per topic, in order."""
        default = self._default_partitions()
        return await self._submit(Creations(tuple(topics)), sum(
            write_bytes(t.name, requested_partitions(t.partitions, len(t.assignments or ()),
                                                     default), new=True)
            for t in topics))

    async def add_partitions(self, topics: Sequence[NewPartitions]) -> list[Outcome]:
        """Grow ``topics`` (one CreatePartitions request); an outcome per topic, in order."""
        image = self._store.image
        return await self._submit(Additions(tuple(topics)), sum(
            write_bytes(t.name, max(t.total - len(image.topics[t.name].partitions), 0))
            for t in topics if t.name in image.topics))

    async def _submit(self, request: Request, size: int) -> list[Outcome]:
        if not request.topics:
            return []
        if self._closed:
            raise error_class("BROKER_NOT_AVAILABLE")("the broker is shutting down")
        loop = asyncio.get_running_loop()
        queued = _Queued(request, loop.create_future(), size)
        self._queue.append(queued)
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        self._wakeup.set()
        if self._task is None:
            self._task = loop.create_task(self._run(), name="topic-writes")
        return await queued.future

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for queued in self._queue:
            if not queued.future.done():
                queued.future.cancel()
        self._queue = []
        if self._writer is not None:
            self._writer.shutdown(wait=False, cancel_futures=True)

    # -- the task ------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wakeup is not None
        last = 0
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if last > 1 and len(self._queue) < last:
                # The answers of a shared write bring their clients' next requests back
                # together: wait for them a moment instead of writing the first alone.
                await asyncio.sleep(LINGER_S)
            while self._queue:
                batch = self._take()
                last = len(batch)
                try:
                    await self._write(batch)
                except KafkaError as exc:
                    self._fail(batch, exc)
                except asyncio.CancelledError:
                    self._fail(batch, None)
                    raise
                except StromError as exc:  # refused by the store (a ZooKeeper bound): no bug
                    log.warning("topic write refused: %s", exc)
                    self._fail(batch, error_class("UNKNOWN_SERVER_ERROR")(str(exc)))
                except Exception as exc:
                    log.exception("topic write failed")
                    self._fail(batch, error_class("UNKNOWN_SERVER_ERROR")(str(exc)))

    def _take(self) -> list[_Queued]:
        """The oldest queued requests, within the batch bounds (at least one)."""
        batch: list[_Queued] = []
        added = 0
        for queued in self._queue:
            if batch and (added + queued.size > MAX_BATCH_BYTES
                          or len(batch) >= MAX_BATCH_REQUESTS):
                break
            batch.append(queued)
            added += queued.size
        del self._queue[:len(batch)]
        return batch

    @staticmethod
    def _fail(batch: Sequence[_Queued], error: KafkaError | None) -> None:
        for queued in batch:
            if queued.future.done():
                continue
            if error is None:
                queued.future.cancel()
            else:
                queued.future.set_result([error] * len(queued.request.topics))

    async def _write(self, batch: list[_Queued]) -> None:
        prepared: set[tuple[str, int]] = set()  # logs created for this batch so far
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WRITE_TIMEOUT_S
            while loop.time() < deadline:
                image = self._store.image
                planned = await run_in_slices(
                    plan_batch_steps(self._admin, image, [q.request for q in batch]))
                deferred = [q for q, p in zip(batch, planned, strict=True) if p.deferred]
                if deferred:  # they go first in the next batch
                    self._queue[:0] = deferred
                    batch = [q for q, p in zip(batch, planned, strict=True) if not p.deferred]
                    planned = [p for p in planned if not p.deferred]
                if self._commit is None:  # one broker: its logs first (all or nothing)
                    await self._prepare(image, planned, prepared)
                changes = [c for p in planned for c in p.changes]
                try:
                    if changes:
                        if self._store.image is not image:
                            raise StaleMetadataError(image.epoch, self._store.image.epoch)
                        await self._commit_changes(image, changes)
                except StaleMetadataError:
                    # Planned again (logs still wanted are kept) once the image that won
                    # is here: on ZooKeeper the loss is known before the watch brings it.
                    await self._installed(image)
                    continue
                prepared.clear()  # written: the logs belong to the new partitions now
                for queued, result in zip(batch, planned, strict=True):
                    if not queued.future.done():
                        queued.future.set_result(result.outcomes)
                return
            raise RequestTimedOutError("the metadata kept changing under the topic write")
        finally:
            # (a write cancelled while its bytes were being written is still made: the
            # partitions it names keep their logs)
            topics = self._store.image.topics
            self._discard(sorted(tp for tp in prepared if tp[0] not in topics
                                 or tp[1] >= len(topics[tp[0]].partitions)))

    async def _prepare(self, image: MetadataImage, planned: list[Planned],
                       prepared: set[tuple[str, int]]) -> None:
        """Create the local logs of every new partition this broker hosts, every topic's in
        one call (the storage's worker threads share them out), adding them to ``prepared``
        (those of an earlier attempt that this plan does not host any more are removed); a
        topic whose logs cannot be created fails alone (its change is dropped)."""
        storage = self._storage
        if storage is None:
            return
        wanted: set[tuple[str, int]] = set()
        jobs: list[tuple[Planned, MetadataChange, TopicInfo, list[PartitionInfo]]] = []
        for request in planned:
            for change in request.changes:
                topic, new = _new_partitions(image, change)
                wanted.update((topic.name, p.partition) for p in new)
                jobs.append((request, change, topic, new))

        results = await storage.prepare_new([(topic, new) for _, _, topic, new in jobs])
        kept: dict[int, list[MetadataChange]] = {id(request): [] for request in planned}
        for (request, change, topic, _), result in zip(jobs, results, strict=True):
            if isinstance(result, KafkaError):
                _replace_outcome(request, topic.name, result)
            else:
                prepared.update(result)
                kept[id(request)].append(change)
        for request in planned:
            request.changes = kept[id(request)]
        stale = sorted(tp for tp in prepared if tp not in wanted)
        if stale:
            self._discard(stale)
            prepared.difference_update(stale)
        if prepared:
            try:
                await storage.sync_new()
            except OSError as exc:
                error = KafkaStorageError(f"cannot sync the new logs: {exc.strerror or exc}")
                raise error from exc

    def _discard(self, prepared: Sequence[tuple[str, int]]) -> None:
        if prepared and self._storage is not None:
            self._storage.discard_partitions(list(prepared))

    async def _commit_changes(self, image: MetadataImage,
                              changes: Sequence[MetadataChange]) -> None:
        if self._commit is None:
            if self._write_async is not None:
                await self._write_async(image.epoch, changes)
            else:
                self._store.write(image.epoch, changes)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="strom-topic-writes")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._commit, image.epoch, changes)
        await self._installed(image)

    async def _installed(self, image: MetadataImage) -> None:
        """Wait (bounded) until the store's image is newer than ``image``."""
        if self._store.image is not image:
            return
        moved = asyncio.Event()
        unsubscribe = self._store.subscribe(lambda _image: moved.set())
        try:
            if self._store.image is image:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(INSTALL_TIMEOUT_S):
                        await moved.wait()
        finally:
            unsubscribe()


def _new_partitions(image: MetadataImage, change: MetadataChange
                    ) -> tuple[TopicInfo, list[PartitionInfo]]:
    """The topic a planned change creates or grows and its partitions that are new."""
    if isinstance(change, PutTopic):
        return change.topic, list(change.topic.partitions)
    assert isinstance(change, SetPartitions)
    topic = image.topics[change.topic]
    return topic, [p for p in change.partitions if p.partition >= len(topic.partitions)]


def _replace_outcome(planned: Planned, topic: str, error: KafkaError) -> None:
    for i, outcome in enumerate(planned.outcomes):
        if isinstance(outcome, TopicInfo) and outcome.name == topic:
            planned.outcomes[i] = error
