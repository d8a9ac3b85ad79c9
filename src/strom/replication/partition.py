"""A partition hosted by this broker: its replica state, and the rule that moves the high watermark.

The :class:`Partition` (Kafka's ``Partition``) owns what storage does not decide: the role
(leader or follower), the leader epoch, the in-sync replica set, every replica's log end
offset, the high watermark and the last stable offset. Storage (:class:`~strom.storage.log.Log`)
only appends, reads, truncates and rolls.

Rules (leader):

* **High watermark** = the smallest log end offset among the ISR (the leader's own log end
  included); it never moves back while this broker stays leader, never exceeds the leader's
  log end, and never falls below the log start. With one replica it is the log end.
* **Last stable offset** = the high watermark, or the first offset of the oldest transaction
  still open below it, whichever is smaller (producer state keeps the open transactions).
* **acks=-1**: refused with NOT_ENOUGH_REPLICAS before anything is appended when the ISR is
  smaller than ``min.insync.replicas``; acknowledged once the high watermark passes the
  appended records, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
  ``min.insync.replicas`` in the meantime.

The ISR is an immutable :class:`IsrState` value, replaced whole (Kafka's sealed
``PartitionState``). Followers' log ends are reported by their fetches
(:meth:`Partition.update_follower_fetch_state`); the leader changes the ISR itself:

* **expand**: a follower outside the ISR whose log end reached the high watermark and the
  start offset of the current leader epoch is proposed for the ISR — only if its broker is
  registered in the metadata image (``eligible``; Kafka's KIP-841 rule: a broker whose
  session expired, or that is shutting down, may still fetch but must not be added back,
  else the leader re-adds what the controller just removed and the ISR flaps);
* **shrink** (:meth:`Partition.maybe_shrink_isr`, periodic): ISR followers whose log end is
  not the leader's and that have not been caught up for ``replica.lag.time.max.ms`` are
  proposed for removal. A follower counts as caught up at a fetch that reached the leader's
  log end, or that reached the log end the leader had at the follower's previous fetch (as
  Kafka's ``lastCaughtUpTimeMs``: otherwise steady produce traffic would keep every follower
  "behind").

A proposal (:class:`IsrChange`) goes to ``on_isr_change`` (the replica manager writes it
through the metadata store) and the partition stays *pending* until an image with the same
leader epoch brings an ISR: while pending, no other change is proposed and the high watermark
waits for the *maximal* ISR (the committed ISR plus a replica being added: Kafka's
``PendingExpandIsr`` / ``PendingShrinkIsr``). An image whose ISR is still the committed one
leaves the proposal pending; any other ISR for the same epoch (the proposal, or one the
controller wrote) is adopted. A failed write (:meth:`Partition.isr_change_failed`) drops the
proposal so a later check proposes again. A new leader epoch always starts committed.

Consumers read up to the high watermark (or, with read_committed, the last stable offset,
with the aborted transactions overlapping the data read); followers read up to the leader's
log end. A follower's high watermark is the leader's as last reported to it, bounded by its
own log end (:meth:`Partition.update_follower_high_watermark`); consumers fetching from a
follower (KIP-392) read up to it.

Owned by the broker's event-loop thread (the :class:`ReplicaManager`); not thread-safe.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from strom.common.clock import Clock
from strom.common.errors import (
    KafkaError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from strom.common.types import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    TopicPartition,
)
from strom.storage.log import AppendResult, Log, ReadResult
from strom.storage.log_validator import AppendOrigin
from strom.storage.txn_verification import VerificationGuard

log = logging.getLogger("strom.replication.partition")


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


class FetchIsolation(enum.Enum):
    """How far a read may go: the log end (followers), the high watermark (consumers), or the
    last stable offset (read_committed consumers)."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


@dataclass(frozen=True, slots=True)
class ProducerView:
    """One active producer of a partition, as DescribeProducers shows it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True, slots=True)
class IsrChange:
    """An ISR the leader of ``tp`` proposed at ``leader_epoch`` in place of ``from_isr`` (not
    yet in metadata; a write finding another ISR than ``from_isr`` must not happen)."""

    tp: TopicPartition
    leader_epoch: int
    isr: frozenset[int]
    from_isr: frozenset[int]


@dataclass(frozen=True, slots=True)
class IsrState:
    """The committed in-sync replica set and the change proposed for it, if any (replaced
    whole, never mutated)."""

    isr: frozenset[int]
    pending: IsrChange | None = None
    #: the metadata epoch from which every image reflects ``pending``'s write (or a later
    #: change): set once the write is known to have happened, None before.
    written_at: int | None = None

    @property
    def maximal(self) -> frozenset[int]:
        """The replicas the high watermark must wait for: the committed ISR, plus a replica
        being added while an expansion is pending (a pending shrink still waits for all)."""
        return self.isr if self.pending is None else self.isr | self.pending.isr


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower, from its fetches."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1  # as its fetches report it (-1: not yet, or before Fetch v5)
    last_caught_up_ms: int = -1
    last_fetch_ms: int = -1
    last_fetch_leader_log_end: int = -1  # the leader's log end at the previous fetch


HighWatermarkListener = Callable[[TopicPartition], None]
IsrChangeListener = Callable[[IsrChange], None]


class Partition:
    """One hosted partition replica. Created by the :class:`ReplicaManager` from metadata."""

    def __init__(
        self,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        log: Log,
        local_id: int,
        clock: Clock,
        *,
        internal: bool = False,
        min_insync_replicas: int = 1,
        on_high_watermark: HighWatermarkListener | None = None,
        on_isr_change: IsrChangeListener | None = None,
        eligible: Callable[[int], bool] | None = None,
    ) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self.clock = clock
        self.internal = internal
        self.min_insync_replicas = min_insync_replicas
        #: Whether a broker may join the ISR (registered in the current image); None: any.
        self.eligible = eligible
        self.role = Role.FOLLOWER
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr_state = IsrState(frozenset())
        self.remote: dict[int, ReplicaState] = {}
        self._metadata_epoch = -1  # the epoch of the last image make_leader saw
        self._high_watermark = log.log_start_offset
        self._on_high_watermark = on_high_watermark
        self._on_isr_change = on_isr_change
        self._publish_stable()

    # ------------------------------------------------------------------------------------
    # offsets
    # ------------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def active_producers(self) -> list[ProducerView]:
        """The producers the partition keeps state for (idempotent and transactional)."""
        return [ProducerView(e.producer_id, e.epoch, e.last_seq, e.last_timestamp,
                             e.coordinator_epoch,
                             -1 if e.txn_first_offset is None else e.txn_first_offset)
                for e in self.log.producer_state.producers.values()]

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        """Whether the producer's transaction already wrote to this partition (no marker yet)."""
        return self.log.producer_state.is_ongoing(producer_id)

    def start_transaction_verification(self, producer_id: int) -> VerificationGuard | None:
        """KIP-890: the guard the append of the producer's first transactional batch here
        must carry once its coordinator has vouched for it; None when its transaction is
        already open here (see :meth:`strom.storage.log.Log.start_transaction_verification`)."""
        return self.log.start_transaction_verification(producer_id)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self._first_unstable_offset()
        hw = self._high_watermark
        return hw if first_unstable is None or first_unstable >= hw else first_unstable

    def _first_unstable_offset(self) -> int | None:
        return self.log.producer_state.first_unstable_offset()

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def isr(self) -> frozenset[int]:
        return self.isr_state.isr

    def initialize_high_watermark(self, checkpointed: int) -> None:
        """Restore the high watermark from ``replication-offset-checkpoint``: clamped to
        ``[log start, log end]`` (a crash may have cut the log below the checkpoint)."""
        self._set_high_watermark(
            min(max(checkpointed, self.log.log_start_offset), self.log.log_end_offset))

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = offset
        # Transactions ended by a marker below the high watermark stop being unstable.
        self.log.producer_state.on_high_watermark(offset)
        self._publish_stable()

    def _publish_stable(self) -> None:
        """Tell storage how far records are committed and stable (bounds the cleaner)."""
        self.log.stable_end = self.last_stable_offset

    # ------------------------------------------------------------------------------------
    # role changes (from metadata)
    # ------------------------------------------------------------------------------------
    def make_leader(self, leader_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...],
                    metadata_epoch: int = -1) -> bool:
        """Become (or stay) leader at ``leader_epoch`` as the image of ``metadata_epoch``
        says; True if this is a new leadership (the role or the epoch changed). A new epoch
        starts at the current log end in the leader epoch cache, as in Kafka."""
        changed = self.role is not Role.LEADER or leader_epoch != self.leader_epoch
        if changed and leader_epoch >= 0 and leader_epoch > self.log.latest_epoch:
            # A log without records (a new partition) writes the entry before its first
            # append instead of now: it means nothing until then, and creating thousands of
            # partitions would otherwise cost an fsync each.
            empty = self.log.log_end_offset == self.log.log_start_offset
            try:
                self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset,
                                              flush=not empty)
                if empty:
                    self.log.leader_epochs.dirty = True
            except OSError as exc:  # kept in memory; written before the next append
                log.warning("%s: cannot write the leader epoch checkpoint (%s); it is "
                            "written before the next append", self.tp, exc)
        if changed:
            now = self.clock.now_ms()
            # In-sync followers count as caught up now; the others must catch up first.
            self.remote = {r: ReplicaState(r, last_caught_up_ms=now if r in isr else 0)
                           for r in replicas if r != self.local_id}
        else:
            for r in replicas:
                if r != self.local_id and r not in self.remote:
                    self.remote[r] = ReplicaState(r)
            for r in [r for r in self.remote if r not in replicas]:
                del self.remote[r]
        self.role = Role.LEADER
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self._metadata_epoch = max(self._metadata_epoch, metadata_epoch)
        pending, written_at = self.isr_state.pending, self.isr_state.written_at
        if (changed or pending is None or frozenset(isr) != self.isr_state.isr
                or (written_at is not None and metadata_epoch >= written_at)):
            # committed (or the controller's, which may have undone the written proposal)
            self.isr_state = IsrState(frozenset(isr))
        self.maybe_increment_high_watermark()
        return changed

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: tuple[int, ...]
                      ) -> bool:
        """Become (or stay) a follower of ``leader_id``; True if the role or epoch changed."""
        changed = self.role is not Role.FOLLOWER or leader_epoch != self.leader_epoch
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr_state = IsrState(frozenset())
        self.remote = {}
        return changed

    # ------------------------------------------------------------------------------------
    # follower log changes (the fetcher's truncation and log start)
    # ------------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Follower: make ``offset`` the log end (the high watermark never exceeds it); leader
        epochs starting at or after it go too, even those without records."""
        self.log.truncate_to(offset)
        self.log.leader_epochs.truncate_from_end(offset)
        if self._high_watermark > self.log.log_end_offset:
            self._set_high_watermark(self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower: drop the whole log and continue at ``offset`` (the leader's log start
        is past this log's end)."""
        self.log.truncate_fully_and_start_at(offset)
        self._set_high_watermark(offset)

    def update_follower_log_start(self, leader_log_start: int) -> None:
        """Follower: the leader's log start moved up (retention, DeleteRecords); follow it
        as far as this replica's high watermark."""
        target = min(leader_log_start, self._high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records_before(target)

    # ------------------------------------------------------------------------------------
    # appends
    # ------------------------------------------------------------------------------------
    def append_as_leader(self, records: memoryview, required_acks: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT,
                         verification_guard: VerificationGuard | None = None) -> AppendResult:
        """Validate and append a client's or a coordinator's payload (``origin``: only a
        client's batches pass the client checks and producer-sequence checks); may move the
        high watermark.

        Only the transaction coordinator writes control batches (clients' are refused with
        INVALID_RECORD by the log's validator). A producer's first transactional batch here
        needs ``verification_guard`` (KIP-890; :meth:`start_transaction_verification`).
        Raises NotLeaderOrFollower when not the leader, NotEnoughReplicas for acks=-1 with too
        small an ISR (nothing appended), and whatever the log refuses. Once the log took the
        records nothing raises: a failing high-watermark listener is logged."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"this broker is not the leader of {self.tp} (leader: {self.leader_id})")
        if required_acks == -1 and len(self.isr_state.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the in-sync replicas of {self.tp} ({len(self.isr_state.isr)}) are fewer "
                f"than min.insync.replicas ({self.min_insync_replicas})")
        result = self.log.append(records, leader_epoch=self.leader_epoch,
                                 now_ms=self.clock.now_ms(), origin=origin,
                                 verification_guard=verification_guard)
        if not result.duplicate:
            self.maybe_increment_high_watermark()
        return result

    def append_as_follower(self, records: memoryview) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and epochs."""
        if self.role is not Role.FOLLOWER:
            raise NotLeaderOrFollowerError(f"this broker leads {self.tp}; it does not follow")
        return self.log.append_as_follower(records)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark follows the leader's, bounded by its own log end."""
        if self.role is Role.FOLLOWER:
            hw = min(leader_high_watermark, self.log.log_end_offset)
            if hw != self._high_watermark:
                self._set_high_watermark(hw)
                self._notify_high_watermark()

    # ------------------------------------------------------------------------------------
    # the leader's view of its followers
    # ------------------------------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: everything below it is on that replica
        (and nothing below ``log_start_offset``, its log start, any more).

        Records when it was last caught up (for ISR shrinking by ``replica.lag.time.max.ms``)
        and may move the high watermark."""
        state = self.remote.get(replica_id)
        if state is None or self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"{replica_id} is not a follower of {self.tp} led by this broker")
        leader_end = self.log.log_end_offset
        if not self.log.log_start_offset <= fetch_offset <= leader_end:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} of follower {replica_id} is outside "
                f"[{self.log.log_start_offset}, {leader_end}] of {self.tp}")
        now = self.clock.now_ms()
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_log_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_leader_log_end = leader_end
        state.last_fetch_ms = now
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        self._maybe_expand_isr(state)
        self.maybe_increment_high_watermark()

    # ------------------------------------------------------------------------------------
    # ISR changes (see the module docstring)
    # ------------------------------------------------------------------------------------
    def _leader_epoch_start_offset(self) -> int:
        for epoch, start in reversed(self.log.leader_epochs.entries()):
            if epoch <= self.leader_epoch:
                return start
        return self.log.log_start_offset

    def _maybe_expand_isr(self, state: ReplicaState) -> None:
        current = self.isr_state
        if current.pending is not None or state.broker_id in current.isr:
            return
        if self.eligible is not None and not self.eligible(state.broker_id):
            return
        if (state.log_end_offset >= self._high_watermark
                and state.log_end_offset >= self._leader_epoch_start_offset()):
            self._propose(current.isr | {state.broker_id})

    def maybe_shrink_isr(self, max_lag_ms: int) -> bool:
        """Propose removing the ISR followers that lag more than ``max_lag_ms``; True if a
        change was proposed."""
        current = self.isr_state
        if self.role is not Role.LEADER or current.pending is not None:
            return False
        now = self.clock.now_ms()
        leader_end = self.log.log_end_offset
        lagging = set()
        for replica_id in current.isr:
            state = self.remote.get(replica_id)
            if state is not None and state.log_end_offset != leader_end and (
                    now - state.last_caught_up_ms > max_lag_ms):
                lagging.add(replica_id)
        if not lagging:
            return False
        log.info("%s: shrinking the ISR from %s: %s lag more than %d ms", self.tp,
                 sorted(current.isr), sorted(lagging), max_lag_ms)
        self._propose(current.isr - lagging)
        return True

    def _propose(self, isr: frozenset[int]) -> None:
        change = IsrChange(self.tp, self.leader_epoch, isr, self.isr_state.isr)
        self.isr_state = IsrState(self.isr_state.isr, change)
        if self._on_isr_change is not None:
            self._on_isr_change(change)

    def isr_change_written(self, change: IsrChange, metadata_epoch: int) -> None:
        """The metadata write of ``change`` happened: every image from ``metadata_epoch``
        on holds it or a later change. Without this, an image skipping the write (the
        controller changed the ISR back before this broker read it) would look like one
        from before the write and leave the proposal pending for ever (no more ISR change,
        ever: an ISR below min.insync.replicas stays so)."""
        if self.isr_state.pending != change:
            return
        if self._metadata_epoch >= metadata_epoch:
            # the image already seen is the write's or later, and its ISR is the committed one
            self.isr_state = IsrState(self.isr_state.isr)
            self.maybe_increment_high_watermark()
        else:
            self.isr_state = IsrState(self.isr_state.isr, change, metadata_epoch)

    def isr_change_failed(self, change: IsrChange) -> None:
        """The metadata write of ``change`` did not happen: drop it (a later check may
        propose again)."""
        if self.isr_state.pending == change:
            self.isr_state = IsrState(self.isr_state.isr)
            self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end in the ISR if that is higher."""
        if self.role is not Role.LEADER:
            return False
        new_hw = self.log.log_end_offset
        for replica_id in self.isr_state.maximal:
            if replica_id == self.local_id:
                continue
            state = self.remote.get(replica_id)
            end = state.log_end_offset if state is not None else -1
            if end < new_hw:
                new_hw = end
        if new_hw <= self._high_watermark:
            return False
        self._set_high_watermark(new_hw)
        self._notify_high_watermark()
        return True

    def _notify_high_watermark(self) -> None:
        """Tell the listener (the replica manager: parked produces and fetches); its failure
        is logged, never raised into whoever moved the high watermark (an append that is on
        the log, a follower's fetch)."""
        if self._on_high_watermark is not None:
            try:
                self._on_high_watermark(self.tp)
            except Exception:
                log.exception("%s: high-watermark listener failed", self.tp)

    def check_enough_replicas_reach_offset(
        self, required_offset: int
    ) -> tuple[bool, KafkaError | None]:
        """For a waiting acks=-1 produce: (done, error). Done once the high watermark reached
        ``required_offset`` (the end of the appended records) or leadership was lost."""
        if self.role is not Role.LEADER:
            return True, NotLeaderOrFollowerError(f"leadership of {self.tp} moved")
        if self._high_watermark < required_offset:
            return False, None
        if len(self.isr_state.isr) < self.min_insync_replicas:
            return True, NotEnoughReplicasAfterAppendError(
                f"the in-sync replicas of {self.tp} shrank below min.insync.replicas "
                f"({self.min_insync_replicas}) after the append")
        return True, None

    # ------------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------------
    def upper_bound(self, isolation: FetchIsolation) -> int:
        if isolation is FetchIsolation.LOG_END:
            return self.log.log_end_offset
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        return self._high_watermark

    def read(
        self, offset: int, max_bytes: int, isolation: FetchIsolation, *, min_one: bool = True,
        fetch_only_leader: bool = True,
    ) -> ReadResult:
        """Read from ``offset`` up to what ``isolation`` allows. Consumers read from the
        leader, or with ``fetch_only_leader`` False (Fetch v11+, KIP-392) from a follower too,
        up to this replica's own high watermark / last stable offset (NOT_LEADER_OR_FOLLOWER
        otherwise). read_committed reads stop at the last stable offset and carry the aborted
        transactions overlapping what they return."""
        if (isolation is not FetchIsolation.LOG_END and fetch_only_leader
                and self.role is not Role.LEADER):
            raise NotLeaderOrFollowerError(f"this broker is not the leader of {self.tp}")
        return self.log.read(offset, max_bytes, upper_bound=self.upper_bound(isolation),
                             min_one=min_one,
                             aborted_transactions=isolation is FetchIsolation.TXN_COMMITTED)

    def list_offset(self, timestamp: int, isolation: FetchIsolation
                    ) -> tuple[int, int, int] | None:
        """ListOffsets: (offset, timestamp, leader epoch) for a timestamp or one of the special
        values (earliest, latest, max timestamp, earliest local, latest tiered, earliest
        pending upload); None when there is no such record — always for the two
        tiered-storage values, as Kafka without remote storage answers them. Latest is the
        high watermark (last stable offset for read_committed); a timestamp lookup never
        returns an offset at or past that bound."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"this broker is not the leader of {self.tp}")
        plog = self.log
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return plog.log_start_offset, -1, self.leader_epoch
        if timestamp == LATEST_TIMESTAMP:
            return self.upper_bound(isolation), -1, self.leader_epoch
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return None
        found = plog.max_timestamp() if timestamp == MAX_TIMESTAMP else (
            plog.offset_for_timestamp(timestamp))
        if found is None or found[0] >= self.upper_bound(isolation):
            return None
        return found

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) from the leader epoch cache."""
        return self.log.end_offset_for_epoch(leader_epoch)

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int
                        ) -> tuple[int, int] | None:
        """Fetch v12+ (KIP-320, KIP-595): whether a fetcher whose last fetched batch has
        ``last_fetched_epoch`` and that fetches from ``fetch_offset`` diverged from this
        log. None if not (read as usual); else (epoch, end offset) from the leader epoch
        cache — the largest epoch <= ``last_fetched_epoch`` and where it ends here — to be
        answered with no records: the fetcher truncates to it. As Kafka's
        ``Partition.readRecords``: an epoch above every cached one, and a fetch offset
        below the log start, raise OFFSET_OUT_OF_RANGE whether diverged or not."""
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            raise OffsetOutOfRangeError(
                f"{self.tp}: no end offset for the last fetched epoch {last_fetched_epoch}")
        if fetch_offset < self.log.log_start_offset:
            raise OffsetOutOfRangeError(
                f"{self.tp}: fetch offset {fetch_offset} is below the log start "
                f"{self.log.log_start_offset}")
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords (leader only): ``offset`` -1 means the high watermark; offsets above
        the high watermark are refused. Returns the new log start offset."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"this broker is not the leader of {self.tp}")
        target = self._high_watermark if offset == -1 else offset
        if target < 0 or target > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the high watermark is "
                f"{self._high_watermark}")
        return self.log.delete_records_before(target)

    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes()

    def __repr__(self) -> str:
        return (f"Partition({self.tp}, {self.role.value}, epoch={self.leader_epoch}, "
                f"isr={sorted(self.isr_state.isr)}, hw={self._high_watermark}, "
                f"leo={self.log.log_end_offset})")
