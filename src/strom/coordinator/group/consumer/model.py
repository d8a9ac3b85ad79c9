"""In-memory state of KIP-848 consumer groups: a replay of their ``__consumer_offsets`` records.

Durable fields change only in :func:`apply` (replay of a committed record, see
:mod:`.records`); the protocol's session state (timers, the queue of heartbeats waiting for the
group's write in flight, the subscription snapshot) lives beside them and is never stored.

Assignments are ``{topic id: frozenset(partitions)}``. Epochs follow KIP-848: the *group epoch*
moves when membership, a subscription or a subscribed topic changes; the *assignment epoch* is
the group epoch the target assignment was computed at; a member's *epoch* reaches the
assignment epoch once it has revoked what the target takes away (STABLE) — partitions another
member still holds are held back meanwhile (UNRELEASED_PARTITIONS).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common.timer import TimerHandle
from strom.coordinator.group.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    TopicPartitions,
)

Assignment = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` and its stored values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class GroupState(enum.Enum):
    """The states ConsumerGroupDescribe and ListGroups name."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


#: The epoch of a static member that left with epoch -2 and may come back.
LEAVE_GROUP_STATIC_EPOCH = -2


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    # MemberMetadata (record 5)
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = 300000
    server_assignor: str | None = None
    # CurrentMemberAssignment (record 8)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    #: (topic id, partition) -> the member epoch it was assigned at (KIP-1251)
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # protocol session
    session_timer: TimerHandle | None = None
    revocation_timer: TimerHandle | None = None

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id, rack_id=self.rack_id, client_id=self.client_id,
            client_host=self.client_host, subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex or "",  # Kafka: "" = none
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor)


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # protocol session
    #: (topic name, topic id, partition count) of every subscribed topic when the target
    #: assignment was last computed; None after a load (recomputed on the first heartbeat).
    snapshot: tuple[tuple[str, uuid.UUID, int], ...] | None = None
    #: moves with every replayed change of a member's subscription (or membership)
    subscription_version: int = 0
    #: (topics mapping, subscription version, each member's resolved topic names, snapshot):
    #: the last resolution, reused while both are the same
    resolved: tuple[Any, int, dict[str, frozenset[str]],
                    tuple[tuple[str, uuid.UUID, int], ...]] | None = None

    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        for member in self.members.values():
            if (member.state is not MemberState.STABLE
                    or member.member_epoch != self.assignment_epoch):
                return GroupState.RECONCILING
        return GroupState.STABLE

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        """The member holding the partition (assigned or still to revoke), if any."""
        for member in self.members.values():
            if partition in member.assigned.get(topic_id, ()) or partition in (
                    member.pending_revocation.get(topic_id, ())):
                return member.member_id
        return None


def to_wire(assignment: Assignment) -> TopicPartitions:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items(),
                                                            key=lambda kv: kv[0].bytes) if ps)


def from_wire(partitions: TopicPartitions) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in partitions if ps}


def apply(groups: dict[str, ConsumerGroup], key: ConsumerKey, value: ConsumerValue | None
          ) -> ConsumerGroup | None:
    """Replay one committed record; returns the group it touched (None if forgotten).
    Kafka's partition-metadata (4.0) and regular-expression records carry nothing strom
    keeps: it resolves subscriptions from the current metadata."""
    group = groups.get(key.group)
    if isinstance(key, ConsumerGroupPartitionMetadataKey | ConsumerGroupRegularExpressionKey):
        return group
    if value is None:  # tombstones
        if group is None:
            return None
        if isinstance(key, ConsumerGroupMetadataKey):
            del groups[key.group]
            return None
        member_id = getattr(key, "member_id", None)
        if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            group.target.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupMemberMetadataKey) and member_id is not None:
            group.members.pop(member_id, None)
            group.subscription_version += 1
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            member = group.members.get(key.member_id)
            if member is not None:
                member.assigned, member.pending_revocation = {}, {}
        return group
    if group is None:
        group = groups[key.group] = ConsumerGroup(key.group)
    if isinstance(value, ConsumerGroupMetadataValue):
        group.group_epoch = value.epoch
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        group.assignment_epoch = value.assignment_epoch
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        assert isinstance(key, ConsumerGroupTargetAssignmentMemberKey)
        group.target[key.member_id] = from_wire(value.topic_partitions)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        assert isinstance(key, ConsumerGroupMemberMetadataKey)
        member = group.members.setdefault(key.member_id, ConsumerMember(key.member_id))
        member.instance_id = value.instance_id
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = tuple(value.subscribed_topic_names)
        member.subscribed_topic_regex = value.subscribed_topic_regex or None
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
        member.server_assignor = value.server_assignor
        group.subscription_version += 1
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        assert isinstance(key, ConsumerGroupCurrentMemberAssignmentKey)
        member = group.members.setdefault(key.member_id, ConsumerMember(key.member_id))
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.state = MemberState(value.state) if value.state in MemberState._value2member_map_ \
            else MemberState.UNKNOWN
        member.assigned = from_wire(value.assigned_partitions)
        member.pending_revocation = from_wire(value.partitions_pending_revocation)
        epochs = dict(value.assignment_epochs)
        member.assignment_epochs = {}
        for topic, partitions in value.assigned_partitions:
            for index, partition in enumerate(partitions):
                given = epochs.get(topic, ())  # absent (older writers): the member's epoch
                member.assignment_epochs[(topic, partition)] = (
                    given[index] if index < len(given) else value.member_epoch)
    return group


def assignment_value(member: ConsumerMember) -> ConsumerGroupCurrentMemberAssignmentValue:
    assigned = to_wire(member.assigned)
    return ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
        state=int(member.state), assigned_partitions=assigned,
        partitions_pending_revocation=to_wire(member.pending_revocation),
        assignment_epochs=tuple(
            (topic, tuple(member.assignment_epochs.get((topic, p), member.member_epoch)
                          for p in partitions))
            for topic, partitions in assigned))


__all__ = [
    "Assignment", "ConsumerGroup", "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue", "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue", "ConsumerMember", "GroupState",
    "MemberState", "apply", "assignment_value", "from_wire", "to_wire",
]
