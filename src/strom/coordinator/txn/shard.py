"""One ``__transaction_state`` partition's transactions: Kafka's ``TransactionCoordinator``
operations over the coordinator runtime's replay-at-commit writes.

Every state change is a ``TransactionLogValue`` written through :meth:`ShardContext.write` and
applied only when :meth:`TxnShard.replay` sees it committed (see
:mod:`strom.coordinator.runtime`); until then the transactional id carries a *pending* mark
and concurrent requests get CONCURRENT_TRANSACTIONS (retriable). Answers go through
callbacks with a Kafka error code.

Operations (Kafka's rules and error codes):

* **InitProducerId** (transactional): a new id gets a producer id from the id blocks at epoch
  0; an idle one (Empty / Complete*) gets its epoch bumped (or its producer id rotated when the
  epoch is exhausted), fencing the previous incarnation; an Ongoing one is fenced and aborted
  first (PrepareAbort at the bumped epoch) and the caller gets CONCURRENT_TRANSACTIONS, so it
  retries and gets the next epoch; Prepare* gets CONCURRENT_TRANSACTIONS. KIP-360: a producer
  passing its current (producer id, epoch) bumps without being fenced; one passing the epoch
  before a lost bump gets that bump again; anything else is PRODUCER_FENCED.
* **AddPartitionsToTxn / AddOffsetsToTxn**: the id must exist (INVALID_PRODUCER_ID_MAPPING),
  the producer id match (INVALID_PRODUCER_ID_MAPPING) and the epoch be current
  (PRODUCER_FENCED); Prepare* is CONCURRENT_TRANSACTIONS; partitions already in an Ongoing
  transaction need no write.
* **Verification** (KIP-890, AddPartitionsToTxn v4 ``verify_only``): the producer's error,
  CONCURRENT_TRANSACTIONS while its transaction is being completed, else per partition NONE
  (in the transaction) or TRANSACTION_ABORTABLE; nothing is written.
* **EndTxn**: Ongoing → PrepareCommit / PrepareAbort, answered once that record is committed;
  the markers then go out (:class:`MarkerSender`) and, once every partition has its marker,
  CompleteCommit / CompleteAbort is written. A Prepare* not committed within the write
  timeout is answered COORDINATOR_NOT_AVAILABLE but stays pending (retries get
  CONCURRENT_TRANSACTIONS); if it commits later its markers go out all the same. A retried
  EndTxn after completion is answered NONE for the same result, INVALID_TXN_STATE for the
  other; Empty is INVALID_TXN_STATE.
* **Timeouts**: every ``abort_interval_ms`` an Ongoing transaction older than its
  ``transaction.timeout.ms`` is fenced and aborted (its producer then gets PRODUCER_FENCED /
  INVALID_PRODUCER_EPOCH, as with Kafka before transaction version 2).
* **Expiry**: an idle id (Empty / Complete*) not updated for ``transactional.id.expiration.ms``
  is removed (a tombstone).
* **Load**: a transaction found in PrepareCommit / PrepareAbort is completed (markers, then
  Complete*), so a decision taken before a crash always reaches every partition.

Owned by the broker's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from strom.common.clock import Clock
from strom.common.errors import KafkaError, error_class
from strom.common.timer import Scheduler, TimerHandle
from strom.common.types import TopicPartition
from strom.coordinator.runtime import ReplayRecord, ShardContext, answer_once, coordinator_error
from strom.coordinator.txn.model import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    TxnMetadata,
    TxnState,
    TxnTransit,
)
from strom.coordinator.txn.records import (
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

log = logging.getLogger("strom.coordinator.txn")


def _code(name: str) -> int:
    return error_class(name).code


NONE = 0
CONCURRENT_TRANSACTIONS = _code("CONCURRENT_TRANSACTIONS")
INVALID_PRODUCER_ID_MAPPING = _code("INVALID_PRODUCER_ID_MAPPING")
PRODUCER_FENCED = _code("PRODUCER_FENCED")
INVALID_PRODUCER_EPOCH = _code("INVALID_PRODUCER_EPOCH")
INVALID_TXN_STATE = _code("INVALID_TXN_STATE")
INVALID_REQUEST = _code("INVALID_REQUEST")
INVALID_TRANSACTION_TIMEOUT = _code("INVALID_TRANSACTION_TIMEOUT")
TRANSACTIONAL_ID_NOT_FOUND = _code("TRANSACTIONAL_ID_NOT_FOUND")
TRANSACTION_ABORTABLE = _code("TRANSACTION_ABORTABLE")

InitCallback = Callable[[int, int, int], None]  # error, producer id, epoch
ErrorCallback = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The transaction coordinator's configuration (Kafka's names in comments)."""

    partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    remove_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup...
    write_timeout_ms: int = 5_000


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for one decided transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


class MarkerSender(Protocol):
    """Delivers a transaction's markers to its partitions' leaders (WriteTxnMarkers) and
    retries until each is written or its partition is gone; then calls ``on_done``. A job
    whose coordinator was fenced is dropped without calling ``on_done``."""

    def send(self, job: MarkerJob, on_done: Callable[[], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class TxnView:
    """A transaction as DescribeTransactions / ListTransactions show it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    start_ms: int
    partitions: frozenset[TopicPartition]


class TxnShard:
    """The transactions of one ``__transaction_state`` partition (see the module docstring)."""

    def __init__(self, context: ShardContext, scheduler: Scheduler, clock: Clock,
                 settings: TxnSettings, new_producer_id: Callable[[], int],
                 markers: MarkerSender) -> None:
        self.context = context
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self._new_producer_id = new_producer_id
        self._markers = markers
        self.txns: dict[str, TxnMetadata] = {}
        self._timers: list[TimerHandle] = []
        self._active = False

    # -- CoordinatorShard ------------------------------------------------------------------
    def replay(self, record: ReplayRecord) -> None:
        if record.is_control:
            return
        try:
            tid = decode_key(record.key)
            if tid is None:
                return
            value = decode_value(record.value)
        except RecordFormatError as exc:
            log.warning("%s: skipping undecodable record at offset %d: %s",
                        self._name, record.offset, exc)
            return
        if value is None:
            self.txns.pop(tid, None)
            return
        meta = self.txns.get(tid)
        if meta is None:
            meta = self.txns[tid] = TxnMetadata(tid, value.producer_id)
        meta.apply(value)

    def on_loaded(self) -> None:
        self._active = True
        for meta in list(self.txns.values()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("%s: completing %s of %r found on load", self._name,
                         meta.state.display, meta.transactional_id)
                self._send_markers(meta)
        self._every(self.settings.abort_interval_ms, self.abort_timed_out)
        self._every(self.settings.remove_interval_ms, self.remove_expired)

    def on_unloaded(self) -> None:
        self._active = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    @property
    def _name(self) -> str:
        return f"__transaction_state-{self.context.partition}"

    def _every(self, interval_ms: int, action: Callable[[], object]) -> None:
        def tick() -> None:
            if not self._active:
                return
            try:
                action()
            finally:
                if self._active:
                    self._timers.append(self.scheduler.call_later(interval_ms, tick))
        self._timers.append(self.scheduler.call_later(interval_ms, tick))

    # -- writes ----------------------------------------------------------------------------
    def _write(self, meta: TxnMetadata, transit: TxnTransit, on_done: Callable[[int], None],
               *, then: Callable[[], None] | None = None, answer_timeout: bool = True) -> None:
        """Write ``transit``; once its record is committed and applied run ``then`` and
        ``on_done(NONE)``; if the write fails, ``on_done`` with the mapped error. A write not
        committed within the write timeout is answered then (COORDINATOR_NOT_AVAILABLE,
        unless not ``answer_timeout``) but stays pending — the transition keeps its pending
        mark (CONCURRENT_TRANSACTIONS meanwhile) and, if it commits, is applied and ``then``
        runs (markers go out for a Prepare*), as a replay of the log would have it.
        ``on_done`` runs once."""
        tid = meta.transactional_id
        is_new = tid not in self.txns
        if is_new:
            self.txns[tid] = meta  # visible, with its pending mark, while being written
        reply = answer_once(on_done)

        def committed() -> None:
            current = self.txns.get(tid)
            if current is not None:
                current.complete(transit)
            if then is not None:
                then()
            reply(NONE)

        def failed(exc: KafkaError) -> None:
            current = self.txns.get(tid)
            if current is meta and is_new:
                del self.txns[tid]  # its first record failed: the id never existed
            elif current is not None:
                current.abandon()
            reply(coordinator_error(exc))

        def timed_out(exc: KafkaError) -> None:
            reply(coordinator_error(exc))

        value = None if transit.state is TxnState.DEAD else encode_value(transit.log_value())
        self.context.write([(encode_key(tid), value)], on_commit=committed, on_failure=failed,
                           on_timeout=timed_out if answer_timeout else None)

    # -- InitProducerId ----------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int,
                         expected: tuple[int, int] | None, callback: InitCallback) -> None:
        if not tid:
            return callback(INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return callback(INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        now = self.clock.now_ms()
        meta = self.txns.get(tid)
        if meta is None:
            meta = TxnMetadata(tid, self._new_producer_id(), timeout_ms=timeout_ms,
                               update_ms=now)
        if meta.pending is not None:
            return callback(CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if expected is not None and not self._expected_is_valid(meta, expected):
            return callback(PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        state = meta.state
        if state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return callback(CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if state is TxnState.ONGOING:
            # Fence the running producer and abort its transaction; the caller retries.
            def fenced(error: int) -> None:
                callback(error or CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return self._fence_and_abort(meta, fenced)
        transit: TxnTransit | None
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            transit = meta.prepare_rotate_producer_id(self._new_producer_id(), timeout_ms, now,
                                                      record_last_epoch=expected is not None)
        else:
            transit = meta.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now)
        if transit is None:
            return callback(PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        ready = transit

        def done(error: int) -> None:
            if error:
                callback(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            else:
                log.info("%s: initialized %r with producer id %d epoch %d", self._name, tid,
                         ready.producer_id, ready.producer_epoch)
                callback(NONE, ready.producer_id, ready.producer_epoch)
        self._write(meta, transit, done)
        return None

    @staticmethod
    def _expected_is_valid(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
        pid, epoch = expected
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id
                or (pid == meta.previous_producer_id and epoch >= 32766))

    def _fence_and_abort(self, meta: TxnMetadata, on_done: ErrorCallback) -> None:
        try:
            transit = meta.prepare_fence_and_abort(self.clock.now_ms())
        except IllegalTransition as exc:
            log.error("%s: %s", self._name, exc)
            return on_done(CONCURRENT_TRANSACTIONS)

        tid = meta.transactional_id
        self._write(meta, transit, on_done,
                    then=lambda: self._send_markers(self.txns.get(tid, meta)))
        return None

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------
    def _check_producer(self, tid: str, producer_id: int, epoch: int) -> TxnMetadata | int:
        if not tid:
            return INVALID_REQUEST
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return PRODUCER_FENCED
        return meta

    def add_partitions(self, tid: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition], callback: ErrorCallback) -> None:
        meta = self._check_producer(tid, producer_id, epoch)
        if isinstance(meta, int):
            return callback(meta)
        if meta.pending is not None or meta.state in (TxnState.PREPARE_COMMIT,
                                                      TxnState.PREPARE_ABORT):
            return callback(CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return callback(NONE)
        try:
            transit = meta.prepare_add_partitions(partitions, self.clock.now_ms())
        except IllegalTransition as exc:
            log.error("%s: %s", self._name, exc)
            return callback(INVALID_TXN_STATE)
        self._write(meta, transit, callback)
        return None

    def verify_partitions(self, tid: str, producer_id: int, epoch: int,
                          partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890 verification, answered as Kafka's coordinator answers it
        (``handleVerifyPartitionsInTransaction``): for every partition the producer's error —
        INVALID_PRODUCER_ID_MAPPING (unknown id, another producer id), PRODUCER_FENCED (another
        epoch), CONCURRENT_TRANSACTIONS (its transaction is being completed) — or else NONE
        for each partition in its transaction and TRANSACTION_ABORTABLE for the others. A
        pending transition is not waited for: the partition's log checks the epoch again. The
        produce side turns these into the errors producers know (see
        :func:`strom.broker.handlers.produce_checks.verification_error`)."""
        meta = self._check_producer(tid, producer_id, epoch)
        if isinstance(meta, int):
            return dict.fromkeys(partitions, meta)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return dict.fromkeys(partitions, CONCURRENT_TRANSACTIONS)
        return {tp: NONE if tp in meta.partitions else TRANSACTION_ABORTABLE
                for tp in partitions}

    # -- EndTxn ------------------------------------------------------------------------------
    def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool,
                callback: ErrorCallback) -> None:
        if not tid:
            return callback(INVALID_REQUEST)
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return callback(INVALID_PRODUCER_ID_MAPPING)
        if epoch != meta.producer_epoch:
            return callback(PRODUCER_FENCED)
        if meta.pending is not None:
            return callback(CONCURRENT_TRANSACTIONS)
        state = meta.state
        if state is TxnState.ONGOING:
            transit = meta.prepare_end(commit, self.clock.now_ms())
            self._write(meta, transit, callback,
                        then=lambda: self._send_markers(self.txns.get(tid, meta)))
            return None
        if state is TxnState.COMPLETE_COMMIT:
            return callback(NONE if commit else INVALID_TXN_STATE)
        if state is TxnState.COMPLETE_ABORT:
            return callback(INVALID_TXN_STATE if commit else NONE)
        if state is TxnState.PREPARE_COMMIT:
            return callback(CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE)
        if state is TxnState.PREPARE_ABORT:
            return callback(INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS)
        return callback(INVALID_TXN_STATE)

    # -- markers -----------------------------------------------------------------------------
    def _send_markers(self, meta: TxnMetadata) -> None:
        if meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        job = MarkerJob(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                        meta.state is TxnState.PREPARE_COMMIT, self.context.epoch,
                        frozenset(meta.partitions))
        self._markers.send(job, lambda: self._complete(job))

    def _complete(self, job: MarkerJob) -> None:
        """Every marker of ``job`` is written: CompleteCommit / CompleteAbort."""
        if not self._active:
            return
        meta = self.txns.get(job.transactional_id)
        if meta is None or meta.producer_id != job.producer_id or (
                meta.producer_epoch != job.producer_epoch) or meta.state not in (
                TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        if meta.pending is not None:  # another write in flight: try again shortly
            self.scheduler.call_later(10, lambda: self._complete(job))
            return
        transit = meta.prepare_complete(self.clock.now_ms())

        def written(error: int) -> None:
            if error:
                log.warning("%s: writing %s for %r failed (error %d); retrying", self._name,
                            transit.state.display, job.transactional_id, error)
                if self._active:
                    self.scheduler.call_later(100, lambda: self._complete(job))
        self._write(meta, transit, written, answer_timeout=False)

    # -- timers ------------------------------------------------------------------------------
    def abort_timed_out(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; returns how many."""
        now = self.clock.now_ms()
        expired = [m for m in self.txns.values()
                   if m.state is TxnState.ONGOING and m.pending is None
                   and m.start_ms + m.timeout_ms < now]
        for meta in expired:
            log.info("%s: aborting %r (producer %d epoch %d): transaction timed out after "
                     "%d ms", self._name, meta.transactional_id, meta.producer_id,
                     meta.producer_epoch, meta.timeout_ms)
            self._fence_and_abort(meta, lambda error: None)
        return len(expired)

    def remove_expired(self) -> int:
        """Remove idle transactional ids past ``transactional.id.expiration.ms``."""
        now = self.clock.now_ms()
        idle = [m for m in self.txns.values()
                if m.pending is None and m.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                                     TxnState.COMPLETE_ABORT)
                and m.update_ms + self.settings.id_expiration_ms <= now]
        for meta in idle:
            self._write(meta, meta.prepare_dead(now), lambda error: None,
                        answer_timeout=False)
        return len(idle)

    # -- introspection -----------------------------------------------------------------------
    def view(self, tid: str) -> TxnView | None:
        meta = self.txns.get(tid)
        if meta is None or meta.state is TxnState.DEAD:
            return None
        return TxnView(tid, meta.producer_id, meta.producer_epoch, meta.state, meta.timeout_ms,
                       meta.start_ms, frozenset(meta.partitions))

    def views(self) -> list[TxnView]:
        return [v for tid in self.txns if (v := self.view(tid)) is not None]
