"""Transaction state: Kafka's ``TransactionState`` machine and ``TransactionMetadata``.

States and their codes in ``__transaction_state`` (``transaction_status``)::

    EMPTY 0, ONGOING 1, PREPARE_COMMIT 2, PREPARE_ABORT 3, COMPLETE_COMMIT 4,
    COMPLETE_ABORT 5, DEAD 6, PREPARE_EPOCH_FENCE 7 (in memory only, never written)

Legal transitions (target ← allowed current states), as Kafka's ``validPreviousStates``::

    EMPTY               ← EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    ONGOING             ← ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    PREPARE_COMMIT      ← ONGOING
    PREPARE_ABORT       ← ONGOING, PREPARE_EPOCH_FENCE
    COMPLETE_COMMIT     ← PREPARE_COMMIT
    COMPLETE_ABORT      ← PREPARE_ABORT
    DEAD                ← EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    PREPARE_EPOCH_FENCE ← ONGOING

A :class:`TxnMetadata` changes in two steps: a ``prepare_*`` method checks the transition
and returns the target (:class:`TxnTransit`) while marking it *pending* (one pending
transition at a time: requests meanwhile get CONCURRENT_TRANSACTIONS); once the target's
record is committed the shard replays it (:meth:`TxnMetadata.apply`) and clears the pending
mark; a failed write only clears the mark (:meth:`TxnMetadata.abandon`). Epoch rules are
Kafka's (KIP-360): ``producer_epoch`` is the current epoch, ``last_producer_epoch`` the one
before the last bump (-1 when unknown), so a retried InitProducerId whose answer was lost
gets the same epoch again; epoch 32767 is never handed out, so a producer can always be
fenced (its id is rotated instead).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from strom.common.types import TopicPartition
from strom.coordinator.txn.records import TxnLogValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name Kafka's tools and ListTransactions / DescribeTransactions use."""
        return _DISPLAY[self]

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        return _BY_DISPLAY.get(name)


_DISPLAY = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_DISPLAY = {name: state for state, name in _DISPLAY.items()}

_COMPLETE_OR_EMPTY = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                TxnState.COMPLETE_ABORT})
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _COMPLETE_OR_EMPTY,
    TxnState.ONGOING: _COMPLETE_OR_EMPTY | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _COMPLETE_OR_EMPTY,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(RuntimeError):
    """A transition Kafka's state machine forbids (a coordinator bug, never a client error)."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of a pending transition: what will be written and then applied."""

    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID

    def log_value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms,
                           int(self.state), self.partitions, self.update_ms, self.start_ms,
                           self.previous_producer_id)


@dataclass(slots=True, eq=False)
class TxnMetadata:
    """One transactional id's state as of the last committed record (plus a pending mark)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    pending: TxnState | None = None

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    # -- applying --------------------------------------------------------------------------
    def apply(self, value: TxnLogValue) -> None:
        """Take a committed ``__transaction_state`` value (replay)."""
        self.previous_producer_id = value.previous_producer_id
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.timeout_ms = value.timeout_ms
        self.state = TxnState(value.state)
        self.partitions = set(value.partitions)
        self.start_ms = value.start_ms
        self.update_ms = value.last_update_ms

    def complete(self, transit: TxnTransit) -> None:
        """The transit's record was committed and replayed: keep what the log does not hold."""
        self.last_producer_epoch = transit.last_producer_epoch
        self.previous_producer_id = transit.previous_producer_id
        self.pending = None

    def abandon(self) -> None:
        """The transit's write failed: nothing changed but the pending mark."""
        self.pending = None

    # -- preparing -------------------------------------------------------------------------
    def _transit(self, state: TxnState, *, producer_id: int | None = None,
                 epoch: int | None = None, last_epoch: int | None = None,
                 timeout_ms: int | None = None, partitions: frozenset[TopicPartition] | None = None,
                 start_ms: int | None = None, now_ms: int) -> TxnTransit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: transition to {state.display} "
                                    f"while {self.pending.display} is pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.display} -> "
                                    f"{state.display} is not a legal transition")
        new_pid = self.producer_id if producer_id is None else producer_id
        transit = TxnTransit(
            producer_id=new_pid,
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            last_producer_epoch=self.last_producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            start_ms=self.start_ms if start_ms is None else start_ms,
            update_ms=now_ms,
            previous_producer_id=(self.producer_id if new_pid != self.producer_id
                                  else self.previous_producer_id),
        )
        self.pending = state
        return transit

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int
                                ) -> TxnTransit | None:
        """InitProducerId on an idle id: bump the epoch (or repeat a bump whose answer was
        lost). None when ``expected_epoch`` is neither the current nor the last epoch
        (PRODUCER_FENCED)."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(TxnState.EMPTY, epoch=epoch, last_epoch=last,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1,
                             now_ms=now_ms)

    def prepare_rotate_producer_id(self, producer_id: int, timeout_ms: int, now_ms: int,
                                   record_last_epoch: bool) -> TxnTransit:
        """The epoch is exhausted: continue with a fresh producer id at epoch 0."""
        return self._transit(
            TxnState.EMPTY, producer_id=producer_id, epoch=0,
            last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, now_ms=now_ms)

    def prepare_fence_and_abort(self, now_ms: int) -> TxnTransit:
        """Fence the producer of an ongoing transaction (a new InitProducerId for its id, or
        its timeout) and abort the transaction, in one record: PrepareAbort at the bumped
        epoch (Kafka passes through the in-memory PrepareEpochFence to the same record). The
        bumped epoch's markers fence the old producer on every partition too."""
        return self._transit(TxnState.PREPARE_ABORT, epoch=self.producer_epoch + 1,
                             last_epoch=NO_PRODUCER_EPOCH, now_ms=now_ms)

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransit:
        start = now_ms if self.state in _COMPLETE_OR_EMPTY else self.start_ms
        return self._transit(TxnState.ONGOING, partitions=frozenset(self.partitions | added),
                             start_ms=start, now_ms=now_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> TxnTransit:
        """PrepareCommit / PrepareAbort, asked by the producer (EndTxn)."""
        return self._transit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                             now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """CompleteCommit / CompleteAbort once every marker is written."""
        state = (TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT
                 else TxnState.COMPLETE_ABORT)
        return self._transit(state, partitions=frozenset(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        return self._transit(TxnState.DEAD, partitions=frozenset(), now_ms=now_ms)
