"""A member's next assignment on its way to the target (Kafka's ``CurrentAssignmentBuilder``).

Pure: given the member's current state, the target assignment and its epoch, which partitions
another member still holds, and the partitions the member says it owns (None when the
heartbeat did not say), return the member's next (epoch, previous epoch, state, assigned,
pending revocation).

Rules (KIP-848):

* A member first gives up what the target takes away: it stays at its epoch in
  UNREVOKED_PARTITIONS, assigned only what it keeps, until a heartbeat's owned partitions no
  longer include any partition pending revocation (or it rejoins owning nothing).
* Then it moves to the target epoch. A partition of its target that another member still holds
  is held back (UNRELEASED_PARTITIONS) and given on a later heartbeat, once released; with
  nothing held back the member is STABLE at the target epoch, assigned exactly its target.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from strom.coordinator.group.consumer.model import Assignment, MemberState


@dataclass(frozen=True, slots=True)
class Next:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


def _normalise(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def reconcile(*, member_epoch: int, previous_member_epoch: int, state: MemberState,
              assigned: Assignment, pending_revocation: Assignment, target_epoch: int,
              target: Assignment, owned: Assignment | None,
              held_by_other: Callable[[uuid.UUID, int], bool]) -> Next:
    current = Next(member_epoch, previous_member_epoch, state, _normalise(assigned),
                   _normalise(pending_revocation))
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or _overlaps(owned, current.pending_revocation):
            return current  # still revoking
        return _towards(current, target_epoch, target, held_by_other)
    if state is MemberState.STABLE and member_epoch == target_epoch:
        return current
    return _towards(current, target_epoch, target, held_by_other)


def _towards(current: Next, target_epoch: int, target: Assignment,
             held_by_other: Callable[[uuid.UUID, int], bool]) -> Next:
    target = _normalise(target)
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    for topic, partitions in current.assigned.items():
        kept = partitions & target.get(topic, frozenset())
        if kept:
            keep[topic] = kept
        gone = partitions - kept
        if gone:
            revoke[topic] = gone
    if revoke:
        return Next(current.member_epoch, current.previous_member_epoch,
                    MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    assigned = dict(keep)
    unreleased = False
    for topic, partitions in target.items():
        for partition in sorted(partitions - keep.get(topic, frozenset())):
            if held_by_other(topic, partition):
                unreleased = True
                continue
            assigned[topic] = assigned.get(topic, frozenset()) | {partition}
    new_previous = (current.member_epoch if current.member_epoch != target_epoch
                    else current.previous_member_epoch)
    return Next(target_epoch, new_previous,
                MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
                assigned, {})


def _overlaps(a: Assignment, b: Assignment) -> bool:
    return any(a.get(topic, frozenset()) & partitions for topic, partitions in b.items())
