"""Server-side assignors of KIP-848 consumer groups: ``uniform`` (Kafka's default) and ``range``.

Both are pure functions of the members' subscriptions (topic ids), the partition counts and
the current target assignment, and return every member's new target (``{member id: {topic id:
partitions}}``). Members and topics are taken in a fixed order (member id, topic id bytes) so
every coordinator computes the same assignment from the same records.

* ``uniform``: every partition of a subscribed topic goes to one member subscribed to it; the
  members' counts differ by at most one where their subscriptions are the same; a member
  keeps the partitions it already has as long as that stays true (sticky), so a member joining
  moves only the partitions it takes.
* ``range``: per topic, the members subscribed to it in member-id order get contiguous ranges,
  the first ``partitions % members`` one more (Kafka's client-side range, per topic).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping

from strom.coordinator.group.consumer.model import Assignment
from strom.coordinator.group.consumer.settings import ASSIGNORS

Subscriptions = Mapping[str, frozenset[uuid.UUID]]
Targets = dict[str, dict[uuid.UUID, frozenset[int]]]

__all__ = ["ASSIGNORS", "assign", "range_assign", "uniform_assign"]


def assign(name: str, subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Assignment]) -> Targets:
    if name == "range":
        return range_assign(subscriptions, partitions)
    return uniform_assign(subscriptions, partitions, current)


def range_assign(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int]) -> Targets:
    out: Targets = {member: {} for member in subscriptions}
    for topic in sorted(partitions, key=lambda t: t.bytes):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        count = partitions[topic]
        each, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = each + (1 if index < extra else 0)
            if size:
                out[member][topic] = frozenset(range(start, start + size))
            start += size
    return out


def uniform_assign(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
                   current: Mapping[str, Assignment]) -> Targets:
    if len(set(subscriptions.values())) == 1:
        return _homogeneous(subscriptions, partitions, current)
    return _heterogeneous(subscriptions, partitions, current)


def _homogeneous(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
                 current: Mapping[str, Assignment]) -> Targets:
    """Every member subscribes to the same topics: ``P // M`` partitions each, the first
    ``P % M`` one more — those that hold the most now, so the fewest move; each keeps what
    it holds up to its share. O(P + M log M): a join to a group of a thousand members must
    not stall the broker's loop."""
    members = sorted(subscriptions)
    kind = subscriptions[members[0]]
    every = [(topic, p) for topic in sorted((t for t in kind if t in partitions),
                                            key=lambda t: t.bytes)
             for p in range(partitions[topic])]
    valid = set(every)
    held = {m: [(t, p) for t, ps in sorted(current.get(m, {}).items(), key=lambda kv: kv[0].bytes)
                for p in sorted(ps) if (t, p) in valid] for m in members}
    base, extra = divmod(len(every), len(members))
    by_holding = sorted(members, key=lambda m: (-len(held[m]), m))
    cap = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(by_holding)}
    taken: set[tuple[uuid.UUID, int]] = set()
    mine: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    for m in members:
        for tp in held[m]:
            if len(mine[m]) < cap[m] and tp not in taken:
                taken.add(tp)
                mine[m].append(tp)
    free = iter(tp for tp in every if tp not in taken)
    for m in members:
        while len(mine[m]) < cap[m]:
            mine[m].append(next(free))
    out: Targets = {m: {} for m in members}
    for m, tps in mine.items():
        for topic, p in tps:
            out[m][topic] = out[m].get(topic, frozenset()) | {p}
    return out


def _heterogeneous(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
                   current: Mapping[str, Assignment]) -> Targets:
    """Members subscribe to different topics: sticky up to a fair share, the rest to the
    least loaded member that may take each partition, then moves that narrow the gap."""
    members = sorted(subscriptions)
    out: Targets = {member: {} for member in members}
    if not members:
        return out
    counts = dict.fromkeys(members, 0)
    every = [(topic, p) for topic in sorted(partitions, key=lambda t: t.bytes)
             for p in range(partitions[topic])
             if any(topic in subscriptions[m] for m in members)]
    eligible_total = len(every)
    # A member's fair share: the partitions it could take, spread over those who could too
    # (per distinct subscription: usually every member has the same one).
    kinds = Counter(subscriptions[m] for m in members)
    share: dict[frozenset[uuid.UUID], int] = {}
    for kind in kinds:
        mine = sum(partitions[t] for t in kind if t in partitions)
        sharers = max(1, sum(n for other, n in kinds.items() if other & kind))
        share[kind] = -(-min(mine, eligible_total) // sharers)  # ceiling
    quota = {member: share[subscriptions[member]] for member in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member in members:  # sticky: keep what is still valid, up to the quota
        for topic, held in sorted(current.get(member, {}).items(), key=lambda kv: kv[0].bytes):
            if topic not in subscriptions[member] or topic not in partitions:
                continue
            for p in sorted(held):
                if p < partitions[topic] and (topic, p) not in taken and (
                        counts[member] < quota[member]):
                    taken.add((topic, p))
                    counts[member] += 1
                    out[member][topic] = out[member].get(topic, frozenset()) | {p}
    for topic, p in every:
        if (topic, p) in taken:
            continue
        candidates = [m for m in members if topic in subscriptions[m]]
        chosen = min(candidates, key=lambda m: (counts[m], members.index(m)))
        counts[chosen] += 1
        out[chosen][topic] = out[chosen].get(topic, frozenset()) | {p}
    return _rebalance(out, counts, subscriptions)


def _rebalance(out: Targets, counts: dict[str, int], subscriptions: Subscriptions) -> Targets:
    """Move partitions from the fullest to the emptiest member that may take them until no
    move narrows the gap (stickiness can leave counts two or more apart)."""
    members = sorted(counts)
    moved = True
    while moved:
        moved = False
        for giver in sorted(members, key=lambda m: -counts[m]):
            for taker in sorted(members, key=lambda m: counts[m]):
                if counts[giver] - counts[taker] < 2:
                    continue
                for topic in sorted(out[giver], key=lambda t: t.bytes):
                    if topic not in subscriptions[taker] or not out[giver][topic]:
                        continue
                    p = max(out[giver][topic])
                    out[giver][topic] = out[giver][topic] - {p}
                    if not out[giver][topic]:
                        del out[giver][topic]
                    out[taker][topic] = out[taker].get(topic, frozenset()) | {p}
                    counts[giver] -= 1
                    counts[taker] += 1
                    moved = True
                    break
                if moved:
                    break
            if moved:
                break
    return out
