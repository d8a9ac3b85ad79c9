"""The transactional producer's state machine and its requests to the coordinators (KIP-98).

A :class:`TransactionManager` belongs to one :class:`~strom.client.producer.Producer` created
with a ``transactional_id`` and runs on its event loop. It follows Kafka's Java
``TransactionManager``:

States (Kafka's, with its legal transitions)::

    UNINITIALIZED → INITIALIZING → READY ⇄ IN_TRANSACTION → COMMITTING → READY
                                          IN_TRANSACTION | ABORTABLE_ERROR → ABORTING → READY
    IN_TRANSACTION | COMMITTING → ABORTABLE_ERROR;   any state → FATAL_ERROR (final)

- ``init_transactions``: FindCoordinator (key type 1) for the transactional id, then
  InitProducerId (the coordinator bumps the epoch, fencing older incarnations, and aborts
  what they left open). NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the coordinator
  up again; COORDINATOR_LOAD_IN_PROGRESS / CONCURRENT_TRANSACTIONS retry.
- Records sent in a transaction go to partitions the coordinator knows about: the producer's
  sender holds a partition's batches until AddPartitionsToTxn (v0-3, one request per sender
  round for every partition new since the last one) has added it.
- ``send_offsets_to_transaction``: AddOffsetsToTxn to the transaction coordinator, then
  TxnOffsetCommit to the group's coordinator (generation, member id and group instance id
  from v3 on), retrying only the partitions that failed retriably.
- ``commit_transaction``: flush every batch, then EndTxn(commit); ``abort_transaction``:
  drop batches not yet sent, wait for those in flight, EndTxn(abort). EndTxn is skipped when
  nothing was added. When a sent batch failed (its sequence numbers may have left a gap) the
  abort ends with InitProducerId at the current id and epoch (KIP-360, v3+), which bumps the
  epoch and restarts every partition's sequence at 0.

``init``, ``commit`` and ``abort`` run as tasks that survive the caller's timeout: calling the
same method again resumes waiting for the same work (Java's cached TransactionalRequestResult),
so a timed-out commit is never sent twice. Errors are classified as in
:mod:`strom.client.txn_errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeVar

from strom.client.admin_types import OffsetAndMetadata
from strom.client.cluster import RETRY_BACKOFF_S, Cluster
from strom.client.conn import Connection
from strom.client.coordinators import (
    GROUP_KEY_TYPE,
    TRANSACTION_KEY_TYPE,
    CoordinatorFinder,
)
from strom.client.txn_errors import (
    AbortableTransactionError,
    FatalTransactionError,
    FencedProducerError,
    TransactionAbortedError,
    TransactionError,
    TransactionStateError,
)
from strom.common.errors import (
    KafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
    error_class,
    error_for,
)
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.transactions")
T = TypeVar("T")

#: How long a transactional call blocks by default (Kafka's ``max.block.ms``).
DEFAULT_BLOCK_S = 60.0
#: Backoff of the first AddPartitionsToTxn of a transaction on CONCURRENT_TRANSACTIONS: the
#: previous transaction is still writing its markers, which takes milliseconds (Kafka's 20 ms).
FIRST_ADD_BACKOFF_S = 0.02
MAX_BACKOFF_S = 1.0


def _code(name: str) -> int:
    return error_class(name).code


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "CommittingTransaction"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer group whose offsets ``send_offsets_to_transaction`` commits. A member of
    the group passes its generation, member id and group instance id, so the coordinator
    refuses commits from a member that was fenced by a rebalance (TxnOffsetCommit v3+);
    the defaults commit as a group-less client."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None

    @property
    def has_member(self) -> bool:
        return self.generation_id >= 0 or bool(self.member_id) or \
            self.group_instance_id is not None


class SenderHooks(Protocol):
    """What the manager needs from its producer."""

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Use this id and epoch from now on, every partition's sequence restarting at 0."""

    async def flush(self) -> None:
        """Wait until every batch queued so far is acknowledged or failed."""

    def wake(self) -> None:
        """Run the sender's loop again soon."""


class _Verdict(enum.Enum):
    OK = "ok"
    RETRY = "retry"  # the same coordinator, after a backoff
    MOVED = "moved"  # look the coordinator up again, then retry
    ABORTABLE = "abortable"
    ABORTABLE_BUMP = "abortable-bump"  # abortable if the epoch can be bumped, else fatal
    FENCED = "fenced"
    FATAL = "fatal"


# The answers every coordinator call shares (Kafka's TxnRequestHandler subclasses).
_COMMON: dict[int, _Verdict] = {
    0: _Verdict.OK,
    _code("NOT_COORDINATOR"): _Verdict.MOVED,
    _code("COORDINATOR_NOT_AVAILABLE"): _Verdict.MOVED,
    _code("COORDINATOR_LOAD_IN_PROGRESS"): _Verdict.RETRY,
    _code("CONCURRENT_TRANSACTIONS"): _Verdict.RETRY,
    _code("INVALID_PRODUCER_EPOCH"): _Verdict.FENCED,
    _code("PRODUCER_FENCED"): _Verdict.FENCED,
    _code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"): _Verdict.FATAL,
    _code("CLUSTER_AUTHORIZATION_FAILED"): _Verdict.FATAL,
    _code("INVALID_TXN_STATE"): _Verdict.FATAL,
    _code("UNKNOWN_PRODUCER_ID"): _Verdict.ABORTABLE_BUMP,
    _code("INVALID_PRODUCER_ID_MAPPING"): _Verdict.ABORTABLE_BUMP,
    _code("TOPIC_AUTHORIZATION_FAILED"): _Verdict.ABORTABLE,
    _code("GROUP_AUTHORIZATION_FAILED"): _Verdict.ABORTABLE,
    _code("TRANSACTION_ABORTABLE"): _Verdict.ABORTABLE,
}
# InitProducerId knows no abortable outcome: anything unexpected is fatal.
_INIT = {code: _Verdict.FATAL if v in (_Verdict.ABORTABLE, _Verdict.ABORTABLE_BUMP) else v
         for code, v in _COMMON.items()}
_ADD_PARTITIONS = {**_COMMON, _code("UNKNOWN_TOPIC_OR_PARTITION"): _Verdict.RETRY}
_OFFSET_COMMIT = {
    **_COMMON,
    _code("REQUEST_TIMED_OUT"): _Verdict.MOVED,
    _code("UNKNOWN_TOPIC_OR_PARTITION"): _Verdict.RETRY,
    _code("UNKNOWN_MEMBER_ID"): _Verdict.ABORTABLE,
    _code("ILLEGAL_GENERATION"): _Verdict.ABORTABLE,
    _code("FENCED_INSTANCE_ID"): _Verdict.ABORTABLE,
    _code("INVALID_PRODUCER_EPOCH"): _Verdict.FATAL,
    _code("UNSUPPORTED_FOR_MESSAGE_FORMAT"): _Verdict.FATAL,
}
OPERATION_NOT_ATTEMPTED = _code("OPERATION_NOT_ATTEMPTED")
INVALID_PRODUCER_ID_MAPPING = _code("INVALID_PRODUCER_ID_MAPPING")
# Produce errors that end the producer (Java's maybeTransitionToErrorState); any other failed
# delivery only makes the transaction abortable.
_FATAL_PRODUCE = {_code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
                  _code("CLUSTER_AUTHORIZATION_FAILED"), _code("UNSUPPORTED_VERSION")}
_FENCED_PRODUCE = _code("PRODUCER_FENCED")


class _Retry(Exception):
    """Internal: send the request again (after the verdict's backoff)."""


class TransactionManager:
    """The transaction state of one producer (see the module doc).

    Lifecycle: created by the producer; ``close()`` cancels its tasks. Runs on the
    producer's event loop; not thread-safe.
    """

    def __init__(self, hooks: SenderHooks, cluster: Cluster, transactional_id: str, *,
                 transaction_timeout_ms: int, request_timeout_s: float,
                 delivery_timeout_s: float) -> None:
        if not transactional_id:
            raise TransactionStateError("transactional_id must be a non-empty string")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.delivery_timeout_s = delivery_timeout_s
        self._hooks = hooks
        self._txn_finder = CoordinatorFinder(cluster, TRANSACTION_KEY_TYPE, request_timeout_s,
                                             self._key_error)
        self._group_finder = CoordinatorFinder(cluster, GROUP_KEY_TYPE, request_timeout_s,
                                               self._key_error)
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self._last_error: TransactionError | None = None
        self._can_bump = False
        self._bump_required = False
        self._started = False  # a partition or the offsets were added: EndTxn is needed
        self._new: set[TopicPartition] = set()  # waiting for the next AddPartitionsToTxn
        self._adding: set[TopicPartition] = set()  # in the request in flight
        self._added: set[TopicPartition] = set()
        self._add_task: asyncio.Task[None] | None = None
        self._ops: set[asyncio.Task[Any]] = set()  # add-partitions and send-offsets work
        self._pending: tuple[TxnState, asyncio.Task[None]] | None = None

    @staticmethod
    def _key_error(code: int, key: str, message: str | None) -> KafkaError:
        return error_for(code, f"coordinator of {key!r}" + (f": {message}" if message else ""))

    # -- calls from the producer's sender ----------------------------------------------------
    def check_send(self) -> None:
        """Raise unless records may be sent now (inside a transaction, no error)."""
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            raise self._again("send")
        if self.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError(f"cannot send in state {self.state.value}: "
                                        + self._hint())

    def add_partition(self, tp: TopicPartition) -> None:
        """A batch for ``tp`` was opened: add ``tp`` to the transaction before it is sent."""
        if tp not in self._added and tp not in self._adding:
            self._new.add(tp)

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may go out (it is in the transaction, which is not
        failing or being aborted)."""
        return tp in self._added and self.state in (TxnState.IN_TRANSACTION,
                                                    TxnState.COMMITTING)

    def unsent_error(self) -> BaseException | None:
        """What batches not sent yet fail with now (None: keep them)."""
        if self._last_error is not None and self.state is not TxnState.ABORTING:
            return self._last_error
        if self.state is TxnState.ABORTING:
            return TransactionAbortedError("the transaction was aborted before this record "
                                           "was sent")
        return None

    def maybe_add_partitions(self) -> None:
        """Start an AddPartitionsToTxn for the partitions new since the last one, unless one
        is in flight (called once per sender round)."""
        if not self._new or self._add_task is not None or \
                self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return
        self._adding, self._new = self._new, set()
        self._add_task = self._track(self._add_partitions(), "add partitions")

    def batch_failed(self, tp: TopicPartition, error: BaseException, sent: bool) -> None:
        """A batch of ``tp`` failed for good; ``sent`` when it got sequence numbers (it may
        have reached the log, so the epoch must be bumped before they are reused)."""
        if sent and self._can_bump:
            self._bump_required = True
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return  # aborting, or already failed: nothing changes
        if isinstance(error, KafkaError) and error.code == _FENCED_PRODUCE:
            self._enter(FencedProducerError(f"delivery to {tp} failed", error))
        elif isinstance(error, KafkaError) and error.code in _FATAL_PRODUCE:
            self._enter(FatalTransactionError(f"delivery to {tp} failed", error))
        else:
            self._enter(AbortableTransactionError(f"delivery to {tp} failed", error))

    # -- the public operations ---------------------------------------------------------------
    async def init(self, timeout_s: float | None) -> None:
        self._check_not_fatal("init_transactions")
        if not self._resuming(TxnState.INITIALIZING):
            if self.state is not TxnState.UNINITIALIZED:
                raise TransactionStateError("init_transactions() was already called")
            self.state = TxnState.INITIALIZING
            self._start(TxnState.INITIALIZING, self._initialize())
        await self._wait("init_transactions", timeout_s)

    def begin(self) -> None:
        if self._last_error is not None:
            raise self._again("begin a transaction")
        if self.state is not TxnState.READY:
            raise TransactionStateError(f"cannot begin a transaction in state "
                                        f"{self.state.value}: " + self._hint())
        self.state = TxnState.IN_TRANSACTION

    async def commit(self, timeout_s: float | None) -> None:
        if not self._resuming(TxnState.COMMITTING):
            if self._last_error is not None:
                raise self._again("commit")
            if self.state is not TxnState.IN_TRANSACTION:
                raise TransactionStateError(f"cannot commit in state {self.state.value}: "
                                            "no transaction is open")
            self.state = TxnState.COMMITTING
            self._start(TxnState.COMMITTING, self._commit())
        await self._wait("commit_transaction", timeout_s)

    async def abort(self, timeout_s: float | None) -> None:
        if not self._resuming(TxnState.ABORTING):
            self._check_not_fatal("abort")
            # ABORTING without work in progress: an earlier abort failed; it starts again.
            if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                                  TxnState.ABORTING):
                raise TransactionStateError(f"cannot abort in state {self.state.value}: "
                                            "no transaction is open")
            self.state = TxnState.ABORTING
            self._new.clear()
            self._hooks.wake()
            self._start(TxnState.ABORTING, self._abort())
        await self._wait("abort_transaction", timeout_s)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                           group: ConsumerGroupMetadata | str, timeout_s: float | None) -> None:
        if self._last_error is not None:
            raise self._again("send offsets")
        if self.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError(f"cannot send offsets in state {self.state.value}: "
                                        + self._hint())
        metadata = ConsumerGroupMetadata(group) if isinstance(group, str) else group
        plan = {TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata)
                else OffsetAndMetadata(o) for tp, o in offsets.items()}
        task = self._track(self._send_offsets(plan, metadata), "send offsets")
        await _wait_for(task, "send_offsets_to_transaction", timeout_s)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (begun and neither committed nor aborted)."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                              TxnState.ABORTING, TxnState.ABORTABLE_ERROR)

    async def close(self, timeout_s: float | None) -> None:
        """Abort an open transaction (as Kafka's producer does on close), then stop."""
        try:
            if self.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                              TxnState.ABORTING):
                log.info("aborting the open transaction of %r on close", self.transactional_id)
                with contextlib.suppress(Exception):
                    await self.abort(timeout_s)
        finally:
            pending = [*self._ops] + ([self._pending[1]] if self._pending else [])
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(BaseException):
                    await task

    # -- state helpers -----------------------------------------------------------------------
    def _hint(self) -> str:
        if self.state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            return "call init_transactions() first"
        if self.state is TxnState.READY:
            return "call begin_transaction() first"
        return "a transaction is being completed"

    def _again(self, what: str) -> TransactionError:
        """The error that put the manager in its error state, raised again for ``what``."""
        last = self._last_error
        assert last is not None
        if last.fatal:
            return type(last)(f"cannot {what}: the producer failed earlier ({last.message})",
                              last.cause)
        return type(last)(f"cannot {what}: the transaction must be aborted "
                          f"({last.message})", last.cause)

    def _check_not_fatal(self, what: str) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise self._again(what)

    def _enter(self, error: TransactionError) -> TransactionError:
        """Move to the error state ``error`` calls for (an abort in progress only notes that
        it must bump the epoch) and make the sender drop what it has not sent."""
        if error.fatal:
            self.state = TxnState.FATAL_ERROR
            self._last_error = error
        elif self.state is not TxnState.ABORTING and self.state is not TxnState.FATAL_ERROR:
            self.state = TxnState.ABORTABLE_ERROR
            self._last_error = self._last_error or error
        log.info("transactional id %r: %s", self.transactional_id, error)
        self._hooks.wake()
        return error

    def _failure(self, verdict: _Verdict, cause: KafkaError, what: str) -> TransactionError:
        if verdict is _Verdict.FENCED:
            return self._enter(FencedProducerError(
                f"{what}: fenced by a newer producer with transactional id "
                f"{self.transactional_id!r}", cause))
        if verdict is _Verdict.ABORTABLE_BUMP:
            if self._can_bump:
                self._bump_required = True
                return self._enter(AbortableTransactionError(what, cause))
            return self._enter(FatalTransactionError(what, cause))
        if verdict is _Verdict.ABORTABLE:
            return self._enter(AbortableTransactionError(what, cause))
        return self._enter(FatalTransactionError(what, cause))

    def _complete(self) -> None:
        self.state = TxnState.READY
        self._last_error = None
        self._bump_required = False
        self._started = False
        self._new.clear()
        self._adding.clear()
        self._added.clear()

    # -- tasks -------------------------------------------------------------------------------
    def _resuming(self, target: TxnState) -> bool:
        return self._pending is not None and self._pending[0] is target and \
            self.state is target

    def _start(self, target: TxnState, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"strom-txn-{target.value}")
        task.add_done_callback(_retrieve)
        self._pending = (target, task)

    async def _wait(self, what: str, timeout_s: float | None) -> None:
        assert self._pending is not None
        task = self._pending[1]
        try:
            await _wait_for(task, what, timeout_s)
        finally:
            if task.done():  # else it timed out and still runs: the same call resumes it
                self._pending = None

    def _track(self, work: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=f"strom-txn-{what}")
        self._ops.add(task)
        task.add_done_callback(self._ops.discard)
        task.add_done_callback(_retrieve)
        return task

    async def _ops_done(self) -> None:
        """Wait for add-partitions and send-offsets work still running."""
        while self._ops:
            await asyncio.gather(*self._ops, return_exceptions=True)

    # -- the work ----------------------------------------------------------------------------
    async def _initialize(self) -> None:
        try:
            await self._init_producer_id(bump=False)
        except TransactionError:
            raise
        except KafkaError as exc:
            raise self._failure(_Verdict.FATAL, exc, "init_transactions failed") from None
        self.state = TxnState.READY

    async def _commit(self) -> None:
        await self._hooks.flush()
        await self._ops_done()
        if self._last_error is not None:
            raise self._again("commit")
        if self._started:
            await self._end_txn(commit=True)
        self._complete()

    async def _abort(self) -> None:
        self._hooks.wake()  # the sender drops what it has not sent
        await self._hooks.flush()
        await self._ops_done()
        last = self._last_error
        skip_end = last is not None and last.code == INVALID_PRODUCER_ID_MAPPING
        if self._started and not skip_end:
            await self._end_txn(commit=False)
        if self._bump_required:
            await self._init_producer_id(bump=True)
        self._complete()

    async def _init_producer_id(self, *, bump: bool) -> None:
        fields = {"transactional_id": self.transactional_id,
                  "transaction_timeout_ms": self.transaction_timeout_ms,
                  "producer_id": self.producer_id if bump else -1,
                  "producer_epoch": self.producer_epoch if bump else -1}
        what = "bumping the producer epoch" if bump else "InitProducerId"
        response = await self._until_ok(what, lambda: self._on_txn_coordinator(
            ApiKey.INIT_PRODUCER_ID, fields, what, _INIT, self._note_versions))
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self._hooks.set_producer_id(self.producer_id, self.producer_epoch)
        log.info("transactional id %r: producer id %d, epoch %d", self.transactional_id,
                 self.producer_id, self.producer_epoch)

    def _note_versions(self, conn: Connection) -> None:
        # KIP-360: an abortable error may bump the epoch only if the coordinator takes
        # InitProducerId v3+ (the current id and epoch in the request).
        self._can_bump = conn.versions.get(ApiKey.INIT_PRODUCER_ID, 0) >= 3

    async def _end_txn(self, *, commit: bool) -> None:
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        fields = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                  "producer_epoch": self.producer_epoch, "committed": commit}
        await self._until_ok(what, lambda: self._on_txn_coordinator(
            ApiKey.END_TXN, fields, what, _COMMON))

    async def _add_partitions(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.delivery_timeout_s
        try:
            while self._adding and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                backoff = await self._add_partitions_once(sorted(self._adding))
                if backoff is None:
                    break
                if loop.time() + backoff >= deadline:
                    self._enter(AbortableTransactionError(
                        "could not add partitions to the transaction in time",
                        RequestTimedOutError(f"AddPartitionsToTxn for "
                                             f"{', '.join(map(str, sorted(self._adding)))}")))
                    break
                await asyncio.sleep(backoff)
        except TransactionError:
            pass  # the state records it; waiting batches fail with it
        finally:
            self._adding = set()
            self._add_task = None
            self._hooks.wake()

    async def _add_partitions_once(self, parts: list[TopicPartition]) -> float | None:
        """One AddPartitionsToTxn for ``parts``: None when done (added or failed), else the
        backoff before trying again."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in parts:
            by_topic[tp.topic].append(tp.partition)
        fields = {"v3_and_below_transactional_id": self.transactional_id,
                  "v3_and_below_producer_id": self.producer_id,
                  "v3_and_below_producer_epoch": self.producer_epoch,
                  "v3_and_below_topics": [{"name": t, "partitions": ps}
                                          for t, ps in by_topic.items()]}
        try:
            response = await self._send_to_txn_coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, fields)
        except _Retry:
            return RETRY_BACKOFF_S
        errors = {TopicPartition(t.name, p.partition_index): p.partition_error_code
                  for t in response.results_by_topic_v3_and_below
                  for p in t.results_by_partition}
        verdicts = {tp: _ADD_PARTITIONS.get(code, _Verdict.ABORTABLE)
                    for tp, code in errors.items() if code != OPERATION_NOT_ATTEMPTED}
        for verdict in (_Verdict.FENCED, _Verdict.FATAL, _Verdict.ABORTABLE_BUMP):
            failed = [tp for tp, v in verdicts.items() if v is verdict]
            if failed:
                raise self._failure(verdict, error_for(errors[failed[0]], f"adding {failed[0]}"),
                                    "AddPartitionsToTxn failed")
        if any(v is _Verdict.MOVED for v in verdicts.values()):
            self._txn_finder.forget(self.transactional_id)
            return RETRY_BACKOFF_S
        if any(v is _Verdict.RETRY for v in verdicts.values()):
            concurrent = _code("CONCURRENT_TRANSACTIONS") in errors.values()
            return FIRST_ADD_BACKOFF_S if concurrent and not self._added else RETRY_BACKOFF_S
        refused = [tp for tp, v in verdicts.items() if v is not _Verdict.OK]
        if refused or len(verdicts) < len(errors):
            tp = refused[0] if refused else next(iter(errors))
            raise self._failure(_Verdict.ABORTABLE, error_for(errors[tp], f"adding {tp}"),
                                "AddPartitionsToTxn failed")
        if set(parts) - set(errors):
            raise self._failure(_Verdict.ABORTABLE, error_for(-1, "no answer for "
                                + ", ".join(map(str, sorted(set(parts) - set(errors))))),
                                "AddPartitionsToTxn failed")
        self._added.update(parts)
        self._started = True
        return None

    async def _send_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                            group: ConsumerGroupMetadata) -> None:
        fields = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                  "producer_epoch": self.producer_epoch, "group_id": group.group_id}
        await self._until_ok("AddOffsetsToTxn", lambda: self._on_txn_coordinator(
            ApiKey.ADD_OFFSETS_TO_TXN, fields, "AddOffsetsToTxn", _COMMON), open_only=True)
        self._started = True
        pending = dict(offsets)
        backoff = RETRY_BACKOFF_S
        while pending:
            self._check_open("TxnOffsetCommit")
            try:
                failed = await self._commit_offsets(pending, group)
            except _Retry:
                failed = None
            if failed is not None:
                for tp in [tp for tp in pending if tp not in failed]:
                    del pending[tp]
                if not pending:
                    break
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                              group: ConsumerGroupMetadata) -> set[TopicPartition]:
        """One TxnOffsetCommit; returns the partitions to send again."""
        try:
            node = await self._group_finder.find(group.group_id)
            conn = await self._group_finder.connect(node)
        except KafkaError as exc:
            self._retry_or_fail(exc, "finding the group coordinator", self._group_finder,
                                group.group_id)
        version = self._version(conn, ApiKey.TXN_OFFSET_COMMIT)
        if group.has_member and version < 3:
            raise self._failure(_Verdict.FATAL, UnsupportedVersionError(
                f"committing as a group member needs TxnOffsetCommit v3+, broker "
                f"{conn.address} supports up to v{version}"), "send_offsets_to_transaction")
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, o in offsets.items():
            by_topic[tp.topic].append({"partition_index": tp.partition,
                                       "committed_offset": o.offset,
                                       "committed_leader_epoch": o.leader_epoch,
                                       "committed_metadata": o.metadata})
        fields = {"transactional_id": self.transactional_id, "group_id": group.group_id,
                  "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                  "generation_id": group.generation_id, "member_id": group.member_id,
                  "group_instance_id": group.group_instance_id,
                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        try:
            response = await conn.request(ApiKey.TXN_OFFSET_COMMIT, fields, version=version)
        except KafkaError as exc:
            self._retry_or_fail(exc, "TxnOffsetCommit", self._group_finder, group.group_id)
        retry: set[TopicPartition] = set()
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                verdict = _OFFSET_COMMIT.get(p.error_code, _Verdict.FATAL)
                if verdict is _Verdict.OK:
                    continue
                if verdict in (_Verdict.RETRY, _Verdict.MOVED):
                    if verdict is _Verdict.MOVED:
                        self._group_finder.forget(group.group_id)
                    retry.add(tp)
                    continue
                raise self._failure(verdict, error_for(
                    p.error_code, f"committing the offset of {tp} for group "
                                  f"{group.group_id!r}"), "TxnOffsetCommit failed")
        return retry

    # -- requests to the transaction coordinator ---------------------------------------------
    def _check_open(self, what: str) -> None:
        """Stop work for a transaction that is being aborted or failed."""
        if self._last_error is not None:
            raise self._last_error
        if self.state is TxnState.ABORTING:
            raise TransactionAbortedError(f"{what}: the transaction is being aborted")

    async def _until_ok(self, what: str, attempt: Callable[[], Awaitable[T]], *,
                        open_only: bool = False) -> T:
        """Run ``attempt`` until it succeeds; it raises :class:`_Retry` to go again."""
        backoff = RETRY_BACKOFF_S
        while True:
            if open_only:
                self._check_open(what)
            elif self.state is TxnState.FATAL_ERROR:
                raise self._again(what)
            try:
                return await attempt()
            except _Retry:
                pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _on_txn_coordinator(self, api_key: int, fields: dict[str, Any], what: str,
                                  table: Mapping[int, _Verdict],
                                  on_conn: Callable[[Connection], None] | None = None) -> Any:
        """One request whose answer has a top-level ``error_code``: the response when that
        is NONE, else :class:`_Retry` or the failure raised."""
        response = await self._send_to_txn_coordinator(api_key, fields, on_conn)
        verdict = table.get(response.error_code, _Verdict.FATAL)
        if verdict is _Verdict.OK:
            return response
        if verdict is _Verdict.MOVED:
            self._txn_finder.forget(self.transactional_id)
        if verdict in (_Verdict.MOVED, _Verdict.RETRY):
            raise _Retry
        raise self._failure(verdict, error_for(response.error_code, what), f"{what} failed")

    async def _send_to_txn_coordinator(
            self, api_key: int, fields: dict[str, Any],
            on_conn: Callable[[Connection], None] | None = None) -> Any:
        tid = self.transactional_id
        try:
            node = await self._txn_finder.find(tid)
            conn = await self._txn_finder.connect(node)
            version = self._version(conn, api_key)
            if on_conn is not None:
                on_conn(conn)
            return await conn.request(api_key, fields, version=version)
        except KafkaError as exc:
            self._retry_or_fail(exc, "transaction coordinator request", self._txn_finder, tid)

    def _version(self, conn: Connection, api_key: int) -> int:
        try:
            return conn.version(api_key)
        except UnsupportedVersionError as exc:
            raise self._failure(_Verdict.FATAL, exc, "the broker does not support "
                                                     "transactions") from None

    def _retry_or_fail(self, exc: KafkaError, what: str, finder: CoordinatorFinder,
                       key: str) -> NoReturn:
        """A failed lookup or request: retriable ones (lost connections, timeouts,
        coordinators moving) look the coordinator up again; others are fatal, except a
        refused group, which only aborts the transaction."""
        if exc.retriable:
            finder.forget(key)
            log.debug("%s: %s; retrying", what, exc)
            raise _Retry from None
        verdict = _COMMON.get(exc.code, _Verdict.FATAL)
        if verdict is _Verdict.OK:
            verdict = _Verdict.FATAL
        raise self._failure(verdict, exc, f"{what} failed") from None


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background task's outcome as seen (the caller that waited for it, if any,
    got it already; a caller that timed out may never come back)."""
    if not task.cancelled():
        task.exception()


async def _wait_for(task: asyncio.Future[None], what: str, timeout_s: float | None) -> None:
    """Wait for ``task`` without cancelling it when ``timeout_s`` runs out (Kafka's
    TimeoutException: the call may be made again to keep waiting)."""
    timeout = DEFAULT_BLOCK_S if timeout_s is None else timeout_s
    try:
        async with asyncio.timeout(timeout):
            await asyncio.shield(task)
    except TimeoutError:
        raise RequestTimedOutError(
            f"{what} did not complete within {timeout:g}s; call it again to keep waiting"
        ) from None
