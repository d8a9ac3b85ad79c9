"""In-memory group state: :class:`Group` and :class:`Member`, owned by the coordinator.

Two kinds of fields live here. *Durable* ones are what the ``__consumer_offsets`` records
hold: committed offsets change only when a record is replayed; group metadata (generation,
protocol, leader, members with their subscription and assignment) is rebuilt by replay when
the shard loads, and afterwards the records only confirm what the protocol already holds in
memory (a committed assignment is applied to the members of its generation). *Protocol
session* ones (parked JoinGroup / SyncGroup callbacks, timers, pending member ids, offset
writes in flight, the in-progress rebalance and the generation it starts) exist only while
the broker runs, as in Kafka's classic group; a restart rebuilds the durable part by replay
and lets session timeouts sort out the rest.

Also here: the value types operations take and return (settings, offsets, summaries).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.common.timer import TimerHandle
from strom.coordinator.group.consumer.settings import ConsumerSettings
from strom.coordinator.group.records import OffsetCommitValue, subscribed_topics


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker keys the coordinator reads (see :mod:`strom.common.config`);
    ``write_timeout_ms`` is Kafka's ``offsets.commit.timeout.ms`` default."""

    partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    metadata_max_bytes: int = 4096
    write_timeout_ms: int = 5000
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: int = 0  # UNSTABLE_OFFSET_COMMIT when a stable offset was asked for


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


class GroupState(enum.Enum):
    """The classic group states, named as Kafka names them on the wire. A group whose
    deletion (DeleteGroups, offset expiry) is being written is DEAD until the tombstone
    commits (it is then forgotten) or fails (it is EMPTY again)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup response carries (members only for the leader)."""

    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # protocol-session state
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    is_new: bool = False
    heartbeat_timer: TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def topics(self, protocol: str | None) -> set[str] | None:
        """Subscribed topics from the chosen protocol's metadata (or the preferred one)."""
        if protocol not in self.protocol_names() and self.protocols:
            protocol = self.protocols[0][0]
        return subscribed_topics(self.metadata(protocol))


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    # protocol-session state
    pending_offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # writes in flight
    pending_members: dict[str, TimerHandle] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    initial_delay_remaining_ms: int | None = None  # set while the initial delay runs
    rebalance_timer: TimerHandle | None = None
    sync_timer: TimerHandle | None = None

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_callback is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = set(member.protocol_names())
            names = mine if names is None else names & mine
        return names or set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(
            {name for name, _ in protocols} & self.candidate_protocols()
        )

    def select_protocol(self) -> str | None:
        """Kafka's vote: each member votes for its most preferred candidate protocol."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            for name in member.protocol_names():
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        return max(votes, key=lambda name: votes[name])  # ties: the first voted for

    def subscribed_topics(self) -> set[str] | None:
        """Topics any member subscribes to (consumer protocol); None if unknown."""
        if self.protocol_type != "consumer" or not self.members:
            return set() if not self.members else None
        topics: set[str] = set()
        for member in self.members.values():
            mine = member.topics(self.protocol_name)
            if mine is None:
                return None
            topics |= mine
        return topics
