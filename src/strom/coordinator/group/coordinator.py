"""The classic group coordinator: routes each group to the shard that owns it.

A group lives in partition ``partition_for(group_id, partitions)`` of ``__consumer_offsets``;
that partition's :class:`~strom.coordinator.group.shard.GroupShard` exists on this broker
only while the broker leads the partition (see :mod:`strom.coordinator.runtime`, which loads
and unloads shards). Every request first finds its shard: a partition that is loading answers
COORDINATOR_LOAD_IN_PROGRESS, one not led here NOT_COORDINATOR (clients then look the
coordinator up again), as Kafka's coordinators do; then the shard validates, writes and
answers. Requests that persist something (OffsetCommit, a SyncGroup leader's assignment, a
static member's rejoin, DeleteGroups, OffsetDelete) answer through a callback once their
records are committed, or with the mapped error if the write fails.

The broker registers :attr:`GroupCoordinator.runtime` as the leadership listener of
``__consumer_offsets`` and runs :meth:`GroupCoordinator.expire_offsets` periodically
(KIP-211). Owned by the broker's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from strom.common.clock import Clock
from strom.common.errors import KafkaError
from strom.common.timer import Scheduler
from strom.coordinator.group.codes import (
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    INVALID_REQUEST,
)
from strom.coordinator.group.consumer.groups import (
    HeartbeatArgs,
    HeartbeatCallback,
    HeartbeatResult,
    Topics,
)
from strom.coordinator.group.consumer.model import ConsumerGroup
from strom.coordinator.group.model import (
    CommittedOffset,
    Group,
    GroupSettings,
    GroupSummary,
    JoinCallback,
    JoinResult,
    OffsetToCommit,
    SyncCallback,
    SyncResult,
)
from strom.coordinator.group.records import OFFSETS_TOPIC, partition_for
from strom.coordinator.group.shard import GroupShard
from strom.coordinator.runtime import (
    COORDINATOR_LOAD_IN_PROGRESS,
    CoordinatorRuntime,
    PartitionWriter,
    ShardContext,
)
from strom.storage.txn_verification import VerificationGuard

__all__ = [
    "ILLEGAL_GENERATION",
    "CommittedOffset",
    "GroupCoordinator",
    "GroupSettings",
    "GroupSummary",
    "OffsetToCommit",
]


class GroupCoordinator:
    """Every classic group this broker coordinates (those of the partitions it leads)."""

    def __init__(
        self, writer: PartitionWriter, scheduler: Scheduler, clock: Clock,
        settings: GroupSettings, *, loop: asyncio.AbstractEventLoop | None = None,
        topics: Topics = dict,
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.topics = topics
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            OFFSETS_TOPIC, writer, clock, self._new_shard, scheduler=scheduler,
            write_timeout_ms=settings.write_timeout_ms, loop=loop)

    def _new_shard(self, context: ShardContext) -> GroupShard:
        return GroupShard(context, self.scheduler, self.clock, self.settings, self.topics)

    # -- routing -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.settings.partitions)

    def _route(self, group_id: str) -> GroupShard | int:
        """The group's shard, or the error code that answers the request (a null group id,
        which only a malformed request carries, is INVALID_GROUP_ID)."""
        if group_id is None:
            return INVALID_GROUP_ID
        try:
            return self.runtime.shard(self.partition_for(group_id))
        except KafkaError as exc:
            return exc.code

    def group(self, group_id: str) -> Group | None:
        """The group's in-memory state, if its shard is active here (tests, tools)."""
        shard = self._route(group_id)
        return None if isinstance(shard, int) else shard.groups.get(group_id)

    # -- membership ----------------------------------------------------------------------------
    def join_group(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member_id: bool,
        callback: JoinCallback,
    ) -> None:
        """Answer through ``callback`` — at once, or when the join phase completes."""
        if not group_id:
            return callback(JoinResult(INVALID_GROUP_ID, member_id))
        shard = self._route(group_id)
        if isinstance(shard, int):
            return callback(JoinResult(shard, member_id))
        return shard.join_group(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            client_id=client_id, client_host=client_host,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type, protocols=protocols,
            require_known_member_id=require_known_member_id, callback=callback)

    def sync_group(
        self, *, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:
        if not group_id:
            return callback(SyncResult(INVALID_GROUP_ID))
        shard = self._route(group_id)
        if isinstance(shard, int):
            return callback(SyncResult(shard))
        return shard.sync_group(
            group_id=group_id, generation=generation, member_id=member_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name, assignments=assignments, callback=callback)

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation: int) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard
        return shard.heartbeat(group_id, member_id, group_instance_id, generation)

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """(group-level error, one error per leaving (member id, instance id))."""
        if not group_id:
            return INVALID_GROUP_ID, [INVALID_GROUP_ID] * len(leaving)
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, [shard] * len(leaving)
        return shard.leave_group(group_id, leaving)

    # -- offsets -----------------------------------------------------------------------------
    def commit_offsets(
        self, *, group_id: str, generation: int, member_id: str,
        group_instance_id: str | None, offsets: list[OffsetToCommit],
        callback: Callable[[list[int]], None], expire_timestamp: int = -1,
        group_not_found_error: int = ILLEGAL_GENERATION,
        stale_epoch_error: int = ILLEGAL_GENERATION,
    ) -> None:
        """One error per offset through ``callback``, once the commit is durable
        (``stale_epoch_error``: a consumer group's member at another epoch)."""
        shard = self._route(group_id)
        if isinstance(shard, int):
            return callback([shard] * len(offsets))
        return shard.commit_offsets(
            group_id=group_id, generation=generation, member_id=member_id,
            group_instance_id=group_instance_id, offsets=offsets,
            expire_timestamp=expire_timestamp, group_not_found_error=group_not_found_error,
            callback=callback, stale_epoch_error=stale_epoch_error)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None,
        require_stable: bool = False, member: tuple[str, int] | None = None,
    ) -> tuple[int, list[CommittedOffset]]:
        """(group error, committed offsets: -1 where there is none); ``None`` asks for all.
        ``member`` (OffsetFetch v9+: member id, member epoch) is checked against a KIP-848
        group's members (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)."""
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, []
        if member is not None:
            error = shard.consumer.validate_fetch(group_id, *member)
            if error:
                return error, []
        return 0, shard.fetch_offsets(group_id, partitions, require_stable)

    def txn_commit_offsets(
        self, *, group_id: str, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, group_instance_id: str | None, offsets: list[OffsetToCommit],
        callback: Callable[[list[int]], None],
        verification_guard: VerificationGuard | None = None,
    ) -> None:
        """TxnOffsetCommit: one error per offset through ``callback`` (the KIP-890
        verification happened before: ``verification_guard``, see
        :meth:`GroupShard.txn_commit_offsets`)."""
        if not group_id:
            return callback([INVALID_GROUP_ID] * len(offsets))
        shard = self._route(group_id)
        if isinstance(shard, int):
            return callback([shard] * len(offsets))
        return shard.txn_commit_offsets(
            group_id=group_id, producer_id=producer_id, producer_epoch=producer_epoch,
            generation=generation, member_id=member_id, group_instance_id=group_instance_id,
            offsets=offsets, callback=callback, verification_guard=verification_guard)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to ``partition`` of ``__consumer_offsets``: its
        producer's pending transactional offsets there are committed or dropped. A partition
        not active here will replay the marker when it loads."""
        try:
            shard = self.runtime.shard(partition)
        except KafkaError:
            return
        shard.complete_transaction(producer_id, commit)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                       callback: Callable[[int, list[int]], None]) -> None:
        """OffsetDelete: (top-level error, one error per partition) through ``callback``."""
        shard = self._route(group_id)
        if isinstance(shard, int):
            return callback(shard, [])
        return shard.delete_offsets(group_id, partitions, callback)

    def delete_groups(self, group_ids: list[str], callback: Callable[[list[int]], None]
                      ) -> None:
        """One error per group through ``callback``, once every deletion has settled."""
        errors: list[int | None] = [None] * len(group_ids)
        remaining = [len(group_ids)]

        def settle(index: int, code: int) -> None:
            errors[index] = code
            remaining[0] -= 1
            if remaining[0] == 0:
                callback([e if e is not None else 0 for e in errors])

        if not group_ids:
            return callback([])
        for index, group_id in enumerate(group_ids):
            if not group_id:
                settle(index, INVALID_GROUP_ID)
                continue
            shard = self._route(group_id)
            if isinstance(shard, int):
                settle(index, shard)
                continue
            shard.delete_group(group_id, lambda code, i=index: settle(i, code))  # type: ignore[misc]
        return None

    def expire_offsets(self) -> int:
        """KIP-211 expiry in every active shard (see :meth:`GroupShard.expire_offsets`)."""
        return sum(shard.expire_offsets() for shard in self.runtime.active_shards())

    # -- ListGroups / DescribeGroups -----------------------------------------------------------
    def list_groups(self, states: set[str] | None = None
                    ) -> tuple[int, list[tuple[str, str, str, str]]]:
        """(error, [(group id, protocol type, state, group type)]):
        COORDINATOR_LOAD_IN_PROGRESS while any partition loads (as Kafka), else the groups of
        every partition led here (``classic`` and ``consumer`` groups)."""
        if self.runtime.any_loading():
            return COORDINATOR_LOAD_IN_PROGRESS, []
        out: list[tuple[str, str, str, str]] = []
        for shard in self.runtime.active_shards():
            out.extend(shard.list_groups(states))
        return 0, out

    def describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, GroupSummary(group_id, "", "", "", [])  # Kafka's groupError
        return 0, shard.describe_group(group_id)

    # -- KIP-848 consumer groups ---------------------------------------------------------------
    def consumer_heartbeat(self, args: HeartbeatArgs, callback: HeartbeatCallback) -> None:
        """ConsumerGroupHeartbeat: answered through ``callback`` once its records commit."""
        if not args.group_id:
            return callback(HeartbeatResult(INVALID_REQUEST, "GroupId can't be empty."))
        shard = self._route(args.group_id)
        if isinstance(shard, int):
            return callback(HeartbeatResult(shard))
        return shard.consumer.heartbeat(args, callback)

    def consumer_group(self, group_id: str) -> tuple[int, ConsumerGroup | None, bool]:
        """(error, the consumer group or None, whether a classic group holds the id) for
        ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for an unknown id or a classic group
        (Kafka's answer)."""
        shard = self._route(group_id)
        if isinstance(shard, int):
            return shard, None, False
        group = shard.consumer.groups.get(group_id)
        if group is not None:
            return 0, group, False
        classic = shard.groups.get(group_id)
        return GROUP_ID_NOT_FOUND, None, classic is not None and bool(classic.members)

    # -- lifecycle -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Unload every shard: timers cancelled, parked requests answered NOT_COORDINATOR."""
        self.runtime.close()
