"""The coordinator runtime: one replayed state machine (a *shard*) per internal-topic partition.

A coordinator (the group coordinator today, the transaction coordinator next) keeps its state
in an internal topic (``__consumer_offsets``, ``__transaction_state``). Each partition of that
topic is one shard: the shard for partition *p* exists on this broker exactly while this
broker leads *p*. The runtime is the topic's leadership listener
(:class:`strom.replication.replica_manager.LeadershipListener`; the broker registers it with
``ReplicaManager.add_leadership_listener``, which also reports the partitions led already):

* ``on_become_leader(p, epoch)`` creates the shard in state **LOADING**, tagged with the
  leader epoch, and starts an asyncio task that replays the partition from its log start to
  its log end (through :meth:`PartitionWriter.read_batches`), yielding to the event loop
  between chunks of :data:`LOAD_CHUNK_RECORDS` records. When the replay ends the shard becomes
  **ACTIVE** and :meth:`CoordinatorShard.on_loaded` starts its timers. A load whose shard was
  replaced meanwhile (resigned, or re-elected with a newer epoch while loading) is *stale* and
  is discarded without touching the new shard. A load that raises leaves the shard **FAILED**.
* ``on_resign(p, epoch)`` unloads the shard (if its epoch is not newer): it stops being
  reachable, :meth:`CoordinatorShard.on_unloaded` cancels its timers and answers parked
  requests NOT_COORDINATOR, then the failure continuations of its pending writes run with
  NOT_COORDINATOR (the shard is closed by then: they only answer their clients).
* A newer epoch while the shard is ACTIVE only updates the tag (this broker stayed the
  leader, so the state still matches the log); while LOADING it restarts the load.

Requests reach a shard through :meth:`CoordinatorRuntime.shard`, which raises
COORDINATOR_LOAD_IN_PROGRESS while it loads and NOT_COORDINATOR when the partition is not led
here (or its load failed).

**Writes: replay at commit.** An operation validates against the shard's current state and
hands the runtime its records plus continuations (:meth:`ShardContext.write`). The runtime
builds the records into one v2 batch (producer id, epoch, transactional and control flags as
given) and appends it through the :class:`PartitionWriter` seam. Only when the write is
*committed* (the high watermark passed it and it is durable per the flush policy) does the
runtime replay the records into the shard — **in offset order**: writes complete in the order
they were appended, a committed write waits for every earlier one to resolve — and then run
``on_commit``. The shard's memory is therefore always what replaying its partition up to the
last completed write gives (Kafka's ``CoordinatorRuntime`` keeps the same invariant with a
snapshot registry it reverts on failure):

* an append **refused** (nothing in the log: not the leader, ISR too small, too large …)
  runs ``on_failure`` at once and changes nothing;
* an append **in the log** stays pending until the writer resolves it. It is never "failed"
  by time: at ``write_timeout_ms`` the runtime runs its ``on_timeout`` (Kafka's
  ``offsets.commit.timeout.ms``: the client is answered REQUEST_TIMED_OUT, mapped to
  COORDINATOR_NOT_AVAILABLE), but the write stays queued and is replayed — and its
  ``on_commit`` runs — when it commits later, as a replay of the log would have it;
* the writer gives up on an appended write only when it can no longer tell whether the
  records will commit (an fsync round failed, leadership moved). Then the shard cannot know
  what its log holds: the runtime **reloads** it from the log at the same epoch (pending
  writes fail with NOT_COORDINATOR, the failed one with its error; meanwhile
  COORDINATOR_LOAD_IN_PROGRESS), which is what Kafka's broker does by moving the failed
  partition elsewhere. A partition no longer led here just unloads.

Continuations: exactly one of ``on_commit`` (replayed) and ``on_failure`` (never replayed in
this shard) runs per write; ``on_timeout`` at most once, before it. An operation that
answers its client at the timeout keeps its in-memory marks (pending transitions, offsets in
flight) until the write resolves, and answers only once (:func:`answer_once`).

Invariants:

* Durable state changes only in :meth:`CoordinatorShard.replay`; replay of live writes
  happens in log-offset order, exactly once per committed write, never for one that is not
  in the log; a write whose fate cannot be known any more costs the shard a reload.
* Continuations run on the event-loop thread, one at a time; an exception in one is logged
  and does not affect the others. A continuation may issue further writes.
* After unload no continuation of that shard runs except the NOT_COORDINATOR failures
  delivered by the unload itself; a write issued then fails at once with NOT_COORDINATOR.

:func:`coordinator_error` maps a failed write to the code a client sees, as Kafka's
coordinators do. Owned by the broker's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from strom.common.clock import Clock
from strom.common.errors import KafkaError, UnknownServerError, error_class
from strom.common.timer import Scheduler, TimerHandle
from strom.common.types import TopicPartition
from strom.protocol.records.builder import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, BatchBuilder
from strom.protocol.records.reader import decode_batches
from strom.storage.txn_verification import VerificationGuard

log = logging.getLogger("strom.coordinator.runtime")

#: Records replayed between two yields to the event loop while a shard loads.
LOAD_CHUNK_RECORDS = 2000

RawRecord = tuple[bytes | None, bytes | None]


class ReplayRecord(NamedTuple):
    """One record of the internal topic as a shard replays it (its batch's producer id,
    epoch and control flag travel with it, for transactional offset commits)."""

    offset: int
    producer_id: int
    producer_epoch: int
    is_control: bool
    key: bytes | None
    value: bytes | None


def replay_records(buf: bytes | bytearray | memoryview) -> Iterator[list[ReplayRecord]]:
    """The records of each complete v2 batch in ``buf``, one list per batch."""
    for header, records in decode_batches(buf):
        pid, epoch, control = header.producer_id, header.producer_epoch, header.is_control
        yield [ReplayRecord(r.offset, pid, epoch, control, r.key, r.value) for r in records]


class PartitionWriter(Protocol):
    """How the runtime reaches its internal topic (the broker: the replica manager)."""

    def append(self, tp: TopicPartition, batch: bytes, *,
               verification_guard: VerificationGuard | None = None
               ) -> int | asyncio.Future[int]:
        """Append one batch as the partition's leader. Raises KafkaError if nothing was
        appended. Returns the batch's last offset if it is already committed (high watermark
        past it and durable per the flush policy), else a future resolving with it once it
        is. The future fails only when the writer can no longer tell whether the records
        will commit here — leadership moved (NOT_LEADER_OR_FOLLOWER) or an fsync round
        failed (KAFKA_STORAGE_ERROR) — never by time: the runtime times out its answers, not
        its writes. ``verification_guard``: a transactional batch's KIP-890 guard."""
        ...

    def read_batches(self, tp: TopicPartition) -> Iterator[list[ReplayRecord]]:
        """Every record from the log start to the log end, one list per batch, read lazily
        (the loader may stop early); raises if this broker does not lead ``tp``."""
        ...


class CoordinatorShard(Protocol):
    """The state machine of one partition (see the module docstring for the contract)."""

    def replay(self, record: ReplayRecord) -> None:
        """Apply one committed record; the only place durable state changes."""
        ...

    def on_loaded(self) -> None:
        """The partition has been replayed; the shard serves requests from now on."""
        ...

    def on_unloaded(self) -> None:
        """The shard is gone: cancel timers, answer parked requests NOT_COORDINATOR. The
        failure continuations of writes still pending run after this."""
        ...


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


S = TypeVar("S", bound=CoordinatorShard)


# -- error mapping -------------------------------------------------------------------------
def _codes(*names: str) -> frozenset[int]:
    return frozenset(error_class(name).code for name in names)


_NOT_AVAILABLE = _codes("UNKNOWN_TOPIC_OR_PARTITION", "NOT_ENOUGH_REPLICAS",
                        "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT")
_NOT_COORDINATOR = _codes("NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR")
_TOO_LARGE = _codes("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")
_NETWORK = error_class("NETWORK_EXCEPTION").code
NotCoordinatorError = error_class("NOT_COORDINATOR")
NotLeaderOrFollowerError = error_class("NOT_LEADER_OR_FOLLOWER")
CoordinatorLoadInProgressError = error_class("COORDINATOR_LOAD_IN_PROGRESS")
RequestTimedOutError = error_class("REQUEST_TIMED_OUT")
COORDINATOR_NOT_AVAILABLE = error_class("COORDINATOR_NOT_AVAILABLE").code
NOT_COORDINATOR = NotCoordinatorError.code
COORDINATOR_LOAD_IN_PROGRESS = CoordinatorLoadInProgressError.code
INVALID_COMMIT_OFFSET_SIZE = error_class("INVALID_COMMIT_OFFSET_SIZE").code
UNKNOWN_SERVER_ERROR = UnknownServerError.code


def coordinator_error(exc: BaseException, *, offset_commit: bool = False) -> int:
    """The error a client gets for a failed coordinator write (Kafka's
    ``CoordinatorOperationExceptionHelper`` / ``GroupMetadataManager``): the log's errors
    become coordinator errors the client knows how to retry; too-large writes become
    UNKNOWN_SERVER_ERROR, or INVALID_COMMIT_OFFSET_SIZE for an OffsetCommit."""
    if not isinstance(exc, KafkaError):
        return UNKNOWN_SERVER_ERROR
    code = exc.code
    if code in _NOT_AVAILABLE:
        return COORDINATOR_NOT_AVAILABLE
    if code in _NOT_COORDINATOR:
        return NOT_COORDINATOR
    if code in _TOO_LARGE:
        return INVALID_COMMIT_OFFSET_SIZE if offset_commit else UNKNOWN_SERVER_ERROR
    if code == _NETWORK:  # transaction verification: retried without a coordinator lookup
        return COORDINATOR_LOAD_IN_PROGRESS
    return code if code != 0 else UNKNOWN_SERVER_ERROR


# -- the runtime -----------------------------------------------------------------------------
T = TypeVar("T")


def answer_once(callback: Callable[[T], None]) -> Callable[[T], None]:
    """``callback`` that runs for the first answer only (an operation answered at its write's
    timeout is not answered again when the write resolves)."""
    answered = False

    def answer(value: T) -> None:
        nonlocal answered
        if not answered:
            answered = True
            callback(value)
    return answer


@dataclass(slots=True, eq=False)
class _PendingWrite:
    records: Sequence[RawRecord]
    producer_id: int
    producer_epoch: int
    control: bool
    on_commit: Callable[[], None]
    on_failure: Callable[[KafkaError], None]
    on_timeout: Callable[[KafkaError], None] | None
    last_offset: int = -1
    resolved: bool = False
    timer: TimerHandle | None = None


@dataclass(slots=True, eq=False)
class _Slot(Generic[S]):
    """One partition's shard and its bookkeeping (replaced whole on each (re)load)."""

    tp: TopicPartition
    epoch: int
    state: ShardState
    shard: S | None = None
    context: ShardContext | None = None
    load_task: asyncio.Task[None] | None = None
    pending: collections.deque[_PendingWrite] = field(default_factory=collections.deque)
    draining: bool = False


class ShardContext:
    """What a shard may use of the runtime: its partition, epoch and write path."""

    __slots__ = ("_runtime", "_slot")

    def __init__(self, runtime: CoordinatorRuntime[S], slot: _Slot[S]) -> None:
        self._runtime = runtime
        self._slot = slot

    @property
    def partition(self) -> int:
        return self._slot.tp.partition

    @property
    def epoch(self) -> int:
        return self._slot.epoch

    def write(
        self, records: Sequence[RawRecord], *, on_commit: Callable[[], None],
        on_failure: Callable[[KafkaError], None],
        on_timeout: Callable[[KafkaError], None] | None = None,
        producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
        transactional: bool = False, control: bool = False,
        verification_guard: VerificationGuard | None = None,
    ) -> None:
        """Append ``records`` as one batch; replay them and run ``on_commit`` once committed,
        or run ``on_failure`` (possibly before this returns) if they will never be replayed
        here; ``on_timeout`` if neither happened within the write timeout (the write stays
        pending). See the module docstring."""
        self._runtime._write(self._slot, records, on_commit, on_failure, on_timeout,
                             producer_id, producer_epoch, transactional, control,
                             verification_guard)


class CoordinatorRuntime(Generic[S]):
    """The shards of one internal topic on this broker (see the module docstring).

    Lifecycle: built by the broker, registered as the topic's leadership listener; shards come
    and go with leadership; :meth:`close` unloads every shard at shutdown.
    """

    def __init__(
        self, topic: str, writer: PartitionWriter, clock: Clock,
        shard_factory: Callable[[ShardContext], S], *, scheduler: Scheduler,
        write_timeout_ms: int = 5000, loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.topic = topic
        self._writer = writer
        self._clock = clock
        self._scheduler = scheduler
        self._factory = shard_factory
        self._write_timeout_ms = write_timeout_ms
        self._loop = loop
        self._slots: dict[int, _Slot[S]] = {}

    # -- access ------------------------------------------------------------------------------
    def state(self, partition: int) -> ShardState | None:
        slot = self._slots.get(partition)
        return None if slot is None else slot.state

    def epoch(self, partition: int) -> int | None:
        slot = self._slots.get(partition)
        return None if slot is None else slot.epoch

    def shard(self, partition: int) -> S:
        """The ACTIVE shard of ``partition``; raises COORDINATOR_LOAD_IN_PROGRESS while it
        loads, NOT_COORDINATOR if it is not led here."""
        slot = self._slots.get(partition)
        if slot is None or slot.state is not ShardState.ACTIVE or slot.shard is None:
            if slot is not None and slot.state is ShardState.LOADING:
                raise CoordinatorLoadInProgressError(
                    f"{self.topic}-{partition} is loading (epoch {slot.epoch})")
            raise NotCoordinatorError(f"{self.topic}-{partition} is not led by this broker")
        return slot.shard

    def active_shards(self) -> list[S]:
        return [s.shard for s in self._slots.values()
                if s.state is ShardState.ACTIVE and s.shard is not None]

    def any_loading(self) -> bool:
        return any(s.state is ShardState.LOADING for s in self._slots.values())

    async def wait_loaded(self, partition: int) -> None:
        """Until ``partition`` is not loading any more (tests, start-up)."""
        while True:
            slot = self._slots.get(partition)
            if slot is None or slot.load_task is None:
                return
            await asyncio.wait([slot.load_task])

    # -- leadership ----------------------------------------------------------------------------
    def on_become_leader(self, partition: int, leader_epoch: int) -> None:
        slot = self._slots.get(partition)
        if slot is not None and slot.state is not ShardState.FAILED:
            if slot.epoch >= leader_epoch:
                log.debug("%s-%d: already %s at epoch %d (asked %d)", self.topic, partition,
                          slot.state.value, slot.epoch, leader_epoch)
                return
            if slot.state is ShardState.ACTIVE:
                # Still the leader, so the shard still matches the log: keep it.
                log.info("%s-%d: leader epoch %d -> %d, shard kept", self.topic, partition,
                         slot.epoch, leader_epoch)
                slot.epoch = leader_epoch
                return
        if slot is not None:
            self._unload(slot)  # a LOADING shard of an older epoch: its load becomes stale
        self._start_load(partition, leader_epoch)

    def on_resign(self, partition: int, leader_epoch: int | None) -> None:
        slot = self._slots.get(partition)
        if slot is None:
            return
        if leader_epoch is not None and slot.epoch > leader_epoch:
            log.info("%s-%d: resign at epoch %d ignored (shard at %d)", self.topic, partition,
                     leader_epoch, slot.epoch)
            return
        log.info("%s-%d: unloading (epoch %d)", self.topic, partition, slot.epoch)
        self._unload(slot)

    def close(self) -> None:
        """Unload every shard (broker shutdown)."""
        for slot in list(self._slots.values()):
            self._unload(slot)

    # -- loading -----------------------------------------------------------------------------
    def _start_load(self, partition: int, epoch: int) -> None:
        slot: _Slot[S] = _Slot(TopicPartition(self.topic, partition), epoch, ShardState.LOADING)
        slot.context = ShardContext(self, slot)
        slot.shard = self._factory(slot.context)
        self._slots[partition] = slot
        loop = self._loop or asyncio.get_running_loop()
        slot.load_task = loop.create_task(self._load(slot),
                                          name=f"load-{self.topic}-{partition}-{epoch}")
        log.debug("%s-%d: loading at epoch %d", self.topic, partition, epoch)

    def _current(self, slot: _Slot[S]) -> bool:
        return self._slots.get(slot.tp.partition) is slot and slot.state is not ShardState.CLOSED

    async def _load(self, slot: _Slot[S]) -> None:
        shard = slot.shard
        assert shard is not None
        started = self._clock.monotonic()
        count = since_yield = 0
        try:
            for batch in self._writer.read_batches(slot.tp):
                if not self._current(slot):
                    break
                for record in batch:
                    shard.replay(record)
                count += len(batch)
                since_yield += len(batch)
                if since_yield >= LOAD_CHUNK_RECORDS:
                    since_yield = 0
                    await asyncio.sleep(0)
                    if not self._current(slot):
                        break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: load failed (epoch %d)", self.topic, slot.tp.partition,
                          slot.epoch)
            if self._current(slot):
                slot.state = ShardState.FAILED
                self._safely(shard.on_unloaded)
            return
        finally:
            slot.load_task = None
        if not self._current(slot):
            log.info("%s-%d: stale load of epoch %d discarded", self.topic, slot.tp.partition,
                     slot.epoch)
            return
        slot.state = ShardState.ACTIVE
        shard.on_loaded()
        log.log(logging.INFO if count else logging.DEBUG,
                 "%s-%d: loaded %d records in %.3f s (epoch %d)", self.topic,
                 slot.tp.partition, count, self._clock.monotonic() - started, slot.epoch)

    def _unload(self, slot: _Slot[S], failures: dict[int, KafkaError] | None = None) -> None:
        """Close ``slot``: the shard's ``on_unloaded``, then every pending write's failure
        (NOT_COORDINATOR unless ``failures`` names another error for it, by id)."""
        failures = failures or {}
        if self._slots.get(slot.tp.partition) is slot:
            del self._slots[slot.tp.partition]
        was = slot.state
        slot.state = ShardState.CLOSED
        if slot.load_task is not None:
            slot.load_task.cancel()
            slot.load_task = None
        if slot.shard is not None and was is not ShardState.FAILED:
            self._safely(slot.shard.on_unloaded)
        pending, slot.pending = list(slot.pending), collections.deque()
        for write in pending:
            self._cancel_timer(write)
            self._safely(functools.partial(
                write.on_failure, failures.get(id(write)) or NotCoordinatorError(
                    f"{slot.tp} is no longer led by this broker")))

    def _reload(self, slot: _Slot[S], write: _PendingWrite, error: KafkaError) -> None:
        """``write`` is in the log but the writer cannot tell whether it will commit: the
        shard's memory can no longer be known to match its log, so it is loaded again from
        the log (unloaded only, when this broker no longer leads the partition)."""
        partition, epoch = slot.tp.partition, slot.epoch
        moved = error.code == NotLeaderOrFollowerError.code
        log.warning("%s: the outcome of a coordinator write is unknown (%s); "
                    "%s", slot.tp, error,
                    "unloading" if moved else "reloading the shard from the log")
        self._unload(slot, {id(write): error})
        if not moved:
            self._start_load(partition, epoch)

    # -- writes ------------------------------------------------------------------------------
    def _write(
        self, slot: _Slot[S], records: Sequence[RawRecord], on_commit: Callable[[], None],
        on_failure: Callable[[KafkaError], None],
        on_timeout: Callable[[KafkaError], None] | None, producer_id: int,
        producer_epoch: int, transactional: bool, control: bool,
        verification_guard: VerificationGuard | None,
    ) -> None:
        if not self._current(slot) or slot.state is not ShardState.ACTIVE:
            on_failure(NotCoordinatorError(f"{slot.tp} is not led by this broker"))
            return
        if not records:
            on_commit()
            return
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                               transactional=transactional, control=control)
        now = self._clock.now_ms()
        for key, value in records:
            builder.append(now, key, value)
        try:
            outcome = self._writer.append(slot.tp, builder.build(),
                                          verification_guard=verification_guard)
        except KafkaError as exc:
            log.warning("%s: coordinator write refused: %s", slot.tp, exc)
            on_failure(exc)
            return
        except Exception as exc:  # a writer bug must not escape into the request path
            log.exception("%s: coordinator write failed unexpectedly", slot.tp)
            on_failure(UnknownServerError(str(exc)))
            return
        write = _PendingWrite(records, producer_id, producer_epoch, control, on_commit,
                              on_failure, on_timeout)
        slot.pending.append(write)
        if isinstance(outcome, int):
            write.last_offset, write.resolved = outcome, True
            self._drain(slot)
            return
        write.timer = self._scheduler.call_later(
            self._write_timeout_ms, lambda: self._timed_out(slot, write))
        outcome.add_done_callback(lambda f: self._resolved(slot, write, f))

    def _timed_out(self, slot: _Slot[S], write: _PendingWrite) -> None:
        """The write's answer is due: ``on_timeout`` answers it; the write stays pending (it
        is in the log and is replayed if it commits)."""
        write.timer = None
        if write.resolved or write not in slot.pending or not self._current(slot):
            return
        log.info("%s: coordinator write not committed within %d ms; answered, still "
                 "pending", slot.tp, self._write_timeout_ms)
        if write.on_timeout is not None:
            on_timeout, write.on_timeout = write.on_timeout, None
            self._safely(functools.partial(on_timeout, RequestTimedOutError(
                f"the write to {slot.tp} was not committed within "
                f"{self._write_timeout_ms} ms")))

    def _resolved(self, slot: _Slot[S], write: _PendingWrite, future: asyncio.Future[int]
                  ) -> None:
        if not self._current(slot) or write not in slot.pending:
            # unloaded meanwhile: the write was already failed with NOT_COORDINATOR; its
            # outcome is read all the same, or asyncio logs it as a lost exception
            if not future.cancelled():
                future.exception()
            return
        error: KafkaError | None = None
        if future.cancelled():
            error = UnknownServerError("coordinator write cancelled")
        else:
            exc = future.exception()
            if exc is None:
                write.last_offset = future.result()
            elif isinstance(exc, KafkaError):
                error = exc
            else:
                log.error("%s: coordinator write failed unexpectedly", slot.tp, exc_info=exc)
                error = UnknownServerError(str(exc))
        if error is not None:
            self._reload(slot, write, error)
            return
        write.resolved = True
        self._cancel_timer(write)
        self._drain(slot)

    @staticmethod
    def _cancel_timer(write: _PendingWrite) -> None:
        if write.timer is not None:
            write.timer.cancel()
            write.timer = None

    def _drain(self, slot: _Slot[S]) -> None:
        """Complete committed writes from the head of the queue, in append (offset) order."""
        if slot.draining:
            return  # a continuation wrote; the running drain picks it up
        slot.draining = True
        try:
            while slot.pending and slot.pending[0].resolved and self._current(slot):
                write = slot.pending.popleft()
                self._safely(functools.partial(self._replay_write, slot, write))
                self._safely(write.on_commit)
        finally:
            slot.draining = False

    @staticmethod
    def _replay_write(slot: _Slot[S], write: _PendingWrite) -> None:
        shard = slot.shard
        assert shard is not None
        base = write.last_offset - len(write.records) + 1
        for i, (key, value) in enumerate(write.records):
            shard.replay(ReplayRecord(base + i, write.producer_id, write.producer_epoch,
                                      write.control, key, value))

    @staticmethod
    def _safely(action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:
            log.exception("coordinator continuation failed")
