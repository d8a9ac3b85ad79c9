"""The partitions this broker hosts, kept in step with metadata, and the one write path.

:class:`ReplicaManager` (Kafka's ``ReplicaManager``):

* applies each metadata image as leader / follower transitions of the hosted
  :class:`~strom.replication.partition.Partition` objects (creating logs for new partitions,
  deleting the logs of partitions it no longer hosts) and tells leadership listeners (the
  coordinator runtimes) which internal partitions it now leads or stopped leading. Every
  hosted partition is the topic the image names, by topic id: each log stores its topic's
  id (``partition.metadata``), and a partition or log of another id — a topic deleted and
  created again under its name while this broker was down, paused or behind — is deleted
  before the new topic's partition is created, so it never becomes a replica; a log without
  an id (an earlier strom's) is adopted once. Whoever created a log's directory, it runs
  with the image's topic configs. Logs created, adopted and deleted are logged at INFO
  (:mod:`strom.replication.log_changes`);
* is the topic administration's :class:`~strom.controller.topics.PartitionStorage`: the logs
  of new partitions are created (all or nothing) before the metadata names them
  (:meth:`ReplicaManager.prepare_partitions`), so a failure leaves no topic behind;
* :meth:`ReplicaManager.append` is the only way records reach a log — for client produce,
  for the coordinators and for replication (:class:`AppendOrigin`). It validates (unknown
  partitions, internal topics for clients, required acks; the log checks batches, sizes,
  timestamps, compaction keys and producer sequences), appends, applies the flush policy
  (``flush.messages``: the records are fsynced by a group-commit round before they are
  acknowledged) and, for acks=-1, acknowledges only once the high watermark passes the
  appended records (:class:`~strom.replication.delayed.DelayedProduce` in the produce
  purgatory, woken by high-watermark moves and fsync rounds);
* owns the fetch purgatory: parked fetches are woken by appends (log end) and high-watermark
  moves;
* tells the follower fetchers (``fetching``, a :class:`FollowerFetching`: the broker's
  transport around :class:`~strom.replication.fetcher.ReplicaFetcher`) which partitions
  this broker follows from which leader at which epoch after every image, and is their
  :class:`~strom.replication.fetcher.FollowerLogs` (fetched batches go through
  :meth:`ReplicaManager.append` like every other write);
* hands the leaders' ISR proposals to ``isr_writer`` (an :class:`IsrWriter`, which writes
  them through the metadata store and reports failures and writes back through
  :meth:`ReplicaManager.isr_change_failed` / :meth:`ReplicaManager.isr_change_written`)
  and runs the periodic ISR shrink check (:meth:`ReplicaManager.shrink_isrs`);
* checkpoints every hosted partition's high watermark in Kafka's
  ``replication-offset-checkpoint`` (periodically and on clean shutdown) and restores it when
  a partition is created (never above the log end);
* reports every storage failure of its writes (appends, fsync rounds, creating a partition's
  log) through the data directory's :class:`~strom.storage.health.LogDirHealth` (once per
  episode) and answers KAFKA_STORAGE_ERROR for it. A partition whose log cannot be created
  is *offline*: writes to it get KAFKA_STORAGE_ERROR, and its creation is retried with every
  metadata image.

Lifecycle: built by the broker server after the log manager loaded; :meth:`apply_image` after
every metadata change; :meth:`shutdown` before the log manager shuts down. Owned by the
event-loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from strom.common.clock import Clock
from strom.common.config import TopicConfig, validate_topic_configs
from strom.common.errors import (
    CorruptMessageError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from strom.common.slices import SLICE_S, run_in_slices, take_turn
from strom.common.timer import Scheduler
from strom.common.types import TopicPartition
from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo
from strom.replication.delayed import (
    DelayedFetch,
    DelayedProduce,
    PartitionAppendResult,
    PendingAck,
    settle,
)
from strom.replication.flusher import Flushable, GroupCommitFlusher
from strom.replication.log_changes import LogChanges, id_text
from strom.replication.partition import IsrChange, Partition
from strom.replication.partition_watch import PartitionWatchers
from strom.replication.purgatory import Purgatory
from strom.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, read_offsets, write_offsets
from strom.storage.files import CorruptFileError
from strom.storage.health import LogDirHealth
from strom.storage.log import AppendResult, Log
from strom.storage.log_maker import LogMaker, LogMakerGone
from strom.storage.log_maker import available as log_maker_available
from strom.storage.log_manager import DeletedLog, LogManager, LogToOpen, remove_new_log_dir
from strom.storage.log_validator import AppendOrigin
from strom.storage.txn_verification import VerificationGuard

__all__ = [
    "AppendOrigin", "AppendOutcome", "LeadershipListener", "PartitionAppendResult",
    "ReplicaManager", "VerificationGuard", "as_kafka_error",
]

log = logging.getLogger("strom.replication")
T = TypeVar("T")
R = TypeVar("R")

#: Partitions new to this broker opened within apply_image (with ``log_threads``: those
#: whose logs a topic write prepared, for half an :data:`ADOPT_SLICE_S`: the image's other
#: listeners run in the same turn of the loop); more are opened by a task, a slice at a time.
ADOPT_AT_ONCE = 64
#: The longest stretch the task opens partitions for between two turns of the event loop.
ADOPT_SLICE_S = SLICE_S
#: Logs handed to the worker threads at once (``log_threads``).
OPEN_CHUNK = 32
#: A job of at least this many new logs has their files made by the log maker process
#: (:mod:`strom.storage.log_maker`); a smaller one on the worker thread itself, so a broker
#: that creates a topic now and then runs no helper.
MAKER_MIN = 8
#: The longest stretch a topic write builds new logs for between two turns of the event
#: loop. Their files are made on the worker threads (system calls only, so a busy disk holds
#: no loop); built there too, the Log objects' Python work held the GIL the loop waited for
#: after each of its own system calls, and a healthy producer was answered tens of
#: milliseconds late (docs/benchmarks.md).
CREATE_SLICE_S = SLICE_S
#: While it makes new logs, the adoption task is busy (its loop slices and the worker
#: threads' jobs it waits for) at most this share of the time: after a chunk it rests three
#: times as long as the chunk took. In a cluster every replica makes the logs of a new
#: topic's partitions after the CreateTopics answer, as Kafka's brokers do, and 1,000 new
#: partitions at once on each of three brokers sharing two cores left the loops too little
#: time for the data path: a healthy acks=all producer's requests, served one at a time,
#: queued up to 1.3 s (docs/benchmarks.md). A request for a partition still pending moves
#: it to the front (NOT_LEADER_OR_FOLLOWER until then, retriable). Opening logs found on
#: disk at start is not paced.
ADOPT_NEW_DUTY = 0.25
#: New logs a follower builds at once, their files made on a worker thread (~0.15 ms each).
BUILD_AT_ONCE = 12


@dataclass(slots=True)
class _Events:
    """What role changes of one pass produced, acted on at its end."""

    became_leader: list[tuple[TopicPartition, int]] = field(default_factory=list)
    resigned: list[tuple[TopicPartition, int | None]] = field(default_factory=list)
    #: Partitions followed from now on (tp → leader id, leader epoch) or no longer (None).
    followed: dict[TopicPartition, tuple[int, int] | None] = field(default_factory=dict)
    changes: LogChanges = field(default_factory=LogChanges)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(slots=True)
class AppendOutcome:
    """Per-partition results, and a future when the acknowledgement must wait.

    ``done`` is None when every result is final; otherwise it resolves (never raises) once
    every partition is acknowledged or failed, and the failures are in ``results`` by then."""

    results: dict[TopicPartition, PartitionAppendResult]
    done: asyncio.Future[None] | None


class LeadershipListener(Protocol):
    """Told when this broker starts or stops leading a partition of a watched topic."""

    def on_become_leader(self, partition: int, leader_epoch: int) -> None: ...

    def on_resign(self, partition: int, leader_epoch: int | None) -> None: ...


def as_kafka_error(exc: BaseException) -> KafkaError:
    """The error a client sees for an exception from the storage layer."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, OSError):
        return KafkaStorageError(f"log directory error: {exc.strerror or exc}")
    raise exc


class FollowerFetching(Protocol):
    """The follower fetchers, told after every image what this broker follows."""

    def update_followed(self, changes: Mapping[TopicPartition, tuple[int, int] | None]
                        ) -> None:
        """Follow these partitions from now on (tp → leader id, leader epoch), or no longer
        (None); every other partition as before. Told only what changed, so a pass that
        adopts a few partitions costs those few, however many are followed."""
        ...


class IsrWriter(Protocol):
    """Writes a leader's ISR proposal through the metadata store (asynchronously)."""

    def submit(self, change: IsrChange) -> None: ...


class ReplicaManager:
    #: The class of hosted partitions (a seam: a simulation plants a faulty subclass here).
    partition_type: type[Partition] = Partition

    def __init__(
        self,
        logs: LogManager,
        topic_config: Callable[[str], TopicConfig],
        clock: Clock,
        node_id: int,
        scheduler: Scheduler,
        *,
        health: LogDirHealth | None = None,
        log_threads: int = 0,
    ) -> None:
        self.logs = logs
        #: With ``log_threads``, logs are opened and created on that many worker threads
        #: (file-system calls can block for milliseconds on a busy disk) and registered on
        #: the event loop; without, inline (tests and simulations: deterministic).
        self._log_threads = log_threads
        self._log_io: ThreadPoolExecutor | None = None
        #: With ``log_threads``, jobs of :data:`MAKER_MIN` new logs or more make their
        #: directories and files in a helper process (started on first use); None once it
        #: failed (the worker threads make them then).
        self._maker: LogMaker | None = (LogMaker() if log_threads and log_maker_available()
                                        else None)
        #: Partitions whose log a worker thread is opening (not pending, not hosted yet).
        self._opening: set[TopicPartition] = set()
        self.health = health or LogDirHealth(logs.data_dir)
        self.topic_config = topic_config
        self.clock = clock
        self.node_id = node_id
        self.produce_purgatory: Purgatory[TopicPartition] = Purgatory("produce", scheduler)
        self.fetch_purgatory: Purgatory[TopicPartition] = Purgatory("fetch", scheduler)
        #: Readers that keep state across requests (followers' fetch sessions), called on
        #: every change that wakes the fetch purgatory.
        self.watchers = PartitionWatchers()
        self.flusher = GroupCommitFlusher(self._on_flushed)
        self._partitions: dict[TopicPartition, Partition] = {}
        #: Hosted partitions whose log is not open yet, in the order they are opened.
        self._pending: OrderedDict[TopicPartition, None] = OrderedDict()
        #: Logs created for a metadata write that has not happened yet (never deleted as
        #: strays); a partition leaves when adopted or discarded.
        self._prepared: set[TopicPartition] = set()
        #: What this broker follows: tp → (leader, leader epoch).
        self._followed: dict[TopicPartition, tuple[int, int]] = {}
        self._image: MetadataImage | None = None
        self._adopter: asyncio.Task[None] | None = None
        #: Broker ids registered in the last image applied (ISR expansion is limited to them).
        self._registered: frozenset[int] = frozenset()
        self._offline: set[TopicPartition] = set()  # hosted, but the log could not be created
        self._listeners: dict[str, list[LeadershipListener]] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._checkpoint_path = Path(logs.data_dir) / REPLICATION_OFFSET_CHECKPOINT
        self._restored_hw = self._read_hw_checkpoint()
        #: Set by the broker when it runs in a cluster; None: nothing is followed.
        self.fetching: FollowerFetching | None = None
        self.isr_writer: IsrWriter | None = None

    # ------------------------------------------------------------------------------------
    # hosted partitions
    # ------------------------------------------------------------------------------------
    def partition(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition ``tp``. A pending one whose log is open already (a topic
        write prepared it) is registered on the spot; otherwise, with ``log_threads``, it
        is moved to the front of what the worker threads open next and None is returned
        until then (the handlers answer NOT_LEADER_OR_FOLLOWER, retriable, as Kafka's
        brokers do before a new partition's log exists: a request is never held up by
        disk work, and a follower fetch naming hundreds of new partitions does not create
        their logs on the event loop); without, it is opened on the spot."""
        partition = self._partitions.get(tp)
        if partition is None and tp in self._pending:
            if (self._log_threads and _loop_running()
                    and self.logs.get(tp.topic, tp.partition) is None):
                self._pending.move_to_end(tp, last=False)
                self._schedule_adoption()
                return None
            partition = self._adopt_now(tp)
        return partition

    def opening(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is hosted here but its log is not open yet."""
        return tp in self._pending or tp in self._opening

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partition(TopicPartition(topic, partition))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    @property
    def pending(self) -> int:
        """Hosted partitions whose log is not open yet (being loaded or created)."""
        return len(self._pending)

    def add_leadership_listener(self, topic: str, listener: LeadershipListener) -> None:
        """Watch ``topic``'s leadership; partitions led already are reported at once."""
        self._listeners.setdefault(topic, []).append(listener)
        for tp, partition in sorted(self._partitions.items()):
            if tp.topic == topic and partition.is_leader:
                listener.on_become_leader(tp.partition, partition.leader_epoch)

    def apply_image(self, image: MetadataImage) -> None:
        """Make the hosted partitions and their roles match the metadata image.

        Only the topics that changed since the last image are looked at (a changed topic
        is a new ``TopicInfo`` object), unless the registered brokers changed (then all).
        Partitions new to this broker are *pending*: up to :data:`ADOPT_AT_ONCE` of them
        (with ``log_threads``: those a topic write prepared, for half a slice) are opened here,
        more by a task a slice at a time (:data:`ADOPT_SLICE_S`), internal
        topics first, so a large image never holds the event loop for long; a pending
        partition that a request needs is opened on the spot."""
        previous = self._image
        self._image = image
        full = previous is None or previous.brokers.keys() != image.brokers.keys()
        self._registered = frozenset(image.brokers)
        if previous is None or full:
            names: list[str] = list(image.topics)
        else:
            names = [n for n, t in image.topics.items() if previous.topics.get(n) is not t]
        gone = [] if previous is None else [n for n in previous.topics if n not in image.topics]
        events = _Events()
        wanted_all: set[TopicPartition] = set()
        for name in names:
            topic = image.topics[name]
            wanted = self._apply_topic(image, topic, events)
            if full:
                wanted_all |= wanted
            elif previous is not None and (old := previous.topics.get(name)) is not None:
                self._drop([tp for tp in (TopicPartition(name, p.partition)
                                          for p in old.partitions if self.node_id in p.replicas)
                            if tp not in wanted], events)
        for name in gone:
            self._topic_configs.pop(name, None)
            assert previous is not None
            self._drop([TopicPartition(name, p.partition)
                        for p in previous.topics[name].partitions], events)
        if full:  # anything else hosted, pending or on disk goes
            self._drop([tp for tp in (*self._partitions, *self._pending)
                        if tp not in wanted_all], events)
            for name in [n for n in self._topic_configs if n not in image.topics]:
                del self._topic_configs[name]
            self._report_deleted(self.logs.delete_logs(
                [tp for tp in self.logs.partitions()
                 if tp not in wanted_all and tp not in self._prepared]), events)
        for tp in list(self._offline):  # retried with every image
            self._offline.discard(tp)
            self._pending[tp] = None
        if not _loop_running():
            for tp in list(self._pending):
                self._adopt(tp, events)
        elif self._log_threads:
            deadline = time.perf_counter() + ADOPT_SLICE_S / 2
            for tp in [tp for tp in self._pending if self.logs.get(*tp) is not None]:
                self._adopt(tp, events)  # prepared already: nothing to open
                if time.perf_counter() > deadline:
                    break  # the rest by the task (or on the spot, when a request needs it)
            if self._pending:
                self._schedule_adoption()
        elif len(self._pending) <= ADOPT_AT_ONCE:
            for tp in list(self._pending):
                self._adopt(tp, events)
        else:
            self._schedule_adoption()
        self._finish(events)

    def _apply_topic(self, image: MetadataImage, topic: TopicInfo, events: _Events
                     ) -> set[TopicPartition]:
        """Apply one topic's partitions; returns those this broker hosts."""
        known = self._topic_configs.get(topic.name)
        if known is not None and known != topic.configs:
            self.update_configs(topic.name)
        self._topic_configs[topic.name] = dict(topic.configs)
        wanted: set[TopicPartition] = set()
        config: TopicConfig | None = None
        for info in topic.partitions:
            if self.node_id not in info.replicas:
                continue
            tp = TopicPartition(topic.name, info.partition)
            wanted.add(tp)
            partition = self._partitions.get(tp)
            if partition is not None and partition.topic_id != topic.topic_id:
                # The name belongs to another topic now (deleted and created again, unseen
                # in between): the old partition goes before the new one exists (its log
                # too: another topic id's, in _create_partition).
                self._drop_replaced(partition)
                if partition.is_leader:
                    events.resigned.append((tp, None))
                self._followed.pop(tp, None)
                events.followed[tp] = None
                partition = None
            if partition is None:
                if tp not in self._pending and tp not in self._offline and (
                        tp not in self._opening):
                    self._pending[tp] = None
                    if topic.internal:  # the coordinators wait for these
                        self._pending.move_to_end(tp, last=False)
                continue
            if config is None:
                config = self.topic_config(topic.name)
            self._apply_role(image, topic, info, partition, config, events)
        return wanted

    def _apply_role(self, image: MetadataImage, topic: TopicInfo, info: PartitionInfo,
                    partition: Partition, config: TopicConfig, events: _Events) -> None:
        tp = partition.tp
        partition.internal = topic.internal
        partition.min_insync_replicas = int(config.get("min.insync.replicas"))
        was_leader = partition.is_leader
        if info.leader == self.node_id:
            if self._followed.pop(tp, None) is not None:
                events.followed[tp] = None
            if partition.make_leader(info.leader_epoch, info.isr, info.replicas, image.epoch):
                events.became_leader.append((tp, info.leader_epoch))
        else:
            if partition.make_follower(info.leader, info.leader_epoch,
                                       info.replicas) and was_leader:
                events.resigned.append((tp, info.leader_epoch))
            followed = (info.leader, info.leader_epoch) if info.leader >= 0 else None
            if self._followed.get(tp) != followed:
                events.followed[tp] = followed
                if followed is None:
                    del self._followed[tp]
                else:
                    self._followed[tp] = followed

    def _drop(self, tps: Iterable[TopicPartition], events: _Events) -> None:
        """This broker no longer hosts ``tps``: forget them and delete their logs."""
        deleted = []
        for tp in tps:
            self._pending.pop(tp, None)
            if tp in self._opening:  # its log is deleted once opened
                self._opening.discard(tp)
                continue
            self._offline.discard(tp)
            if self._followed.pop(tp, None) is not None:
                events.followed[tp] = None
            partition = self._partitions.pop(tp, None)
            if partition is not None:
                if partition.is_leader:
                    events.resigned.append((tp, None))
                self._wake(tp)
            if tp not in self._prepared:
                deleted.append(tp)
        if deleted:
            self._report_deleted(self.logs.delete_logs(deleted), events)

    def _report_deleted(self, deleted: Iterable[DeletedLog], events: _Events) -> None:
        image = self._image
        for gone in deleted:
            current = image.topics.get(gone.topic) if image is not None else None
            events.changes.add(
                "deleted", TopicPartition(gone.topic, gone.partition), gone.topic_id,
                "topic deleted" if current is None
                else "not a replica here" if current.topic_id == gone.topic_id
                else f"the name now belongs to topic id {id_text(current.topic_id)}")

    def _adopt(self, tp: TopicPartition, events: _Events) -> Partition | None:
        """Open (or create) the log of pending ``tp`` and give it its role in the current
        image; None when it is no longer hosted or its log cannot be opened (offline)."""
        self._pending.pop(tp, None)
        image = self._image
        topic = image.topics.get(tp.topic) if image is not None else None
        if image is None or topic is None or tp.partition >= len(topic.partitions):
            return None
        info = topic.partitions[tp.partition]
        if self.node_id not in info.replicas:
            return None
        config = self.topic_config(tp.topic)
        try:
            partition = self._create_partition(tp, topic.topic_id, config, events.changes)
        except (OSError, KafkaError) as exc:
            self._cannot_open(tp, exc)
            return None
        self._prepared.discard(tp)
        self._apply_role(image, topic, info, partition, config, events)
        return partition

    def _cannot_open(self, tp: TopicPartition, exc: BaseException) -> None:
        """Not hosted until a later image (the others are applied regardless)."""
        if isinstance(exc, OSError):
            self.health.failure(exc, f"creating the log of {tp}")
        else:
            log.error("cannot open the log of %s: %s", tp, exc)
        self._offline.add(tp)

    def _adopt_now(self, tp: TopicPartition) -> Partition | None:
        """A request needs pending ``tp``: open it at once."""
        events = _Events()
        partition = self._adopt(tp, events)
        self._finish(events)
        return partition

    def _schedule_adoption(self) -> None:
        if self._adopter is None or self._adopter.done():
            self._adopter = asyncio.get_running_loop().create_task(
                self._adopt_pending(), name="open-partitions")

    async def _adopt_pending(self) -> None:
        """Open pending partitions a slice at a time (:data:`ADOPT_SLICE_S`), yielding
        between slices so requests keep being served; with ``log_threads`` the logs of
        directories already there are opened on the worker threads, :data:`OPEN_CHUNK` at a
        time, and only registered here (:meth:`_adopt_chunk_off_loop`); while new logs are
        made the task rests between chunks (:data:`ADOPT_NEW_DUTY`)."""
        began, opened = time.monotonic(), len(self._partitions)
        while self._pending:
            await take_turn()  # (also after a worker thread's job or a rest: the lane first)
            if not self._pending:
                break
            events = _Events()
            start, made_new = time.monotonic(), False
            if self._log_threads:
                made_new = await self._adopt_chunk_off_loop(events)
            else:
                deadline = time.monotonic() + ADOPT_SLICE_S
                while self._pending and time.monotonic() < deadline:
                    self._adopt(next(iter(self._pending)), events)
            self._finish(events)
            if made_new:
                await asyncio.sleep((time.monotonic() - start) * (1 / ADOPT_NEW_DUTY - 1))
        log.info("opened %d partitions in %.1f s (%d hosted)",
                 len(self._partitions) - opened, time.monotonic() - began,
                 len(self._partitions))

    async def _adopt_chunk_off_loop(self, events: _Events) -> bool:
        """Give the next pending partitions their roles here, within a slice: a log a topic
        write prepared is registered; a new one's files are made on a worker thread (system
        calls only: :meth:`LogToOpen.make_files`) and its Log built here; a directory
        already there (found at start, to open and maybe recover) is opened on the worker
        threads, :data:`OPEN_CHUNK` at a time. True when new logs were made."""
        chunk: list[tuple[LogToOpen, TopicPartition]] = []
        fresh: list[tuple[int, LogToOpen]] = []
        deadline = time.monotonic() + ADOPT_SLICE_S
        while self._pending and len(chunk) < OPEN_CHUNK and len(fresh) < BUILD_AT_ONCE:
            tp, _ = self._pending.popitem(last=False)
            if self.logs.get(*tp) is not None:  # prepared by a topic write: register it
                self._pending[tp] = None
                self._pending.move_to_end(tp, last=False)
                self._adopt(tp, events)
                if time.monotonic() > deadline:
                    break
                continue
            topic = self._image.topics.get(tp.topic) if self._image is not None else None
            spec = self.logs.to_open(tp, self.topic_config(tp.topic),
                                     topic.topic_id if topic is not None else None)
            self._opening.add(tp)
            if spec.new:
                fresh.append((len(fresh), spec))
            else:
                chunk.append((spec, tp))
        if not chunk and not fresh:
            return False
        opening = asyncio.gather(*(self._run_log_io(spec.open) for spec, _ in chunk),
                                 return_exceptions=True)
        made = await self._run_log_io(partial(self._make_logs, fresh)) if fresh else []
        for _, spec, files in made:
            result: Log | BaseException
            if files is None:  # its directory appeared meanwhile: opened as found
                try:
                    result = await self._run_log_io(spec.open)
                except (OSError, KafkaError) as exc:
                    result = exc
            elif isinstance(files, BaseException):
                result = files
            else:
                try:
                    result = spec.build(files)
                except (OSError, KafkaError) as exc:
                    result = exc
                else:
                    events.changes.add("created", spec.tp, spec.topic_id)
            if isinstance(result, BaseException) and not isinstance(result,
                                                                    (OSError, KafkaError)):
                raise result
            self._opened(spec, spec.tp, result, events)
        for (spec, tp), opened in zip(chunk, await opening, strict=True):
            if isinstance(opened, BaseException) and not isinstance(opened,
                                                                    (OSError, KafkaError)):
                raise opened
            self._opened(spec, tp, opened, events)
        return bool(fresh)

    def _opened(self, spec: LogToOpen, tp: TopicPartition, result: Log | BaseException,
                events: _Events) -> None:
        """A pending partition's log is open (or could not be): give the partition its role,
        unless it was dropped meanwhile (its log is deleted again)."""
        wanted = tp in self._opening
        self._opening.discard(tp)
        if isinstance(result, BaseException):
            if wanted:
                self._cannot_open(tp, result)
            return
        self.logs.register(spec, result)
        if wanted:
            self._pending[tp] = None
            if self._adopt(tp, events) is not None:
                return
        if tp not in self._partitions and tp not in self._prepared:
            self.logs.delete_logs([tp])  # dropped while it was being opened

    def _finish(self, events: _Events) -> None:
        """After role changes: the log changes' report, the fetchers' partitions, waiting
        operations, listeners."""
        events.changes.report(log)
        if events.followed and self.fetching is not None:
            self.fetching.update_followed(events.followed)
        for tp, epoch in events.resigned:
            # Waiting acks=-1 produces and fetches complete now (NOT_LEADER_OR_FOLLOWER), as
            # Kafka's makeFollowers does, instead of at their timeouts: a client whose
            # requests reached the old leader before it learned of the move would otherwise
            # wait out its request timeout.
            self._wake(tp)
            for listener in self._listeners.get(tp.topic, ()):
                listener.on_resign(tp.partition, epoch)
        for tp, epoch in events.became_leader:
            self._wake(tp)
            for listener in self._listeners.get(tp.topic, ()):
                listener.on_become_leader(tp.partition, epoch)

    def _create_partition(self, tp: TopicPartition, topic_id: uuid.UUID, config: TopicConfig,
                          changes: LogChanges) -> Partition:
        """The hosted partition ``tp`` of topic ``topic_id``, on the log this broker has for
        it, or a new one. Whoever made the log (a topic creation prepared it, an earlier run
        left it), it runs with ``config``, the metadata's. A log of another topic id (of a
        topic of the same name deleted meanwhile, which this broker never saw go) is deleted
        first, never served; a log without an id (written before ids were stored) is
        adopted: labelled with ``topic_id``."""
        plog = self.logs.get(tp.topic, tp.partition)
        if plog is not None and plog.topic_id not in (None, topic_id):
            for stray in self.logs.delete_logs([tp]):
                changes.add("deleted", tp, stray.topic_id,
                            f"the name now belongs to topic id {id_text(topic_id)}")
            plog = None
        if plog is None:
            plog = self.logs.create(tp.topic, tp.partition, config, topic_id)
            changes.add("created", tp, topic_id)
        else:
            if plog.topic_id is None:
                plog.assign_topic_id(topic_id)
                changes.add("adopted", tp, topic_id, "written before topic ids were stored")
            plog.update_config(config)
        partition = self.partition_type(tp, topic_id, plog, self.node_id, self.clock,
                                        on_high_watermark=self._on_high_watermark,
                                        on_isr_change=self._on_isr_change,
                                        eligible=self._is_registered)
        partition.initialize_high_watermark(self._restored_hw.get(tp, 0))
        self._partitions[tp] = partition
        return partition

    def _drop_replaced(self, partition: Partition) -> None:
        """Stop hosting ``partition``, whose name belongs to another topic id now.
        Operations waiting on it complete now (NOT_LEADER_OR_FOLLOWER), before the new
        topic's partition takes its place."""
        del self._partitions[partition.tp]
        self._wake(partition.tp)

    def _is_registered(self, broker_id: int) -> bool:
        """A broker may join an ISR only while registered (see Partition's expand rule)."""
        return broker_id in self._registered

    def update_all_configs(self) -> None:
        """Every hosted partition re-reads its topic config (the broker defaults changed)."""
        for topic in sorted({tp.topic for tp in self._partitions}):
            self.update_configs(topic)

    def prepare_partitions(self, topic: TopicInfo, partitions: Sequence[PartitionInfo], *,
                           sync: bool = True) -> list[tuple[str, int]]:
        """Create the logs of the ``partitions`` of ``topic`` that this broker hosts, before
        the metadata write that adds them; all or nothing. On failure the logs created here
        are deleted again and KAFKA_STORAGE_ERROR is raised, naming the partition and the
        cause. Returns the partitions whose logs were created (existing ones are kept).
        Without ``sync`` the data directory is fsynced by :meth:`sync_prepared` instead."""
        config = TopicConfig(self.logs.broker_config, validate_topic_configs(topic.configs))
        created: list[tuple[str, int]] = []
        tp = TopicPartition(topic.name, -1)
        try:
            for info in partitions:
                tp = TopicPartition(topic.name, info.partition)
                if self.node_id in info.replicas and self.logs.get(*tp) is None:
                    self.logs.create(tp.topic, tp.partition, config, topic.topic_id,
                                     sync_dir=sync)
                    created.append(tp)
                    self._prepared.add(tp)
        except (OSError, KafkaError) as exc:
            self.discard_partitions(created)
            if isinstance(exc, OSError):
                self.health.failure(exc, f"creating the log of {tp}")
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            log.warning("cannot create the log of %s in %s, nothing of the topic's new "
                        "partitions was kept: %s", tp, self.logs.data_dir, reason)
            raise KafkaStorageError(f"cannot create the log of partition {tp}: {reason}"
                                    ) from exc
        if created:
            changes = LogChanges()
            for name, number in created:
                changes.add("created", TopicPartition(name, number), topic.topic_id)
            changes.report(log)
        return created

    def sync_prepared(self) -> None:
        """fsync the data directory once for logs prepared with ``sync=False``."""
        self.logs.sync_dir()

    async def prepare_new(self, topics: Sequence[tuple[TopicInfo, Sequence[PartitionInfo]]]
                          ) -> list[list[tuple[str, int]] | KafkaError]:
        """:meth:`prepare_partitions` for each of ``topics`` without the directory fsync
        (:meth:`sync_new`), all or nothing per topic: each topic's outcome is what it
        created or, when one of its logs could not be created (nothing of it is kept then),
        its KAFKA_STORAGE_ERROR. With ``log_threads``, a new log's directory and files (two
        small ones, nothing fsynced) are made on the worker threads in jobs of up to
        :data:`OPEN_CHUNK` and its :class:`Log` built on the event loop in slices of at most
        :data:`CREATE_SLICE_S`; a directory already there (found at start, to open and maybe
        recover) is opened on the worker threads in jobs of up to :data:`OPEN_CHUNK` logs (a
        bounded job lets a stop cancel the rest)."""
        outcomes: list[list[tuple[str, int]] | KafkaError] = []
        if not self._log_threads:
            for topic, partitions in topics:
                try:
                    outcomes.append(self.prepare_partitions(topic, partitions, sync=False))
                except KafkaError as exc:
                    outcomes.append(exc)
            return outcomes
        work: list[tuple[int, LogToOpen]] = []
        configs: dict[frozenset[tuple[str, str]], TopicConfig] = {}  # topics alike share one
        deadline = time.perf_counter() + CREATE_SLICE_S
        for index, (topic, partitions) in enumerate(topics):
            key = frozenset(topic.configs.items())
            config = configs.get(key)
            if config is None:
                config = configs[key] = TopicConfig(self.logs.broker_config,
                                                    validate_topic_configs(topic.configs))
            work += [(index, self.logs.to_open(tp, config, topic.topic_id)) for tp in (
                TopicPartition(topic.name, p.partition) for p in partitions
                if self.node_id in p.replicas) if self.logs.get(*tp) is None]
            if time.perf_counter() > deadline:
                await take_turn()
                deadline = time.perf_counter() + CREATE_SLICE_S
        # A new log's directory and files are made on the worker threads (system calls
        # only) and its Log built here, in slices; a directory already there (found at
        # start, to open and maybe recover) is opened on the threads.
        here = [item for item in work if item[1].new]
        there = [item for item in work if not item[1].new]
        done: list[list[tuple[int, LogToOpen, Log | BaseException]]] = []
        made: list[tuple[int, LogToOpen, io.FileIO | BaseException | None]] = []
        jobs: list[asyncio.Future[list[tuple[int, LogToOpen, Log | BaseException]]]] = []
        makers: list[asyncio.Future[list[tuple[int, LogToOpen, io.FileIO | BaseException
                                              | None]]]] = []
        try:
            # One job at a time: a thread making files takes a core for their system calls'
            # kernel time and the GIL between them; with four at once a healthy producer's
            # p99 during a burst was 7-14 ms against 5-7 ms (docs/benchmarks.md).
            for i in range(0, len(here), OPEN_CHUNK):
                makers = [self._run_log_io(partial(self._make_logs, here[i:i + OPEN_CHUNK]))]
                made += await makers[0]
            makers = []  # their files are in ``made`` now, taken from it as logs are built
            there += [(index, spec) for index, spec, files in made if files is None]
            size = max(1, min(OPEN_CHUNK, -(-len(there) // self._log_threads)))
            jobs = [self._run_log_io(partial(_each, there[i:i + size], LogToOpen.open))
                    for i in range(0, len(there), size)]
            await _build_in_slices(made, done)
            done += await asyncio.gather(*jobs)
        except asyncio.CancelledError:
            # (the broker stops) jobs not started are dropped; what finished is removed
            # again; a job still running leaves its few logs as strays, which the next start
            # deletes (no metadata names them)
            for maker in makers:
                if maker.done() and not maker.cancelled() and maker.exception() is None:
                    made += maker.result()
            _unmake(made)
            done += [job.result() for job in jobs
                     if job.done() and not job.cancelled() and job.exception() is None]
            built = [spec.tp for share in done for _, spec, result in share
                     if not isinstance(result, BaseException)
                     and self.logs.register(spec, result) is result]
            self.discard_partitions(built)
            raise
        created: list[list[tuple[str, int]]] = [[] for _ in topics]
        failures: dict[int, tuple[TopicPartition, BaseException]] = {}
        for index, spec, result in (item for share in done for item in share):
            if isinstance(result, BaseException):
                failures.setdefault(index, (spec.tp, result))
                continue
            self.logs.register(spec, result)
            created[index].append(spec.tp)
            self._prepared.add(spec.tp)
        await take_turn()
        unexpected = [exc for _, exc in failures.values()
                      if not isinstance(exc, (OSError, KafkaError))]
        if unexpected:
            self.discard_partitions([tp for made in created for tp in made])
            raise unexpected[0]
        outcomes += created
        changes = LogChanges()
        for index, names in enumerate(created):
            for name, number in names:
                changes.add("created", TopicPartition(name, number), topics[index][0].topic_id)
        await run_in_slices(changes.report_steps(log))
        for index, (tp, failure) in sorted(failures.items()):
            self.discard_partitions(created[index])
            if isinstance(failure, OSError):
                self.health.failure(failure, f"creating the log of {tp}")
            reason = (failure.strerror if isinstance(failure, OSError) and failure.strerror
                      else str(failure))
            log.warning("cannot create the log of %s in %s, nothing of the topic's new "
                        "partitions was kept: %s", tp, self.logs.data_dir, reason)
            outcomes[index] = KafkaStorageError(
                f"cannot create the log of partition {tp}: {reason}")
        return outcomes

    async def sync_new(self) -> None:
        """:meth:`sync_prepared` on a worker thread (``log_threads``)."""
        if not self._log_threads:
            self.sync_prepared()
            return
        await self._run_log_io(self.logs.sync_dir)

    def _make_logs(self, share: Sequence[tuple[int, LogToOpen]]
                   ) -> list[tuple[int, LogToOpen, io.FileIO | BaseException | None]]:
        """:meth:`LogToOpen.make_files` for each of ``share`` (a worker thread's job): by the
        log maker process for :data:`MAKER_MIN` logs or more, else here; one outcome per
        log, as :func:`_each` gives them. A log maker that fails is not used again (a
        directory it made before is found and opened as an existing one)."""
        maker = self._maker
        if maker is None or len(share) < MAKER_MIN:
            return _each(share, LogToOpen.make_files)
        try:
            outcomes = maker.make([spec.files_to_make() for _, spec in share])
        except LogMakerGone as exc:
            log.warning("new logs are made by the broker's own threads from now on: %s", exc)
            self._maker = None
            maker.close()
            return _each(share, LogToOpen.make_files)
        out: list[tuple[int, LogToOpen, io.FileIO | BaseException | None]] = []
        for (index, spec), outcome in zip(share, outcomes, strict=True):
            if outcome is None:
                try:
                    out.append((index, spec, spec.open_made()))
                except Exception as exc:
                    out.append((index, spec, exc))
            else:  # False: the directory was there (opened as found); or its OSError
                out.append((index, spec, None if outcome is False else outcome))
        return out

    def _run_log_io(self, job: Callable[[], T]) -> asyncio.Future[T]:
        if self._log_io is None:
            self._log_io = ThreadPoolExecutor(self._log_threads,
                                              thread_name_prefix="strom-log-io")
        return asyncio.get_running_loop().run_in_executor(self._log_io, job)

    def discard_partitions(self, prepared: Sequence[tuple[str, int]]) -> None:
        """Delete logs :meth:`prepare_partitions` created for a write that did not happen
        (only those no hosted partition uses)."""
        tps = [TopicPartition(topic, partition) for topic, partition in prepared]
        self._prepared.difference_update(tps)
        changes = LogChanges()
        for gone in self.logs.delete_logs([tp for tp in tps if tp not in self._partitions
                                           and tp not in self._pending]):
            changes.add("deleted", TopicPartition(gone.topic, gone.partition), gone.topic_id,
                        "the topic's creation did not happen")
        changes.report(log)

    def update_configs(self, topic: str) -> None:
        config = self.topic_config(topic)
        for tp, partition in self._partitions.items():
            if tp.topic == topic:
                partition.log.update_config(config)
                partition.min_insync_replicas = int(config.get("min.insync.replicas"))

    # ------------------------------------------------------------------------------------
    # the write path
    # ------------------------------------------------------------------------------------
    def append(
        self,
        entries: Mapping[TopicPartition, memoryview | None],
        *,
        required_acks: int,
        origin: AppendOrigin,
        timeout_ms: int,
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> AppendOutcome:
        """Append to each partition (all or nothing per partition); see the module docstring.

        ``None`` records (a partition the request could not decode) fail with CORRUPT_MESSAGE.
        ``verification_guards``: the KIP-890 guard of each partition whose producer's first
        transactional batch there was verified with its coordinator.

        The outcome is exact per partition, whatever fails (Kafka's ``appendToLocalLog``): a
        partition whose records reached its log is answered with their offsets (then its
        acknowledgement's outcome), one refused with its error — an unexpected exception
        UNKNOWN_SERVER_ERROR, logged —, and nothing escapes once a partition took records.
        """
        results: dict[TopicPartition, PartitionAppendResult] = {}
        pending: dict[TopicPartition, PendingAck] = {}
        acks_valid = required_acks in (-1, 0, 1)
        guards = verification_guards or {}
        for tp, records in entries.items():
            result = PartitionAppendResult()
            results[tp] = result
            partition = self.partition(tp)
            if not acks_valid:
                result.error = InvalidRequiredAcksError(f"invalid required acks {required_acks}")
            elif partition is None and tp in self._offline:
                result.error = KafkaStorageError(f"the log of {tp} is offline")
            elif partition is None and self.opening(tp):  # retriable: a moment later
                result.error = NotLeaderOrFollowerError(f"the log of {tp} is being opened")
            elif partition is None:
                result.error = UnknownTopicOrPartitionError(
                    f"this broker hosts no partition {tp}")
            elif records is None:
                result.error = CorruptMessageError(f"unreadable records for {tp}")
            elif partition.internal and origin is AppendOrigin.CLIENT:
                result.error = InvalidTopicError(f"Cannot append to internal topic {tp.topic}")
            else:
                wait = self._append_one(partition, records, required_acks, origin, result,
                                        guards.get(tp))
                if wait is not None and required_acks != 0:
                    pending[tp] = wait
        try:
            settle(pending, results, self)  # most appends are acknowledged at once
        except Exception:
            log.exception("checking the acknowledgements of an append failed")
        if not pending:
            return AppendOutcome(results, None)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.produce_purgatory.watch(
            DelayedProduce(timeout_ms, pending, results, self, future), list(pending))
        return AppendOutcome(results, future)

    def _append_one(
        self, partition: Partition, records: memoryview, required_acks: int,
        origin: AppendOrigin, result: PartitionAppendResult,
        guard: VerificationGuard | None = None,
    ) -> PendingAck | None:
        """Append to one partition and fill ``result``; what its acknowledgement waits for.
        Refusals (nothing appended) become ``result.error``; once the log took the records
        nothing here fails the partition."""
        tp = partition.tp
        end_before = partition.log.log_end_offset
        hw_before = partition.high_watermark
        try:
            if origin is AppendOrigin.REPLICATION:
                appended = partition.append_as_follower(records)
            else:
                appended = partition.append_as_leader(records, required_acks, origin, guard)
        except Exception as exc:
            end_after = partition.log.log_end_offset
            if end_after <= end_before:  # refused: nothing is in the log
                result.error = self._refusal(tp, exc)
                return None
            # The records are in the log although the append raised (bookkeeping after
            # the write failed): they are answered as what they are, appended.
            log.error("%s: the append of offsets %d-%d raised after the records were "
                      "written; answered as appended", tp, end_before, end_after - 1,
                      exc_info=exc)
            appended = AppendResult(end_before, end_after - 1, -1, partition.log_start_offset,
                                    0, False)
            try:
                partition.maybe_increment_high_watermark()  # as a completed append does
            except Exception:
                log.exception("%s: moving the high watermark failed", tp)
        self.health.succeeded()
        result.base_offset = appended.base_offset
        result.last_offset = appended.last_offset
        result.log_append_time = appended.log_append_time
        result.log_start_offset = appended.log_start_offset
        try:
            return self._after_append(partition, appended, required_acks, origin,
                                      partition.high_watermark != hw_before)
        except Exception:
            log.exception("%s: bookkeeping after an append failed", tp)
            # still wait for what the acks ask: the records are in the log
            return PendingAck(appended.last_offset + 1, required_acks == -1
                              and origin is not AppendOrigin.REPLICATION, False)

    def _refusal(self, tp: TopicPartition, exc: Exception) -> KafkaError:
        """The error a refused append is answered with."""
        if isinstance(exc, OSError):
            return self.health.failure(exc, f"appending to {tp}")
        if isinstance(exc, KafkaError):
            log.debug("append to %s refused: %s", tp, exc)
            return exc
        log.error("append to %s failed unexpectedly; nothing was appended", tp, exc_info=exc)
        return UnknownServerError(f"unexpected error appending to {tp}: {exc!r}")

    def _after_append(self, partition: Partition, appended: AppendResult, required_acks: int,
                      origin: AppendOrigin, hw_moved: bool) -> PendingAck | None:
        """Wake followers' fetches (a high-watermark move woke every fetch already), start
        the fsync round the flush policy asks for; what the acknowledgement waits for."""
        if not appended.duplicate and not hw_moved:
            self.fetch_purgatory.check_and_complete(partition.tp)  # followers read to the LEO
            self.watchers.changed(partition.tp)
        required = appended.last_offset + 1
        plog = partition.log
        flush = plog.needs_flush()
        if flush:
            self.flusher.request(plog, plog.log_end_offset)
        wait_hw = required_acks == -1 and origin is not AppendOrigin.REPLICATION
        if not (wait_hw or flush):
            return None
        return PendingAck(required, wait_hw, flush)

    def check_ack(self, tp: TopicPartition, pending: PendingAck) -> tuple[bool, KafkaError | None]:
        partition = self._partitions.get(tp)
        if partition is None:
            return True, NotLeaderOrFollowerError(f"{tp} is no longer hosted by this broker")
        if pending.wait_for_flush and partition.log.recovery_point < pending.required_offset:
            return False, None
        if pending.wait_for_high_watermark:
            return partition.check_enough_replicas_reach_offset(pending.required_offset)
        return True, None

    def _on_high_watermark(self, tp: TopicPartition) -> None:
        self._wake(tp)

    # ------------------------------------------------------------------------------------
    # replication: the followers' side and the leaders' ISR changes
    # ------------------------------------------------------------------------------------
    def follower(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition ``tp`` if this broker follows it (FollowerLogs)."""
        partition = self._partitions.get(tp)
        return None if partition is None or partition.is_leader else partition

    def append_fetched(self, partition: Partition, records: memoryview) -> None:
        """Append what a follower fetched (FollowerLogs); raises the append's error."""
        # acks=0: nothing waits (a flush.messages round still runs, unawaited).
        outcome = self.append({partition.tp: records}, required_acks=0,
                              origin=AppendOrigin.REPLICATION, timeout_ms=0)
        error = outcome.results[partition.tp].error
        if error is not None:
            raise error

    def storage_failed(self, exc: OSError, doing: str) -> None:
        """A follower's truncation or log-start move failed on disk (FollowerLogs): the
        data directory's health reports it, as a failed append's."""
        self.health.failure(exc, doing)

    def _on_isr_change(self, change: IsrChange) -> None:
        if self.isr_writer is None:
            log.debug("%s: no ISR writer; dropping the proposed ISR %s", change.tp,
                      sorted(change.isr))
            self.isr_change_failed(change)
            return
        self.isr_writer.submit(change)

    def isr_change_written(self, change: IsrChange, metadata_epoch: int) -> None:
        """The write of ``change`` happened; images from ``metadata_epoch`` on hold it (or
        a later change)."""
        partition = self._partitions.get(change.tp)
        if partition is not None:
            partition.isr_change_written(change, metadata_epoch)

    def isr_change_failed(self, change: IsrChange) -> None:
        """The write of ``change`` did not happen (the partition may propose again)."""
        partition = self._partitions.get(change.tp)
        if partition is not None:
            partition.isr_change_failed(change)

    def shrink_isrs(self, max_lag_ms: int) -> int:
        """Every led partition drops the followers lagging more than ``max_lag_ms`` from its
        ISR (Kafka's periodic ``maybeShrinkIsr``); returns how many proposed a change."""
        return sum(1 for p in list(self._partitions.values())
                   if p.is_leader and p.maybe_shrink_isr(max_lag_ms))

    def _wake(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        self.watchers.changed(tp)

    def _on_flushed(self, flushed: Flushable, error: BaseException | None) -> None:
        tp = TopicPartition(flushed.topic, flushed.partition)
        if error is not None:
            kafka_error = (self.health.failure(error, f"flushing {tp}")
                           if isinstance(error, OSError) else as_kafka_error(error))
            for operation in self.produce_purgatory.watching(tp):
                if isinstance(operation, DelayedProduce):
                    operation.fail(tp, kafka_error, flushed.recovery_point)
        self.produce_purgatory.check_and_complete(tp)

    # ------------------------------------------------------------------------------------
    # parked fetches
    # ------------------------------------------------------------------------------------
    def park_fetch(self, operation: DelayedFetch[Any], partitions: Iterable[TopicPartition]
                   ) -> None:
        """Watch a fetch that has just found too little data under its partitions."""
        self.fetch_purgatory.watch(operation, partitions)

    # ------------------------------------------------------------------------------------
    # high-watermark checkpoint
    # ------------------------------------------------------------------------------------
    def _read_hw_checkpoint(self) -> dict[TopicPartition, int]:
        try:
            return read_offsets(self._checkpoint_path)
        except (CorruptFileError, OSError) as exc:
            # Losing it only delays consumers until the high watermark is re-established.
            log.warning("ignoring unreadable %s: %s", self._checkpoint_path.name, exc)
            return {}

    def checkpoint_high_watermarks(self) -> None:
        """Write every hosted partition's high watermark (Kafka's checkpoint format)."""
        offsets = {tp: self._restored_hw[tp] for tp in self._pending
                   if tp in self._restored_hw}  # not opened yet: as restored
        offsets.update((tp, p.high_watermark) for tp, p in self._partitions.items())
        write_offsets(self._checkpoint_path, offsets)

    async def shutdown(self) -> None:
        """Stop opening pending partitions, answer parked operations, finish the fsync
        rounds, checkpoint high watermarks."""
        adopter, self._adopter = self._adopter, None
        if adopter is not None:
            adopter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await adopter
        if self._log_io is not None:
            # the logs still being opened finish; the log manager closes what it holds
            self._log_io.shutdown(wait=True, cancel_futures=True)
            self._log_io = None
        if self._maker is not None:
            self._maker.close()
        self.fetch_purgatory.shutdown()
        await self.flusher.close()
        self.produce_purgatory.shutdown()
        try:
            self.checkpoint_high_watermarks()
        except OSError as exc:
            self.health.failure(exc, f"writing {REPLICATION_OFFSET_CHECKPOINT}")


def _each(share: Sequence[tuple[int, LogToOpen]], step: Callable[[LogToOpen], R]
          ) -> list[tuple[int, LogToOpen, R | BaseException]]:
    """``step`` (:meth:`LogToOpen.make_files` or :meth:`LogToOpen.open`) for each of
    ``share``, one after another on a worker thread; each outcome is what it returned or
    raised (reported per log, by the caller)."""
    out: list[tuple[int, LogToOpen, R | BaseException]] = []
    for index, spec in share:
        try:
            out.append((index, spec, step(spec)))
        except Exception as exc:
            out.append((index, spec, exc))
    return out


async def _build_in_slices(made: list[tuple[int, LogToOpen, io.FileIO | BaseException | None]],
                           done: list[list[tuple[int, LogToOpen, Log | BaseException]]]
                           ) -> None:
    """Build the logs whose files ``made`` holds on the event loop, taking each from
    ``made`` and adding its outcome to ``done`` (a cancellation leaves in ``made`` what was
    not built); a failure to make the files is its outcome. A slice runs for at most
    :data:`CREATE_SLICE_S` (at least one log), then the loop takes a turn."""
    while made:
        await take_turn()  # after the worker threads' job too: the lane first
        deadline = time.perf_counter() + CREATE_SLICE_S
        share: list[tuple[int, LogToOpen, Log | BaseException]] = []
        taken = 0
        while taken < len(made) and (not share or time.perf_counter() < deadline):
            index, spec, files = made[taken]
            taken += 1
            if files is None:
                continue  # opened on the threads
            if isinstance(files, BaseException):
                share.append((index, spec, files))
                continue
            try:
                share.append((index, spec, spec.build(files)))
            except Exception as exc:  # reported per log, by the caller
                share.append((index, spec, exc))
        del made[:taken]
        done.append(share)


def _unmake(made: Sequence[tuple[int, LogToOpen, io.FileIO | BaseException | None]]) -> None:
    """Remove what :meth:`LogToOpen.make_files` made and no log was built on."""
    for _, spec, files in made:
        if isinstance(files, io.FileIO):
            files.close()
            remove_new_log_dir(spec.directory)
