"""Partition assignors the group leader runs, under Kafka's protocol names (sans-io).

The leader of a classic consumer group receives every member's subscription (JoinGroup) and
answers with every member's assignment (SyncGroup). Which assignor runs is the protocol the
coordinator chose: the first name in the leader's preference list that every member offers.
To share a group with Java, librdkafka or kafka-python members, an assignor here must compute
what theirs computes under the same name:

- ``range`` — per topic, members ordered by ``group.instance.id`` (static members first, as
  Java orders them) then member id; each gets ``n // m`` consecutive partitions, the first
  ``n % m`` one more.
- ``roundrobin`` — every subscribed partition, ordered by topic then partition, dealt to the
  members in the same order, skipping members not subscribed to the partition's topic.
- ``sticky`` — balanced (sizes differ by at most one where subscriptions allow), keeping as
  many previously owned partitions as balance permits. The previous assignment comes from the
  subscription's ``owned_partitions`` (v1+) or from Java's sticky ``user_data``
  (``[topic string, [partition int32]]`` then ``generation int32``), the newest generation
  winning when two members claim one partition.
- ``cooperative-sticky`` — the sticky assignment, then every partition that changes owner is
  withheld from its new owner for this round (KIP-429): its old owner revokes it, rejoins, and
  the follow-up rebalance hands it over. ``user_data`` is the member's generation (int32).

Assignors only see metadata the leader passes in: ``partitions_per_topic`` maps each
subscribed topic to its partition count (topics without metadata are absent).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.client.consumer_protocol import ConsumerSubscription
from strom.common.errors import StromError
from strom.common.types import TopicPartition
from strom.protocol.primitives import (
    Reader,
    write_array_length,
    write_int32,
    write_string,
)


class AssignorError(StromError):
    """An unknown assignor name, or user data an assignor cannot read."""


@dataclass(frozen=True, slots=True)
class Member:
    """One group member as the leader sees it (from the JoinGroup response)."""

    member_id: str
    subscription: ConsumerSubscription
    group_instance_id: str | None = None

    def sort_key(self) -> tuple[int, str, str]:
        """Java's member order: static members by instance id first, then by member id."""
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, self.member_id, "")


Assignment = dict[str, list[TopicPartition]]


class Assignor(Protocol):
    """What the leader runs; ``name`` is the protocol name on the wire."""

    name: str
    cooperative: bool

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[Member]) -> Assignment: ...

    def user_data(self, owned: Sequence[TopicPartition], generation: int) -> bytes | None:
        """The ``user_data`` a member puts in its subscription for this assignor."""
        ...


def _ordered(members: Sequence[Member]) -> list[Member]:
    return sorted(members, key=Member.sort_key)


class RangeAssignor:
    name = "range"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[Member]) -> Assignment:
        out: Assignment = {m.member_id: [] for m in members}
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            takers = [m for m in _ordered(members) if topic in m.subscription.topics]
            if not takers:
                continue
            share, extra = divmod(count, len(takers))
            start = 0
            for i, m in enumerate(takers):
                size = share + (1 if i < extra else 0)
                out[m.member_id].extend(TopicPartition(topic, p)
                                        for p in range(start, start + size))
                start += size
        return out

    def user_data(self, owned: Sequence[TopicPartition], generation: int) -> bytes | None:
        return None


class RoundRobinAssignor:
    name = "roundrobin"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[Member]) -> Assignment:
        ordered = _ordered(members)
        out: Assignment = {m.member_id: [] for m in members}
        if not ordered:
            return out
        turn = 0
        for topic in sorted(partitions_per_topic):
            for p in range(partitions_per_topic[topic]):
                for _ in range(len(ordered)):
                    m = ordered[turn % len(ordered)]
                    turn += 1
                    if topic in m.subscription.topics:
                        out[m.member_id].append(TopicPartition(topic, p))
                        break
        return out

    def user_data(self, owned: Sequence[TopicPartition], generation: int) -> bytes | None:
        return None


def encode_sticky_user_data(owned: Sequence[TopicPartition], generation: int) -> bytes:
    """Java's StickyAssignor user data: the previous assignment by topic, then generation."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in owned:
        by_topic[tp.topic].append(tp.partition)
    out = [write_array_length(len(by_topic))]
    for topic, parts in by_topic.items():
        out.append(write_string(topic))
        out.append(write_array_length(len(parts)))
        out.extend(write_int32(p) for p in parts)
    out.append(write_int32(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation or -1) from Java's sticky user data."""
    reader = Reader(data)
    owned: list[TopicPartition] = []
    for _ in range(reader.array_length()):
        topic = reader.string()
        owned.extend(TopicPartition(topic, reader.int32()) for _ in range(reader.array_length()))
    generation = reader.int32() if not reader.at_end() else -1
    return owned, generation


def _previous(member: Member, cooperative: bool) -> tuple[list[TopicPartition], int]:
    sub = member.subscription
    if not cooperative and sub.user_data:
        try:
            return decode_sticky_user_data(sub.user_data)
        except Exception:  # another client's format: fall back to owned partitions
            pass
    generation = sub.generation_id
    if cooperative and sub.user_data and len(sub.user_data) >= 4 and generation < 0:
        generation = struct.unpack(">i", sub.user_data[:4])[0]
    return list(sub.owned_partitions), generation


def sticky_assignment(partitions_per_topic: Mapping[str, int], members: Sequence[Member],
                      cooperative: bool) -> tuple[Assignment, dict[TopicPartition, str]]:
    """The balanced sticky assignment and each partition's previous owner."""
    ordered = _ordered(members)
    subscribed = {m.member_id: set(m.subscription.topics) for m in ordered}
    all_partitions = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                      for p in range(partitions_per_topic[t])]
    eligible: dict[TopicPartition, list[str]] = {
        tp: [m.member_id for m in ordered if tp.topic in subscribed[m.member_id]]
        for tp in all_partitions}
    # Previous owners: the newest generation wins a partition two members claim.
    owner: dict[TopicPartition, tuple[int, str]] = {}
    for m in ordered:
        owned, generation = _previous(m, cooperative)
        for tp in owned:
            if tp not in eligible or m.member_id not in eligible[tp]:
                continue
            if tp not in owner or generation > owner[tp][0]:
                owner[tp] = (generation, m.member_id)
    assigned: Assignment = {m.member_id: [] for m in ordered}
    assignable = [tp for tp in all_partitions if eligible[tp]]
    total = len(assignable)
    quota_max = -(-total // len(ordered)) if ordered else 0
    unassigned: list[TopicPartition] = []
    for tp in assignable:
        prev = owner.get(tp)
        if prev is not None and len(assigned[prev[1]]) < quota_max:
            assigned[prev[1]].append(tp)
        else:
            unassigned.append(tp)
    # Hand out the rest to the least loaded eligible member; scarce partitions first.
    unassigned.sort(key=lambda tp: (len(eligible[tp]), tp.topic, tp.partition))
    for tp in unassigned:
        target = min(eligible[tp], key=lambda mid: len(assigned[mid]))
        assigned[target].append(tp)
    _balance(assigned, eligible)
    previous = {tp: mid for tp, (_, mid) in owner.items()}
    return assigned, previous


def _balance(assigned: Assignment, eligible: Mapping[TopicPartition, list[str]]) -> None:
    """Move partitions from the most to the least loaded members until no eligible move
    narrows the gap (sizes then differ by at most one when subscriptions are equal)."""
    moved = True
    while moved:
        moved = False
        for rich in sorted(assigned, key=lambda mid: -len(assigned[mid])):
            for tp in reversed(assigned[rich]):
                poorest = min(eligible[tp], key=lambda mid: len(assigned[mid]))
                if len(assigned[poorest]) + 1 < len(assigned[rich]):
                    assigned[rich].remove(tp)
                    assigned[poorest].append(tp)
                    moved = True
                    break
            if moved:
                break


class StickyAssignor:
    name = "sticky"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[Member]) -> Assignment:
        return sticky_assignment(partitions_per_topic, members, cooperative=False)[0]

    def user_data(self, owned: Sequence[TopicPartition], generation: int) -> bytes | None:
        return encode_sticky_user_data(owned, generation)


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    cooperative = True

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Sequence[Member]) -> Assignment:
        assigned, previous = sticky_assignment(partitions_per_topic, members, cooperative=True)
        # KIP-429: a partition changing owner is first revoked by its owner, handed over in
        # the follow-up rebalance that owner's rejoin triggers.
        return {mid: [tp for tp in tps if previous.get(tp, mid) == mid]
                for mid, tps in assigned.items()}

    def user_data(self, owned: Sequence[TopicPartition], generation: int) -> bytes | None:
        return struct.pack(">i", generation)


ASSIGNORS: dict[str, type[RangeAssignor] | type[RoundRobinAssignor] | type[StickyAssignor]
                | type[CooperativeStickyAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}

# Java's class names, as ``partition.assignment.strategy`` may give them.
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def assignors_named(names: str | Sequence[str | Assignor]) -> list[Assignor]:
    """Assignors by protocol name (or Java class name), in preference order; objects that
    already are assignors pass through (custom assignors)."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    out: list[Assignor] = []
    for entry in names:
        if not isinstance(entry, str):
            out.append(entry)
            continue
        key = _JAVA_NAMES.get(entry.strip(), entry.strip().lower())
        cls = ASSIGNORS.get(key)
        if cls is None:
            raise AssignorError(f"unknown partition assignor {entry!r}: expected one of "
                                f"{', '.join(ASSIGNORS)}")
        out.append(cls())
    if not out:
        raise AssignorError("partition.assignment.strategy names no assignor")
    return out
