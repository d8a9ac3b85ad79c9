"""One ``__consumer_offsets`` partition's classic groups: a shard of the coordinator runtime.

Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), replay, group deletion and
ListGroups / DescribeGroups are here; the offset operations (OffsetCommit, TxnOffsetCommit,
OffsetFetch, OffsetDelete, expiry) are its base class in :mod:`.offsets`, and the error codes
in :mod:`.codes`.

Operations (:meth:`GroupShard.join_group`, :meth:`sync_group`, :meth:`commit_offsets` …)
validate a request against the current state; those that must persist something hand their
records to the runtime (:meth:`ShardContext.write`) with a commit and a failure continuation.
The runtime replays the records through :meth:`GroupShard.replay` only once the write is
committed, in offset order, then runs the commit continuation, which answers the client. A
failed write is never replayed; its failure continuation answers with Kafka's error (see
:func:`strom.coordinator.runtime.coordinator_error`) and undoes the protocol-session changes
made for it. A write not committed within ``offsets.commit.timeout.ms`` is answered then
(COORDINATOR_NOT_AVAILABLE) but stays pending: if it commits later it is replayed like any
other (offsets, deletions), so the shard's durable state always equals a replay of its log;
marks of writes in flight (offsets being committed, a group being deleted) stay until it
resolves.

Replay rules (the only place durable state changes):

* **OffsetCommit** records set or (tombstone) remove a committed offset — at load and live.
  Records of a batch with a producer id are transactional offset commits (TxnOffsetCommit):
  they wait in :class:`~strom.coordinator.group.txn_offsets.TxnOffsets` until their
  transaction's marker — a control record at load, :meth:`GroupShard.complete_transaction`
  live — makes them committed (commit) or drops them (abort).
* **GroupMetadata** records, *at load*, rebuild the group: generation, protocol, leader and
  members with their assignments (then :meth:`on_loaded` starts a session timer per member).
  *Live*, they never touch membership — the protocol already holds newer in-memory state (a
  member may have joined while the write was pending) — they only apply the committed
  assignment to the members of that generation, if the group is still at it.
* A GroupMetadata **tombstone** forgets the group (and its offsets), at load and live; live,
  the group is DEAD (its deletion was being written) and has no members.

Failure behaviour (Kafka's classic coordinator): an OffsetCommit whose write fails answers
each partition with the error, and the offset never becomes visible; a SyncGroup leader's
assignment write that fails answers every parked SyncGroup with the error and starts a new
rebalance; a static member's rejoin write that fails reverts the member-id swap and answers
the JoinGroup with the error; DeleteGroups / OffsetDelete answer the error (the group is
EMPTY again); offset-expiry and empty-group writes that fail are logged.

Timers (all through the :class:`Scheduler` seam, on the broker's event loop): a session timer
per member (a member with a parked JoinGroup or SyncGroup is kept alive), a timer per pending
member id (KIP-394), the rebalance timer (members that do not rejoin are removed), the initial
rebalance delay of an Empty group (``group.initial.rebalance.delay.ms``, extended while new
members arrive, never beyond the rebalance timeout) and the sync timer of CompletingRebalance.

Lifecycle: created LOADING by the runtime, :meth:`on_loaded` when the partition is replayed,
:meth:`on_unloaded` when this broker stops leading it. Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from strom.common.clock import Clock
from strom.common.errors import KafkaError
from strom.common.timer import Scheduler
from strom.coordinator.group.codes import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from strom.coordinator.group.consumer.groups import ConsumerGroups, Topics
from strom.coordinator.group.consumer.records import (
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from strom.coordinator.group.model import (
    Group,
    GroupSettings,
    GroupState,
    GroupSummary,
    JoinCallback,
    JoinResult,
    Member,
    MemberSummary,
    SyncCallback,
    SyncResult,
)
from strom.coordinator.group.offsets import OffsetOperations
from strom.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.coordinator.group.txn_offsets import TxnOffsets
from strom.coordinator.runtime import (
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    ReplayRecord,
    ShardContext,
    answer_once,
    coordinator_error,
)
from strom.protocol.records.control import ControlType, control_type_of

log = logging.getLogger("strom.coordinator.group")


JoinArgs = tuple[str, str, int, int, str, list[tuple[str, bytes]]]


class GroupShard(OffsetOperations):
    """The classic groups whose id maps to one ``__consumer_offsets`` partition."""

    def __init__(self, context: ShardContext, scheduler: Scheduler, clock: Clock,
                 settings: GroupSettings, topics: Topics = dict) -> None:
        self.context = context
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.groups: dict[str, Group] = {}
        self.txn_offsets = TxnOffsets()
        self.loaded = False
        self.closed = False
        #: The KIP-848 consumer groups of this partition (same ids, same offsets).
        self.consumer = ConsumerGroups(context, scheduler, clock, settings.consumer, topics,
                                       self._is_classic)

    def _is_classic(self, group_id: str) -> bool:
        """A classic group with members (or mid-rebalance) holds ``group_id``."""
        group = self.groups.get(group_id)
        return group is not None and (bool(group.members) or group.state not in (
            GroupState.EMPTY, GroupState.DEAD))

    def _is_consumer(self, group_id: str) -> bool:
        return group_id in self.consumer.groups

    def _consumer_commit_errors(self, group_id: str, member_id: str, epoch: int,
                                stale_epoch_error: int, partitions: list[tuple[str, int]]
                                ) -> list[int] | None:
        return self.consumer.validate_commit(group_id, member_id, epoch, stale_epoch_error,
                                             partitions)

    def _consumer_txn_commit_error(self, group_id: str, member_id: str,
                                   epoch: int) -> int | None:
        return self.consumer.validate_txn_commit(group_id, member_id, epoch)

    def _consumer_subscribed(self, group_id: str) -> set[str] | None:
        """The topics a KIP-848 group's members subscribe to (empty: no members); None when
        ``group_id`` is not a consumer group."""
        return self.consumer.subscribed_topics(group_id)

    def _consumer_tombstones(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """The encoded deletion of an empty consumer group (none if not one)."""
        if not self._is_consumer(group_id):
            return []
        records = self.consumer.deletion_records(group_id)
        if isinstance(records, int):
            return []
        return [(encode_consumer_key(k), encode_consumer_value(v)) for k, v in records]

    # ------------------------------------------------------------------------------------
    # runtime callbacks: replay, loaded, unloaded
    # ------------------------------------------------------------------------------------
    def replay(self, record: ReplayRecord) -> None:
        if record.is_control:
            if record.producer_id >= 0:
                self._replay_marker(record)
            return
        if record.key is None:
            return
        try:
            key = decode_key(record.key)
            if key is None:
                consumer_key = decode_consumer_key(record.key)
                if consumer_key is not None and record.producer_id < 0:
                    self.consumer.replay(consumer_key,
                                         decode_consumer_value(consumer_key, record.value))
                return
            value = decode_value(key, record.value)
        except RecordFormatError as exc:
            log.warning("skipping undecodable record at %s-%d offset %d: %s",
                        "__consumer_offsets", self.context.partition, record.offset, exc)
            return
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            if record.producer_id >= 0:
                self.txn_offsets.add(record.producer_id, key.group, (key.topic, key.partition),
                                     value)
            else:
                self._replay_offset(key, value)
        elif record.producer_id >= 0:
            return  # group metadata is never transactional
        else:
            assert value is None or isinstance(value, GroupMetadataValue)
            self._replay_group(key, value)

    def _replay_marker(self, record: ReplayRecord) -> None:
        try:
            kind = control_type_of(record.key)
        except KafkaError:
            return
        if kind in (ControlType.COMMIT, ControlType.ABORT):
            self.complete_transaction(record.producer_id, kind is ControlType.COMMIT)

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction marker is in this partition: its pending offsets become
        committed (commit) or are dropped (abort)."""
        def apply(group_id: str, tp: tuple[str, int], value: OffsetCommitValue) -> None:
            self._group_or_new(group_id).offsets[tp] = value
        count = self.txn_offsets.complete(producer_id, commit, apply)
        if count:
            log.debug("%s-%d: producer %d's transaction %s %d offsets", "__consumer_offsets",
                      self.context.partition, producer_id,
                      "committed" if commit else "dropped", count)

    def _replay_offset(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is None:
            group = self.groups.get(key.group)
            if group is not None:
                group.offsets.pop((key.topic, key.partition), None)
            return
        self._group_or_new(key.group).offsets[(key.topic, key.partition)] = value

    def _replay_group(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            self.txn_offsets.drop_group(key.group)
            group = self.groups.pop(key.group, None)
            if group is not None:
                group.state = GroupState.DEAD
                self._cancel_all(group)
                self._answer_parked(group, UNKNOWN_MEMBER_ID)
            return
        if self.loaded:
            self._confirm_metadata(key.group, value)
        else:
            self._load_metadata(key.group, value)

    def _load_metadata(self, group_id: str, value: GroupMetadataValue) -> None:
        """Load-time replay: the record is the group's whole durable state."""
        group = self._group_or_new(group_id)
        group.protocol_type = value.protocol_type
        group.generation = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp = value.current_state_timestamp
        group.members = {}
        group.static_members = {}
        for meta in value.members:
            group.members[meta.member_id] = Member(
                meta.member_id, meta.group_instance_id, meta.client_id, meta.client_host,
                meta.rebalance_timeout, meta.session_timeout, value.protocol_type,
                [(value.protocol, meta.subscription)] if value.protocol else [],
                assignment=meta.assignment,
            )
            if meta.group_instance_id is not None:
                group.static_members[meta.group_instance_id] = meta.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    def _confirm_metadata(self, group_id: str, value: GroupMetadataValue) -> None:
        """Live replay: apply the committed assignment if the group is still at its
        generation; membership is the protocol's (in memory), never overwritten here."""
        group = self.groups.get(group_id)
        if group is None or group.generation != value.generation:
            return
        for meta in value.members:
            member = group.members.get(meta.member_id)
            if member is not None:
                member.assignment = meta.assignment

    def on_loaded(self) -> None:
        """Start a session timer for each replayed member (members that are gone expire)."""
        self.loaded = True
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group, member)
        self.consumer.on_loaded()
        log.debug("__consumer_offsets-%d: %d groups loaded (epoch %d)", self.context.partition,
                 len(self.groups), self.context.epoch)

    def on_unloaded(self) -> None:
        """This broker no longer coordinates these groups: answer parked requests
        NOT_COORDINATOR and cancel every timer."""
        self.closed = True
        for group in self.groups.values():
            self._cancel_all(group)
            self._answer_parked(group, NOT_COORDINATOR)
        self.consumer.on_unloaded()

    # ------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------
    def _write(self, records: list[Record], on_commit: Callable[[], None],
               on_failure: Callable[[KafkaError], None],
               on_timeout: Callable[[KafkaError], None] | None = None) -> None:
        raw = [(encode_key(k), encode_value(v)) for k, v in records]
        self.context.write(raw, on_commit=on_commit, on_failure=on_failure,
                           on_timeout=on_timeout)

    def _group_or_new(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = Group(group_id)
            self.groups[group_id] = group
        return group

    def _metadata_record(self, group: Group, members: Iterable[Member] | None = None,
                         assignments: dict[str, bytes] | None = None) -> Record:
        chosen = list(group.members.values()) if members is None else list(members)
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=self.clock.now_ms(),
            members=tuple(
                MemberMetadata(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms,
                    m.metadata(group.protocol_name),
                    (assignments or {}).get(m.member_id, m.assignment),
                )
                for m in chosen
            ),
        )
        return GroupMetadataKey(group.group_id), value

    def _is_current(self, group: Group) -> bool:
        return not self.closed and self.groups.get(group.group_id) is group

    # ------------------------------------------------------------------------------------
    # JoinGroup
    # ------------------------------------------------------------------------------------
    def join_group(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member_id: bool,
        callback: JoinCallback,
    ) -> None:
        """Answer through ``callback`` — at once, or when the join phase completes."""
        log.debug("join %s member=%r instance=%r", group_id, member_id, group_instance_id)
        s = self.settings
        if not group_id:
            return callback(JoinResult(INVALID_GROUP_ID, member_id))
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return callback(JoinResult(INVALID_SESSION_TIMEOUT, member_id))
        if self.consumer.groups.get(group_id) is not None and (
                self.consumer.groups[group_id].members):
            # online migration between the protocols is not built: Kafka's answer with
            # group.consumer.migration.policy=disabled
            return callback(JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return callback(JoinResult(UNKNOWN_MEMBER_ID, member_id))
            group = Group(group_id)
            self.groups[group_id] = group
        if group.state is GroupState.DEAD:
            return callback(JoinResult(COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports(protocol_type, protocols):
            return callback(JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
        args: JoinArgs = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                          protocol_type, protocols)
        if not member_id:
            if len(group.members) + len(group.pending_members) >= s.max_size:
                return callback(JoinResult(GROUP_MAX_SIZE_REACHED))
            new_id = f"{client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                old_id = group.static_members.get(group_instance_id)
                if old_id is not None and old_id in group.members:
                    return self._rejoin_static(group, old_id, new_id, group_instance_id, args,
                                               callback)
                return self._add_member(group, new_id, group_instance_id, args, callback)
            if require_known_member_id:
                group.pending_members[new_id] = self.scheduler.call_later(
                    session_timeout_ms, lambda: self._expire_pending(group, new_id)
                )
                return callback(JoinResult(MEMBER_ID_REQUIRED, new_id))
            return self._add_member(group, new_id, None, args, callback)
        if member_id in group.pending_members:
            return self._add_member(group, member_id, group_instance_id, args, callback)
        error = self._check_member(group, member_id, group_instance_id)
        if error:
            return callback(JoinResult(error, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member(group, member, args, callback)
        if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            unchanged = member.protocols == list(protocols)
            if unchanged and (state is GroupState.COMPLETING_REBALANCE
                              or not group.is_leader(member_id)):
                self._touch(group, member)
                return callback(self._current_join_result(group, member_id))
            return self._update_member(group, member, args, callback)
        return callback(JoinResult(UNKNOWN_MEMBER_ID, member_id))

    def _check_member(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's member validation: static instance fencing first, then the member id."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if known != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    def _current_join_result(self, group: Group, member_id: str) -> JoinResult:
        leader = group.is_leader(member_id)
        return JoinResult(
            NONE, member_id, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "",
            self._member_list(group) if leader else [],
        )

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()]

    def _add_member(self, group: Group, member_id: str, instance_id: str | None,
                    args: JoinArgs, callback: JoinCallback) -> None:
        client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols = args
        timer = group.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                        session_ms, protocol_type, list(protocols), join_callback=callback)
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            member.is_new = True
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if group.leader_id is None or group.leader_id not in group.members:
            group.leader_id = member_id
        if instance_id is not None:
            group.static_members[instance_id] = member_id
        group.new_member_added = True
        self._schedule_session(group, member)
        self._maybe_prepare_rebalance(group)

    def _update_member(self, group: Group, member: Member, args: JoinArgs,
                       callback: JoinCallback) -> None:
        _client_id, _host, session_ms, rebalance_ms, _ptype, protocols = args
        if member.join_callback is not None and member.join_callback is not callback:
            # A retried join (e.g. from a new connection) supersedes the parked one.
            stale, member.join_callback = member.join_callback, None
            stale(JoinResult(REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = list(protocols)
        member.session_timeout_ms = session_ms
        member.rebalance_timeout_ms = rebalance_ms
        member.join_callback = callback
        self._touch(group, member)
        self._maybe_prepare_rebalance(group)

    def _rejoin_static(self, group: Group, old_id: str, new_id: str, instance_id: str,
                       args: JoinArgs, callback: JoinCallback) -> None:
        """KIP-345: a static member restarted. The old member id is fenced; in a Stable group
        whose protocols this does not change, the member keeps its assignment and the
        generation stays: the id swap happens in memory, one GroupMetadata record persists
        it, and the JoinGroup is answered when that record commits (reverted if it fails)."""
        old = group.members[old_id]
        if old.join_callback is not None:
            stale_join, old.join_callback = old.join_callback, None
            stale_join(JoinResult(FENCED_INSTANCE_ID, old_id))
        if old.sync_callback is not None:
            stale_sync, old.sync_callback = old.sync_callback, None
            stale_sync(SyncResult(FENCED_INSTANCE_ID))
        client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols = args
        new_member = Member(new_id, instance_id, client_id, client_host, rebalance_ms,
                            session_ms, protocol_type, list(protocols),
                            assignment=old.assignment)
        if group.state is GroupState.STABLE and self._same_subscription(group, old, new_member):
            callback = answer_once(callback)
            was_leader = group.is_leader(old_id)
            self._swap_member(group, old, new_member)
            if was_leader:
                group.leader_id = new_id

            def committed() -> None:
                if not self._is_current(group) or group.members.get(new_id) is not new_member:
                    return callback(JoinResult(UNKNOWN_MEMBER_ID, new_id))
                leader = group.is_leader(new_id)
                return callback(JoinResult(
                    NONE, new_id, group.generation, group.protocol_type, group.protocol_name,
                    group.leader_id or "", self._member_list(group) if leader else [],
                    skip_assignment=leader,
                ))

            def failed(exc: KafkaError) -> None:
                log.warning("group %s: cannot store the rejoin of static member %s: %s",
                            group.group_id, instance_id, exc)
                if self._is_current(group) and group.members.get(new_id) is new_member:
                    self._swap_member(group, new_member, old)
                    if group.leader_id == new_id:
                        group.leader_id = old_id
                callback(JoinResult(coordinator_error(exc), ""))

            # not stored in time: answered and reverted as a failure (Kafka's timed-out
            # append future); the record, if it commits later, only confirms assignments
            self._write([self._metadata_record(group)], committed, failed, failed)
            return
        # Otherwise replace the member in memory and rebalance.
        self._drop_member(group, old_id)
        new_member.join_callback = callback
        group.members[new_id] = new_member
        group.static_members[instance_id] = new_id
        if group.leader_id is None or group.leader_id == old_id:
            group.leader_id = new_id
        self._schedule_session(group, new_member)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _swap_member(self, group: Group, out: Member, into: Member) -> None:
        """Put ``into`` in ``out``'s place (same position, same instance id)."""
        group.members = {(into.member_id if mid == out.member_id else mid):
                         (into if mid == out.member_id else m)
                         for mid, m in group.members.items()}
        if out.heartbeat_timer is not None:
            out.heartbeat_timer.cancel()
            out.heartbeat_timer = None
        if into.group_instance_id is not None:
            group.static_members[into.group_instance_id] = into.member_id
        self._schedule_session(group, into)

    @staticmethod
    def _same_subscription(group: Group, old: Member, new: Member) -> bool:
        if old.protocol_names() and old.protocol_names() != new.protocol_names() and (
            len(old.protocols) > 1
        ):
            return False
        if group.protocol_name not in new.protocol_names():
            return False
        if group.protocol_type == "consumer":
            return old.topics(group.protocol_name) == new.topics(group.protocol_name)
        return old.metadata(group.protocol_name) == new.metadata(group.protocol_name)

    # -- rebalance ---------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                           GroupState.EMPTY):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    def _prepare_rebalance(self, group: Group) -> None:
        log.debug("group %s: preparing rebalance (was %s, generation %d)", group.group_id,
                  group.state.value, group.generation)
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._propagate_sync_error(group, REBALANCE_IN_PROGRESS)
        self._cancel(group, "sync_timer")
        self._cancel(group, "rebalance_timer")
        was_empty = group.state is GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.state_timestamp = self.clock.now_ms()
        rebalance_ms = group.max_rebalance_timeout_ms()
        if was_empty and self.settings.initial_rebalance_delay_ms > 0:
            delay = min(self.settings.initial_rebalance_delay_ms, rebalance_ms)
            group.initial_delay_remaining_ms = max(rebalance_ms - delay, 0)
            group.new_member_added = False
            group.rebalance_timer = self.scheduler.call_later(
                delay, lambda: self._initial_delay_expired(group))
            return
        group.initial_delay_remaining_ms = None
        group.rebalance_timer = self.scheduler.call_later(
            rebalance_ms, lambda: self._complete_join(group))
        self._maybe_complete_join(group)

    def _initial_delay_expired(self, group: Group) -> None:
        remaining = group.initial_delay_remaining_ms or 0
        if group.new_member_added and remaining > 0:
            delay = min(self.settings.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay
            group.new_member_added = False
            group.rebalance_timer = self.scheduler.call_later(
                delay, lambda: self._initial_delay_expired(group))
            return
        group.rebalance_timer = None
        group.initial_delay_remaining_ms = None
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (group.state is GroupState.PREPARING_REBALANCE
                and group.initial_delay_remaining_ms is None and group.all_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, start a new generation (in
        memory; an emptied group's new generation is also written, failures logged)."""
        if group.state is not GroupState.PREPARING_REBALANCE or not self._is_current(group):
            return
        self._cancel(group, "rebalance_timer")
        group.initial_delay_remaining_ms = None
        for member in [m for m in group.members.values() if m.join_callback is None]:
            log.info("group %s: member %s did not rejoin in time; removed", group.group_id,
                     member.member_id)
            self._drop_member(group, member.member_id)
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.state = GroupState.EMPTY
            group.state_timestamp = self.clock.now_ms()
            generation = group.generation

            def failed(exc: KafkaError) -> None:
                log.warning("group %s: cannot store the empty generation %d: %s",
                            group.group_id, generation, exc)

            self._write([self._metadata_record(group, [])], lambda: None, failed)
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        group.state_timestamp = self.clock.now_ms()
        group.pending_sync = set(group.members)
        log.debug("group %s: generation %d with %d members, protocol %s, leader %s",
                  group.group_id, group.generation, len(group.members), group.protocol_name,
                  group.leader_id)
        members = self._member_list(group)
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            result = JoinResult(
                NONE, member.member_id, group.generation, group.protocol_type,
                group.protocol_name, group.leader_id or "",
                members if group.is_leader(member.member_id) else [],
            )
            self._schedule_session(group, member)
            if callback is not None:
                callback(result)
        generation = group.generation
        group.sync_timer = self.scheduler.call_later(
            group.max_rebalance_timeout_ms(), lambda: self._sync_expired(group, generation))

    def _sync_expired(self, group: Group, generation: int) -> None:
        """Members that did not SyncGroup within the rebalance timeout are removed."""
        group.sync_timer = None
        if (group.state is not GroupState.COMPLETING_REBALANCE
                or group.generation != generation):
            return
        for member_id in list(group.pending_sync):
            self._drop_member(group, member_id)
        group.pending_sync.clear()
        self._prepare_rebalance(group)

    # ------------------------------------------------------------------------------------
    # SyncGroup
    # ------------------------------------------------------------------------------------
    def sync_group(
        self, *, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:
        group = self.groups.get(group_id)
        if not group_id:
            return callback(SyncResult(INVALID_GROUP_ID))
        if group is None:
            return callback(SyncResult(UNKNOWN_MEMBER_ID))
        if group.state is GroupState.DEAD:
            return callback(SyncResult(COORDINATOR_NOT_AVAILABLE))
        error = self._check_member(group, member_id, group_instance_id)
        if error:
            return callback(SyncResult(error))
        if generation != group.generation:
            return callback(SyncResult(ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return callback(SyncResult(INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return callback(SyncResult(REBALANCE_IN_PROGRESS))
        if group.state is GroupState.STABLE:
            self._touch(group, member)
            return callback(self._sync_result(group, member.assignment))
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return callback(SyncResult(UNKNOWN_MEMBER_ID))
        member.sync_callback = callback
        group.pending_sync.discard(member_id)
        self._touch(group, member)
        if not group.is_leader(member_id):
            return None
        full = {mid: assignments.get(mid, b"") for mid in group.members}
        generation = group.generation

        def still_waiting() -> bool:
            return (self._is_current(group) and group.generation == generation
                    and group.state is GroupState.COMPLETING_REBALANCE)

        def committed() -> None:
            # Replay applied the assignment to this generation's members.
            if not still_waiting():
                return  # a rebalance (or unload) already answered the parked requests
            self._cancel(group, "sync_timer")
            group.pending_sync.clear()
            group.state = GroupState.STABLE
            group.state_timestamp = self.clock.now_ms()
            for m in list(group.members.values()):
                if m.sync_callback is not None:
                    cb, m.sync_callback = m.sync_callback, None
                    cb(self._sync_result(group, m.assignment))

        def failed(exc: KafkaError) -> None:
            if not still_waiting():
                return  # answered already (at the timeout, or by a rebalance)
            log.warning("group %s: cannot store the assignment of generation %d: %s",
                        group_id, generation, exc)
            self._propagate_sync_error(group, coordinator_error(exc))
            self._prepare_rebalance(group)

        # not stored in time: the members get the error and rejoin, as after a failure
        self._write([self._metadata_record(group, None, full)], committed, failed, failed)
        return None

    @staticmethod
    def _sync_result(group: Group, assignment: bytes) -> SyncResult:
        return SyncResult(NONE, group.protocol_type, group.protocol_name, assignment)

    def _propagate_sync_error(self, group: Group, error: int) -> None:
        for member in group.members.values():
            if member.sync_callback is not None:
                callback, member.sync_callback = member.sync_callback, None
                callback(SyncResult(error))

    # ------------------------------------------------------------------------------------
    # Heartbeat, LeaveGroup, session expiry
    # ------------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation: int) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error = self._check_member(group, member_id, group_instance_id)
        if error:
            return error
        if generation != group.generation:
            return ILLEGAL_GENERATION
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return UNKNOWN_MEMBER_ID
        self._touch(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """(group-level error, one error per leaving (member id, instance id)); v0-2
        responses carry the member's error at the top level (the handler's job)."""
        group = self.groups.get(group_id)
        if not group_id:
            return INVALID_GROUP_ID, [INVALID_GROUP_ID] * len(leaving)
        if group is None:
            return UNKNOWN_MEMBER_ID, [UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE, [COORDINATOR_NOT_AVAILABLE] * len(leaving)
        errors: list[int] = []
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None or known not in group.members:
                    errors.append(UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.pop(member_id).cancel()
                errors.append(NONE)
                removed = True
                continue
            if member_id not in group.members:
                errors.append(UNKNOWN_MEMBER_ID)
                continue
            log.info("group %s: member %s left", group_id, member_id)
            self._drop_member(group, member_id, answer=UNKNOWN_MEMBER_ID)
            errors.append(NONE)
            removed = True
        if removed:
            self._after_removal(group)
        return NONE, errors

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    def _schedule_session(self, group: Group, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self.scheduler.call_later(
            member.session_timeout_ms, lambda: self._session_expired(group, member))

    def _touch(self, group: Group, member: Member) -> None:
        self._schedule_session(group, member)

    def _session_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member or not self._is_current(group):
            return
        if member.join_callback is not None or member.sync_callback is not None:
            self._schedule_session(group, member)  # parked in a rebalance: kept alive
            return
        log.info("group %s: member %s session timed out", group.group_id, member.member_id)
        self._drop_member(group, member.member_id)
        self._after_removal(group)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._maybe_complete_join(group)

    def _drop_member(self, group: Group, member_id: str, answer: int | None = None) -> None:
        """Remove a member from memory (protocol-session part of a removal)."""
        member = group.members.pop(member_id, None)
        if member is None:
            return
        group.pending_sync.discard(member_id)
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        if member.group_instance_id is not None and group.static_members.get(
            member.group_instance_id) == member_id:
            del group.static_members[member.group_instance_id]
        if member.join_callback is not None:
            callback, member.join_callback = member.join_callback, None
            callback(JoinResult(answer or UNKNOWN_MEMBER_ID, member_id))
        if member.sync_callback is not None:
            sync, member.sync_callback = member.sync_callback, None
            sync(SyncResult(answer or UNKNOWN_MEMBER_ID))
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)

    # ------------------------------------------------------------------------------------
    # group deletion (offset operations: offsets.py)
    # ------------------------------------------------------------------------------------
    def delete_group(self, group_id: str, callback: Callable[[int], None]) -> None:
        """DeleteGroups for one group: tombstones for its offsets and its metadata."""
        group = self.groups.get(group_id)
        if not group_id:
            return callback(INVALID_GROUP_ID)
        extra: list[tuple[bytes, bytes | None]] = []
        if self._is_consumer(group_id):
            tombstones = self.consumer.deletion_records(group_id)
            if isinstance(tombstones, int):
                return callback(tombstones)
            extra = [(encode_consumer_key(k), encode_consumer_value(v)) for k, v in tombstones]
            if group is None:
                group = self._group_or_new(group_id)
        if group is None or group.state is GroupState.DEAD:
            return callback(GROUP_ID_NOT_FOUND)
        if group.state is not GroupState.EMPTY:
            return callback(NON_EMPTY_GROUP)
        answer = answer_once(callback)
        self._delete(group, lambda: answer(NONE), lambda exc: answer(coordinator_error(exc)),
                     on_timeout=lambda exc: answer(coordinator_error(exc)), extra=extra)
        return None

    def _delete(self, group: Group, on_commit: Callable[[], None],
                on_failure: Callable[[KafkaError], None],
                offsets: Iterable[tuple[str, int]] | None = None, *,
                on_timeout: Callable[[KafkaError], None] | None = None,
                extra: list[tuple[bytes, bytes | None]] | None = None) -> None:
        """Write the deletion of an Empty group; it is DEAD until the tombstone commits
        (replay then forgets it) and EMPTY again if the write fails (still DEAD when its
        answer timed out: the write is pending). ``extra``: encoded records written in the
        same batch first (an empty consumer group's tombstones)."""
        doomed = set(group.offsets) | set(group.pending_offsets) if offsets is None else set(
            offsets)
        records: list[Record] = [(OffsetCommitKey(group.group_id, t, p), None)
                                 for t, p in sorted(doomed)]
        records.append((GroupMetadataKey(group.group_id), None))
        group.state = GroupState.DEAD

        def failed(exc: KafkaError) -> None:
            if self._is_current(group) and group.state is GroupState.DEAD:
                group.state = GroupState.EMPTY
            on_failure(exc)

        raw = list(extra or []) + [(encode_key(k), encode_value(v)) for k, v in records]
        self.context.write(raw, on_commit=on_commit, on_failure=failed, on_timeout=on_timeout)

    # ------------------------------------------------------------------------------------
    # ListGroups / DescribeGroups
    # ------------------------------------------------------------------------------------
    def list_groups(self, states: set[str] | None = None
                    ) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of each group, optionally filtered
        by state: classic groups, then consumer groups (whose offsets the classic shell
        holds: it is not listed)."""
        wanted = {s.lower() for s in states} if states else None
        out = [
            (g.group_id, g.protocol_type or "", g.state.value, "classic")
            for g in self.groups.values()
            if (wanted is None or g.state.value.lower() in wanted)
            and not self._is_consumer(g.group_id)
        ]
        out.extend((group_id, "consumer", state, "consumer")
                   for group_id, state in self.consumer.list_groups()
                   if wanted is None or state.lower() in wanted)
        return out

    def describe_group(self, group_id: str) -> GroupSummary:
        if self._is_consumer(group_id):
            return self.consumer.describe_classic(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(group_id, GroupState.DEAD.value, "", "", [])
        stable = group.state is GroupState.STABLE
        members = [
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          m.metadata(group.protocol_name) if stable else b"",
                          m.assignment if stable else b"")
            for m in group.members.values()
        ]
        return GroupSummary(group_id, group.state.value, group.protocol_type or "",
                            (group.protocol_name or "") if stable else "", members)

    # ------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------
    def _cancel(self, group: Group, attribute: str) -> None:
        timer = getattr(group, attribute)
        if timer is not None:
            timer.cancel()
            setattr(group, attribute, None)

    def _cancel_all(self, group: Group) -> None:
        self._cancel(group, "rebalance_timer")
        self._cancel(group, "sync_timer")
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
                member.heartbeat_timer = None

    @staticmethod
    def _answer_parked(group: Group, error: int) -> None:
        for member in group.members.values():
            if member.join_callback is not None:
                join, member.join_callback = member.join_callback, None
                join(JoinResult(error, member.member_id))
            if member.sync_callback is not None:
                sync, member.sync_callback = member.sync_callback, None
                sync(SyncResult(error))
