"""The member reconciliation of KIP-848 (revoke first, then take what others released)."""

from __future__ import annotations

import uuid

from strom.coordinator.group.consumer.model import MemberState
from strom.coordinator.group.consumer.reconcile import reconcile

T = uuid.UUID(int=7)


def fs(*ps: int) -> frozenset[int]:
    return frozenset(ps)


def never(_t: uuid.UUID, _p: int) -> bool:
    return False


def test_a_stable_member_at_the_target_epoch_is_unchanged() -> None:
    nxt = reconcile(member_epoch=3, previous_member_epoch=2, state=MemberState.STABLE,
                    assigned={T: fs(0, 1)}, pending_revocation={}, target_epoch=3,
                    target={T: fs(0)}, owned=None, held_by_other=never)
    assert (nxt.member_epoch, nxt.state, nxt.assigned) == (3, MemberState.STABLE, {T: fs(0, 1)})


def test_partitions_leaving_the_target_are_revoked_first_at_the_old_epoch() -> None:
    nxt = reconcile(member_epoch=3, previous_member_epoch=2, state=MemberState.STABLE,
                    assigned={T: fs(0, 1, 2)}, pending_revocation={}, target_epoch=4,
                    target={T: fs(0, 3)}, owned=None, held_by_other=never)
    assert nxt.state is MemberState.UNREVOKED_PARTITIONS
    assert nxt.member_epoch == 3  # not before it revoked
    assert nxt.assigned == {T: fs(0)}
    assert nxt.pending_revocation == {T: fs(1, 2)}
    still = reconcile(member_epoch=3, previous_member_epoch=2, state=nxt.state,
                      assigned=nxt.assigned, pending_revocation=nxt.pending_revocation,
                      target_epoch=4, target={T: fs(0, 3)}, owned={T: fs(0, 1)},
                      held_by_other=never)
    assert still.state is MemberState.UNREVOKED_PARTITIONS  # it still owns 1
    done = reconcile(member_epoch=3, previous_member_epoch=2, state=nxt.state,
                     assigned=nxt.assigned, pending_revocation=nxt.pending_revocation,
                     target_epoch=4, target={T: fs(0, 3)}, owned={T: fs(0)},
                     held_by_other=never)
    assert (done.member_epoch, done.previous_member_epoch, done.state) == (
        4, 3, MemberState.STABLE)
    assert done.assigned == {T: fs(0, 3)} and done.pending_revocation == {}


def test_a_partition_another_member_still_holds_is_held_back() -> None:
    def held(_t: uuid.UUID, p: int) -> bool:
        return p == 3

    nxt = reconcile(member_epoch=3, previous_member_epoch=2, state=MemberState.STABLE,
                    assigned={T: fs(0)}, pending_revocation={}, target_epoch=4,
                    target={T: fs(0, 3, 4)}, owned=None, held_by_other=held)
    assert (nxt.member_epoch, nxt.state) == (4, MemberState.UNRELEASED_PARTITIONS)
    assert nxt.assigned == {T: fs(0, 4)}
    later = reconcile(member_epoch=4, previous_member_epoch=3, state=nxt.state,
                      assigned=nxt.assigned, pending_revocation={}, target_epoch=4,
                      target={T: fs(0, 3, 4)}, owned=None, held_by_other=never)
    assert (later.state, later.assigned) == (MemberState.STABLE, {T: fs(0, 3, 4)})
    assert later.previous_member_epoch == 3
