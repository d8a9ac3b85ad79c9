"""The classic group coordinator: a replayed state machine over ``__consumer_offsets``.

Operations (:meth:`GroupCoordinator.join_group`, :meth:`sync_group`, :meth:`commit_offsets`
…) validate a request against the current state and produce records; :meth:`_write` appends
them to the group's partition and replays them, and :meth:`replay` is the only place where
durable state — offsets, generation, protocol, leader, members and assignments — changes.
Start-up (:meth:`load`) is replay of every partition. Parked JoinGroup / SyncGroup requests,
timers and rebalances in progress are protocol-session state that lives only in memory, as
in Kafka's classic group (see :mod:`strom.coordinator.group.model`).

Timers (all on the broker's event loop, through the :class:`Scheduler` seam): a session
timer per member (a member with a parked JoinGroup or SyncGroup is kept alive), a timer per
pending member id (KIP-394), the rebalance timer (members that do not rejoin are removed), the
initial rebalance delay of an Empty group (``group.initial.rebalance.delay.ms``, extended while
new members arrive, never beyond the rebalance timeout), the sync timer of CompletingRebalance,
and the periodic offset-expiry pass (KIP-211), driven by the broker.

Owned by the broker's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from strom.common.clock import Clock
from strom.common.errors import KafkaError, error_class
from strom.common.timer import Scheduler
from strom.coordinator.group.log import OffsetsLog
from strom.coordinator.group.model import (
    Group,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from strom.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    Key,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    Value,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)

log = logging.getLogger("strom.coordinator.group")


def _code(name: str) -> int:
    return error_class(name).code


NONE = 0
COORDINATOR_NOT_AVAILABLE = _code("COORDINATOR_NOT_AVAILABLE")
OFFSET_METADATA_TOO_LARGE = _code("OFFSET_METADATA_TOO_LARGE")
ILLEGAL_GENERATION = _code("ILLEGAL_GENERATION")
INCONSISTENT_GROUP_PROTOCOL = _code("INCONSISTENT_GROUP_PROTOCOL")
INVALID_GROUP_ID = _code("INVALID_GROUP_ID")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")
INVALID_SESSION_TIMEOUT = _code("INVALID_SESSION_TIMEOUT")
REBALANCE_IN_PROGRESS = _code("REBALANCE_IN_PROGRESS")
NON_EMPTY_GROUP = _code("NON_EMPTY_GROUP")
GROUP_ID_NOT_FOUND = _code("GROUP_ID_NOT_FOUND")
MEMBER_ID_REQUIRED = _code("MEMBER_ID_REQUIRED")
GROUP_MAX_SIZE_REACHED = _code("GROUP_MAX_SIZE_REACHED")
FENCED_INSTANCE_ID = _code("FENCED_INSTANCE_ID")
GROUP_SUBSCRIBED_TO_TOPIC = _code("GROUP_SUBSCRIBED_TO_TOPIC")

Record = tuple[Key, Value | None]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker keys the coordinator reads (see :mod:`strom.common.config`)."""

    partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    metadata_max_bytes: int = 4096


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


class GroupCoordinator:
    """Every classic group of this broker (single node: it leads every offsets partition)."""

    def __init__(
        self, offsets_log: OffsetsLog, scheduler: Scheduler, clock: Clock,
        settings: GroupSettings,
    ) -> None:
        self.log = offsets_log
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.groups: dict[str, Group] = {}
        self.loaded = False

    # ------------------------------------------------------------------------------------
    # records: write + replay (the only place durable state changes)
    # ------------------------------------------------------------------------------------
    def load(self) -> None:
        """Rebuild every group by replaying the ``__consumer_offsets`` partitions, then start
        a session timer for each member (members that are gone expire)."""
        count = 0
        for partition in range(self.settings.partitions):
            for raw_key, raw_value in self.log.read(partition):
                try:
                    key = decode_key(raw_key)
                    if key is None:
                        continue
                    self.replay(key, decode_value(key, raw_value))
                except RecordFormatError as exc:
                    log.warning("skipping undecodable %s record: %s", partition, exc)
                    continue
                count += 1
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group, member)
        self.loaded = True
        log.info("loaded %d groups from %d records", len(self.groups), count)

    def replay(self, key: Key, value: Value | None) -> None:
        if isinstance(key, OffsetCommitKey):
            if value is None:
                group = self.groups.get(key.group)
                if group is not None:
                    group.offsets.pop((key.topic, key.partition), None)
                return
            assert isinstance(value, OffsetCommitValue)
            group = self._group_or_new(key.group)
            group.offsets[(key.topic, key.partition)] = value
            return
        if value is None:
            group = self.groups.pop(key.group, None)
            if group is not None:
                group.state = GroupState.DEAD
                self._cancel_all(group)
            return
        assert isinstance(value, GroupMetadataValue)
        group = self._group_or_new(key.group)
        group.protocol_type = value.protocol_type
        group.generation = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp = value.current_state_timestamp
        wanted = {m.member_id: m for m in value.members}
        for member_id in [mid for mid in group.members if mid not in wanted]:
            self._drop_member(group, member_id)
        for meta in value.members:
            member = group.members.get(meta.member_id)
            if member is None:
                member = Member(
                    meta.member_id, meta.group_instance_id, meta.client_id, meta.client_host,
                    meta.rebalance_timeout, meta.session_timeout, value.protocol_type,
                    [(value.protocol, meta.subscription)] if value.protocol else [],
                )
                group.members[meta.member_id] = member
            member.assignment = meta.assignment
            member.group_instance_id = meta.group_instance_id
            member.session_timeout_ms = meta.session_timeout
            member.rebalance_timeout_ms = meta.rebalance_timeout
            if meta.group_instance_id is not None:
                group.static_members[meta.group_instance_id] = meta.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    def _write(self, group_id: str, records: list[Record]) -> Awaitable[None] | None:
        """Append ``records`` to the group's partition, then replay them. Raises KafkaError."""
        raw = [(encode_key(k), encode_value(v)) for k, v in records]
        partition = partition_for(group_id, self.settings.partitions)
        durable = self.log.append(partition, raw, self.clock.now_ms())
        for key, value in records:
            self.replay(key, value)
        return durable

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
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return callback(JoinResult(UNKNOWN_MEMBER_ID, member_id))
            group = Group(group_id)
            self.groups[group_id] = group
        if not group.supports(protocol_type, protocols):
            return callback(JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type,
                protocols)
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

    def _add_member(
        self, group: Group, member_id: str, instance_id: str | None,
        args: tuple[str, str, int, int, str, list[tuple[str, bytes]]], callback: JoinCallback,
    ) -> None:
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

    def _update_member(
        self, group: Group, member: Member,
        args: tuple[str, str, int, int, str, list[tuple[str, bytes]]], callback: JoinCallback,
    ) -> None:
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

    def _rejoin_static(
        self, group: Group, old_id: str, new_id: str, instance_id: str,
        args: tuple[str, str, int, int, str, list[tuple[str, bytes]]], callback: JoinCallback,
    ) -> None:
        """KIP-345: a static member restarted. The old member id is fenced; in a Stable group
        whose protocols this does not change, the member keeps its assignment and the
        generation stays (one GroupMetadata record swaps the member id)."""
        old = group.members[old_id]
        for stale_join in (old.join_callback,):
            if stale_join is not None:
                old.join_callback = None
                stale_join(JoinResult(FENCED_INSTANCE_ID, old_id))
        if old.sync_callback is not None:
            stale_sync, old.sync_callback = old.sync_callback, None
            stale_sync(SyncResult(FENCED_INSTANCE_ID))
        client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols = args
        new_member = Member(new_id, instance_id, client_id, client_host, rebalance_ms,
                            session_ms, protocol_type, list(protocols),
                            assignment=old.assignment)
        if group.state is GroupState.STABLE and self._same_subscription(group, old, new_member):
            members = [new_member if m.member_id == old_id else m
                       for m in group.members.values()]
            was_leader = group.is_leader(old_id)
            record_key, record_value = self._metadata_record(group, members)
            assert isinstance(record_value, GroupMetadataValue)
            if was_leader:
                record_value = GroupMetadataValue(
                    record_value.protocol_type, record_value.generation, record_value.protocol,
                    new_id, record_value.current_state_timestamp, record_value.members)
            try:
                durable = self._write(group.group_id, [(record_key, record_value)])
            except KafkaError as exc:
                return callback(JoinResult(exc.code if exc.code > 0 else
                                           COORDINATOR_NOT_AVAILABLE))
            member = group.members[new_id]
            member.protocols = list(protocols)
            self._schedule_session(group, member)
            leader = group.is_leader(new_id)
            result = JoinResult(
                NONE, new_id, group.generation, group.protocol_type, group.protocol_name,
                group.leader_id or "", self._member_list(group) if leader else [],
                skip_assignment=leader,
            )
            self._after(durable, lambda: callback(result))
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
        """End the join phase: drop members that did not rejoin, start a new generation."""
        if group.state is not GroupState.PREPARING_REBALANCE or self.groups.get(
            group.group_id) is not group:
            return
        self._cancel(group, "rebalance_timer")
        group.initial_delay_remaining_ms = None
        for member in [m for m in group.members.values() if m.join_callback is None]:
            log.info("group %s: member %s did not rejoin in time; removed", group.group_id,
                     member.member_id)
            self._drop_member(group, member.member_id)
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            key, value = self._metadata_record(group, [])
            assert isinstance(value, GroupMetadataValue)
            value = GroupMetadataValue(value.protocol_type, group.generation + 1, None, None,
                                       value.current_state_timestamp, ())
            try:
                self._write(group.group_id, [(key, value)])
            except KafkaError as exc:
                log.warning("group %s: cannot store the empty group: %s", group.group_id, exc)
                group.generation += 1
                group.state = GroupState.EMPTY
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.generation += 1
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
        try:
            durable = self._write(group.group_id, [self._metadata_record(group, None, full)])
        except KafkaError as exc:
            log.warning("group %s: cannot store the assignment: %s", group_id, exc)
            self._propagate_sync_error(group, exc.code if exc.code > 0 else
                                       COORDINATOR_NOT_AVAILABLE)
            self._prepare_rebalance(group)
            return None
        self._cancel(group, "sync_timer")
        group.pending_sync.clear()
        waiting = [(m, m.sync_callback) for m in group.members.values()]
        for m, _ in waiting:
            m.sync_callback = None
        results = [(cb, self._sync_result(group, m.assignment)) for m, cb in waiting if cb]

        def deliver() -> None:
            for cb, result in results:
                cb(result)

        self._after(durable, deliver)
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
        if group.members.get(member.member_id) is not member:
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
    # offsets
    # ------------------------------------------------------------------------------------
    def commit_offsets(
        self, *, group_id: str, generation: int, member_id: str,
        group_instance_id: str | None, offsets: list[OffsetToCommit],
        expire_timestamp: int = -1, group_not_found_error: int = ILLEGAL_GENERATION,
    ) -> tuple[list[int], Awaitable[None] | None]:
        """One error per offset; plus an awaitable when the write must be fsynced first."""
        error = self._validate_commit(group_id, generation, member_id, group_instance_id,
                                      group_not_found_error)
        if error:
            return [error] * len(offsets), None
        now = self.clock.now_ms()
        errors: list[int] = []
        records: list[Record] = []
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata.encode("utf-8")) > self.settings.metadata_max_bytes:
                errors.append(OFFSET_METADATA_TOO_LARGE)
                continue
            errors.append(NONE)
            records.append((OffsetCommitKey(group_id, o.topic, o.partition),
                            OffsetCommitValue(o.offset, o.leader_epoch, metadata, now,
                                              expire_timestamp)))
        if not records:
            return errors, None
        try:
            durable = self._write(group_id, records)
        except KafkaError as exc:
            code = exc.code if exc.code > 0 else COORDINATOR_NOT_AVAILABLE
            return [e or code for e in errors], None
        return errors, durable

    def _validate_commit(self, group_id: str, generation: int, member_id: str,
                         instance_id: str | None, group_not_found_error: int) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return NONE if generation < 0 else group_not_found_error
        if generation < 0 and not member_id and group.state is GroupState.EMPTY:
            return NONE  # a simple (standalone) commit
        if generation < 0 and not member_id:
            return UNKNOWN_MEMBER_ID  # standalone commits into an active group are refused
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        self._touch(group, group.members[member_id])
        return NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> list[CommittedOffset]:
        """Committed offsets (-1 where there is none); ``None`` asks for all of them."""
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        wanted = sorted(stored) if partitions is None else partitions
        out = []
        for topic, partition in wanted:
            value = stored.get((topic, partition))
            if value is None:
                out.append(CommittedOffset(topic, partition, -1, -1, ""))
            else:
                out.append(CommittedOffset(topic, partition, value.offset, value.leader_epoch,
                                           value.metadata))
        return out

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, list[int]]:
        """OffsetDelete: (top-level error, one error per partition)."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, []
        if group.members and group.protocol_type != "consumer":
            return NON_EMPTY_GROUP, []
        subscribed = group.subscribed_topics() if group.members else set()
        errors: list[int] = []
        records: list[Record] = []
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                errors.append(GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            errors.append(NONE)
            if (topic, partition) in group.offsets:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        if records:
            try:
                self._write(group_id, records)
            except KafkaError as exc:
                return exc.code, []
        return NONE, errors

    def delete_groups(self, group_ids: list[str]) -> list[int]:
        errors = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                errors.append(INVALID_GROUP_ID)
            elif group is None or group.state is GroupState.DEAD:
                errors.append(GROUP_ID_NOT_FOUND)
            elif group.state is not GroupState.EMPTY:
                errors.append(NON_EMPTY_GROUP)
            else:
                records: list[Record] = [(OffsetCommitKey(group_id, t, p), None)
                                         for t, p in sorted(group.offsets)]
                records.append((GroupMetadataKey(group_id), None))
                try:
                    self._write(group_id, records)
                    errors.append(NONE)
                except KafkaError as exc:
                    errors.append(exc.code)
        return errors

    def expire_offsets(self) -> int:
        """KIP-211: offsets of an Empty group expire ``offsets.retention.minutes`` after it
        became empty; standalone commits (no group protocol) and offsets of topics a Stable
        consumer group no longer subscribes to expire by commit time; an explicit v1 expire
        timestamp wins. An Empty group left without offsets is deleted."""
        now = self.clock.now_ms()
        retention = self.settings.offsets_retention_ms
        expired = 0
        for group in list(self.groups.values()):
            if group.pending_members:
                continue  # a group being created (KIP-394 member id handshake)
            doomed: list[tuple[str, int]] = []
            subscribed = group.subscribed_topics() if group.state is GroupState.STABLE else None
            for tp, value in group.offsets.items():
                if value.expire_timestamp >= 0:
                    if value.expire_timestamp <= now:
                        doomed.append(tp)
                    continue
                if group.state is GroupState.EMPTY:
                    base = (group.state_timestamp if group.protocol_type
                            and group.state_timestamp >= 0 else value.commit_timestamp)
                elif subscribed is not None and tp[0] not in subscribed:
                    base = value.commit_timestamp
                else:
                    continue
                if base + retention <= now:
                    doomed.append(tp)
            records: list[Record] = [(OffsetCommitKey(group.group_id, t, p), None)
                                     for t, p in doomed]
            drop_group = group.state is GroupState.EMPTY and len(doomed) == len(group.offsets)
            if drop_group:
                records.append((GroupMetadataKey(group.group_id), None))
            if not records:
                continue
            try:
                self._write(group.group_id, records)
            except KafkaError as exc:
                log.warning("offset expiry for group %s failed: %s", group.group_id, exc)
                continue
            expired += len(doomed)
        return expired

    # ------------------------------------------------------------------------------------
    # ListGroups / DescribeGroups
    # ------------------------------------------------------------------------------------
    def list_groups(self, states: set[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of each group, optionally filtered by state."""
        wanted = {s.lower() for s in states} if states else None
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if wanted is None or g.state.value.lower() in wanted
        ]

    def describe_group(self, group_id: str) -> GroupSummary:
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
    def _after(self, durable: Awaitable[None] | None, action: Callable[[], None]) -> None:
        if durable is None:
            action()
            return
        future = asyncio.ensure_future(durable)
        future.add_done_callback(lambda _f: action())

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

    def shutdown(self) -> None:
        """Cancel every timer (broker shutdown); parked requests die with their sockets."""
        for group in self.groups.values():
            self._cancel_all(group)
