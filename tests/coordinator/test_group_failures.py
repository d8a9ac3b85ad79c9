"""The group coordinator when its writes wait, fail or time out, and when its partition loads
or moves away: responses are released only once records commit; a refused write is never
visible and answers Kafka's error, protocol-session changes made for it are undone; a write
answered at its timeout is applied when it commits; a write whose fate is unknown reloads the
shard from its log — so the shard always holds what its log does."""

from __future__ import annotations

import logging

import pytest

from strom.common.errors import (
    ErrorCode,
    KafkaStorageError,
    MessageTooLargeError,
    NotEnoughReplicasError,
)
from strom.common.types import TopicPartition
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import Group, GroupState, OffsetToCommit
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.runtime import ShardState
from strom.testing.partition_writer import MemoryPartitionWriter
from tests.coordinator.fakes import (
    commit,
    delete_groups,
    delete_offsets,
    fetch,
    fetched,
    make_coordinator,
    settle,
)
from tests.coordinator.test_group_coordinator import join, stable_group_of_two, sync

E = ErrorCode


def the_group(c: GroupCoordinator, group_id: str = "g") -> Group:
    found = c.group(group_id)
    assert found is not None
    return found


def one_member_stable(c: GroupCoordinator, **join_args: object) -> str:
    a = join(c, **join_args)  # type: ignore[arg-type]
    a_id = a[0].member_id
    assert sync(c, a_id, 1, {a_id: b"A"})[0].error == E.NONE
    return a_id


def tp_of(c: GroupCoordinator, group_id: str = "g") -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, c.partition_for(group_id))


# -- OffsetCommit ------------------------------------------------------------
def test_offset_commit_answers_only_once_committed() -> None:
    c, _, w = make_coordinator()
    w.hold = True
    answer = commit(c, "g", offsets=[OffsetToCommit("t", 0, 5, -1, "")])
    settle()
    assert answer == [] and fetched(c, "g") == -1  # not visible before it commits
    w.commit()
    settle()
    assert answer == [[E.NONE]] and fetched(c, "g") == 5


def test_offset_commit_whose_fate_is_unknown_reloads_the_shard() -> None:
    c, _, w = make_coordinator()
    assert commit(c, "g", offsets=[OffsetToCommit("t", 0, 1, -1, "")]) == [[E.NONE]]
    w.hold = True
    answer = commit(c, "g", offsets=[OffsetToCommit("t", 0, 9, -1, ""),
                                     OffsetToCommit("t", 1, 9, -1, "")])
    w.fail(KafkaStorageError("fsync failed"))
    settle()
    assert answer == [[E.NOT_COORDINATOR, E.NOT_COORDINATOR]]  # type: ignore[attr-defined]
    # the records are in the log, so the reloaded shard has them (as a new leader would)
    assert c.runtime.state(c.partition_for("g")) is ShardState.ACTIVE
    assert fetched(c, "g") == 9 and fetched(c, "g", partition=1) == 9
    w.hold = False
    assert commit(c, "g", offsets=[OffsetToCommit("t", 0, 3, -1, "")]) == [[E.NONE]]
    assert fetched(c, "g") == 3


@pytest.mark.parametrize(("error", "expected"), [
    (NotEnoughReplicasError("isr"), "COORDINATOR_NOT_AVAILABLE"),
    (KafkaStorageError("disk full"), "NOT_COORDINATOR"),
    (MessageTooLargeError("big"), "INVALID_COMMIT_OFFSET_SIZE"),
])
def test_offset_commit_failing_synchronously(error: Exception, expected: str) -> None:
    c, _, w = make_coordinator()
    w.fail_appends = error  # type: ignore[assignment]
    big = OffsetToCommit("t", 1, 2, -1, "x" * 5000)  # refused before any write
    answer = commit(c, "g", offsets=[OffsetToCommit("t", 0, 2, -1, ""), big])
    assert answer == [[getattr(E, expected), E.OFFSET_METADATA_TOO_LARGE]]  # type: ignore[attr-defined]
    assert fetched(c, "g") == -1


def test_offset_commit_timing_out_is_answered_then_applied_when_it_commits() -> None:
    """Issue 22: the commit's write is in the log but not committed within
    offsets.commit.timeout.ms. The client gets COORDINATOR_NOT_AVAILABLE at once; the offset
    stays in flight (UNSTABLE for require_stable) and becomes visible when the write
    commits — before, the write was failed for good and OffsetFetch never returned it in
    this run although the log held it committed (a reload or failover did)."""
    c, sched, w = make_coordinator()
    assert commit(c, "g", offsets=[OffsetToCommit("t", 0, 3, -1, "")]) == [[0]]
    w.hold = True
    answer = commit(c, "g", offsets=[OffsetToCommit("t", 0, 7, -1, "")])
    sched.advance(c.settings.write_timeout_ms)
    settle()
    assert answer == [[E.COORDINATOR_NOT_AVAILABLE]]  # type: ignore[attr-defined]
    assert fetched(c, "g") == 3
    error, stable = c.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert (error, stable[0].error) == (0, E.UNSTABLE_OFFSET_COMMIT)  # type: ignore[attr-defined]
    w.commit()
    settle()
    assert answer == [[E.COORDINATOR_NOT_AVAILABLE]]  # answered once
    assert fetched(c, "g") == 7
    error, stable = c.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert (error, stable[0].offset, stable[0].error) == (0, 7, 0)
    reloaded, _, _ = make_coordinator(writer=w)
    assert fetched(reloaded, "g") == 7  # memory is what a load of the log gives


def test_commits_become_visible_in_offset_order() -> None:
    c, _, w = make_coordinator()
    w.hold = True
    first = commit(c, "g", offsets=[OffsetToCommit("t", 0, 1, -1, "")])
    second = commit(c, "g", offsets=[OffsetToCommit("t", 0, 2, -1, "")])
    w.held[1].future.set_result(w.held[1].last_offset)  # the later write resolves first
    settle()
    assert second == [] and fetched(c, "g") == -1
    w.commit()
    settle()
    assert first == second == [[E.NONE]] and fetched(c, "g") == 2


# -- SyncGroup ------------------------------------------------------------
def test_sync_group_answers_everyone_once_the_assignment_commits() -> None:
    c, _, w = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    a3, b3 = join(c, a_id, protocols=[("range", b"\0\0\0\0\0\0")]), join(c, b_id)
    assert a3[0].generation == b3[0].generation == 3
    follower = sync(c, b_id, 3)
    w.hold = True
    leader = sync(c, a_id, 3, {a_id: b"A3", b_id: b"B3"})
    settle()
    assert leader == follower == []
    group = the_group(c)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.members[b_id].assignment == b"B2"  # not applied before the commit
    w.commit()
    settle()
    assert leader[0].assignment == b"A3" and follower[0].assignment == b"B3"
    assert group.state is GroupState.STABLE and group.members[b_id].assignment == b"B3"


def _two_members_syncing(c: GroupCoordinator, w: MemoryPartitionWriter
                         ) -> tuple[str, str, list[object], list[object]]:
    a = join(c)
    b = join(c)
    a_id = a[0].member_id
    a_again = join(c, a_id)
    b_id = b[0].member_id
    b_again = join(c, b_id)
    assert a_again and b_again and a_again[0].generation == 2
    follower = sync(c, b_id, 2)
    w.hold = True
    leader = sync(c, a_id, 2, {a_id: b"A", b_id: b"B"})
    return a_id, b_id, leader, follower  # type: ignore[return-value]


def test_sync_group_assignment_timing_out_rebalances() -> None:
    c, sched, w = make_coordinator()
    a_id, b_id, leader, follower = _two_members_syncing(c, w)
    sched.advance(c.settings.write_timeout_ms)
    settle()
    code = E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
    assert leader[0].error == follower[0].error == code  # type: ignore[attr-defined]
    group = the_group(c)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.members[a_id].assignment == b"" == group.members[b_id].assignment
    w.commit()  # committed late: generation 2's assignment, as the log now says
    settle()
    assert len(leader) == len(follower) == 1 and group.state is GroupState.PREPARING_REBALANCE
    assert group.members[a_id].assignment == b"A"


def test_sync_group_assignment_whose_fate_is_unknown_reloads_the_group() -> None:
    c, _, w = make_coordinator()
    a_id, b_id, leader, follower = _two_members_syncing(c, w)
    w.fail(KafkaStorageError("fsync failed"))
    settle()
    code = E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert leader[0].error == follower[0].error == code  # type: ignore[attr-defined]
    group = the_group(c)  # reloaded from the log, which holds the assignment
    assert group.state is GroupState.STABLE and group.generation == 2
    assert group.members[a_id].assignment == b"A" and group.members[b_id].assignment == b"B"


def test_member_joining_while_the_assignment_is_written_is_not_clobbered() -> None:
    c, _, w = make_coordinator()
    a_id = join(c)[0].member_id
    w.hold = True
    leader = sync(c, a_id, 1, {a_id: b"A"})
    newcomer = join(c)  # a rebalance starts while the assignment is pending
    assert leader[0].error == E.REBALANCE_IN_PROGRESS  # type: ignore[attr-defined]
    w.commit()
    settle()
    group = the_group(c)
    assert group.state is GroupState.PREPARING_REBALANCE and len(group.members) == 2
    assert newcomer == []  # still waiting for a to rejoin
    assert group.members[a_id].assignment == b"A"  # generation 1's committed assignment
    rejoined = join(c, a_id)
    assert rejoined[0].generation == 2 and len(rejoined[0].members) == 2


# -- static membership ------------------------------------------------------------
def test_static_rejoin_timing_out_reverts_the_member_id_swap() -> None:
    c, sched, w = make_coordinator()
    a_id = one_member_stable(c, instance="i-a")
    w.hold = True
    again = join(c, instance="i-a")
    group = the_group(c)
    new_id = next(iter(group.members))
    assert again == [] and new_id != a_id  # swapped in memory, waiting for the write
    sched.advance(c.settings.write_timeout_ms)
    settle()
    assert again[0].error == E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
    assert list(group.members) == [a_id] and group.static_members == {"i-a": a_id}
    assert group.leader_id == a_id and group.state is GroupState.STABLE
    assert c.heartbeat("g", a_id, "i-a", 1) == E.NONE
    assert c.heartbeat("g", new_id, "i-a", 1) == E.FENCED_INSTANCE_ID  # type: ignore[attr-defined]
    w.commit()  # the record commits late: membership is the protocol's, answered once
    settle()
    assert len(again) == 1 and list(group.members) == [a_id]


def test_static_rejoin_refused_reverts_the_member_id_swap() -> None:
    c, _, w = make_coordinator()
    a_id = one_member_stable(c, instance="i-a")
    w.fail_appends = KafkaStorageError("disk gone")
    again = join(c, instance="i-a")
    group = the_group(c)
    assert again[0].error == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert list(group.members) == [a_id] and group.static_members == {"i-a": a_id}
    assert c.heartbeat("g", a_id, "i-a", 1) == E.NONE


def test_static_rejoin_answers_once_committed() -> None:
    c, _, w = make_coordinator()
    a_id = one_member_stable(c, instance="i-a")
    w.hold = True
    again = join(c, instance="i-a")
    w.commit()
    settle()
    assert again[0].error == E.NONE and again[0].member_id != a_id
    assert again[0].skip_assignment  # the rejoining leader keeps its assignment (KIP-814)
    assert sync(c, again[0].member_id, 1, instance="i-a")[0].assignment == b"A"


# -- deletions, expiry, empty groups ------------------------------------------------------------
def test_delete_groups_refused_keeps_the_group() -> None:
    c, _, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 4, -1, "")])
    w.fail_appends = NotEnoughReplicasError("isr")
    assert delete_groups(c, ["g"]) == [[E.COORDINATOR_NOT_AVAILABLE]]  # type: ignore[attr-defined]
    assert the_group(c).state is GroupState.EMPTY and fetched(c, "g") == 4


def test_delete_groups_timing_out_stays_dead_until_the_tombstones_commit() -> None:
    c, sched, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 4, -1, "")])
    w.hold = True
    answer = delete_groups(c, ["g"])
    assert answer == [] and the_group(c).state is GroupState.DEAD
    assert join(c)[0].error == E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
    assert commit(c, "g") == [[E.COORDINATOR_NOT_AVAILABLE]]  # type: ignore[attr-defined]
    sched.advance(c.settings.write_timeout_ms)
    settle()
    assert answer == [[E.COORDINATOR_NOT_AVAILABLE]]  # type: ignore[attr-defined]
    assert the_group(c).state is GroupState.DEAD  # still being deleted
    w.commit()
    settle()
    assert c.group("g") is None and len(answer) == 1


def test_delete_groups_covers_commits_still_in_flight() -> None:
    c, _, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 4, -1, "")])
    w.hold = True
    pending = commit(c, "g", offsets=[OffsetToCommit("u", 0, 8, -1, "")])
    answer = delete_groups(c, ["g"])
    w.commit()
    settle()
    assert pending == [[E.NONE]] and answer == [[E.NONE]] and c.group("g") is None
    reloaded, _, _ = make_coordinator(writer=w)
    assert reloaded.group("g") is None  # the tombstones covered the in-flight commit too


def test_offset_delete_failing_is_the_top_level_error() -> None:
    c, _, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 4, -1, "")])
    w.fail_appends = KafkaStorageError("disk full")
    assert delete_offsets(c, "g", [("t", 0)]) == [(E.NOT_COORDINATOR, [])]  # type: ignore[attr-defined]
    assert fetched(c, "g") == 4


def test_expiry_write_refused_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c, sched, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 4, -1, "")])
    sched.advance(c.settings.offsets_retention_ms + 1)
    w.fail_appends = KafkaStorageError("disk gone")
    with caplog.at_level(logging.WARNING, "strom.coordinator.group"):
        assert c.expire_offsets() == 1
    assert "offset expiry for group g failed" in caplog.text
    assert the_group(c).state is GroupState.EMPTY and fetched(c, "g") == 4


def test_empty_group_write_failing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    c, _, w = make_coordinator()
    a_id = one_member_stable(c)
    w.fail_appends = KafkaStorageError("disk gone")
    with caplog.at_level(logging.WARNING, "strom.coordinator.group"):
        c.leave_group("g", [(a_id, None)])
    assert "cannot store the empty generation 2" in caplog.text
    group = the_group(c)
    assert group.state is GroupState.EMPTY and group.generation == 2


# -- loading and leadership ------------------------------------------------------------
def test_requests_while_loading_get_coordinator_load_in_progress() -> None:
    c, _, _ = make_coordinator(load=False)
    p = c.partition_for("g")
    c.runtime.on_become_leader(p, 0)
    loading = E.COORDINATOR_LOAD_IN_PROGRESS  # type: ignore[attr-defined]
    assert join(c)[0].error == loading
    assert sync(c, "m", 1)[0].error == loading
    assert c.heartbeat("g", "m", None, 1) == loading
    assert c.leave_group("g", [("m", None)]) == (loading, [loading])
    assert commit(c, "g") == [[loading]]
    assert c.fetch_offsets("g", None) == (loading, [])
    assert c.describe_group("g")[0] == loading
    assert c.list_groups() == (loading, [])
    assert delete_groups(c, ["g"]) == [[loading]]
    settle()
    assert c.runtime.state(p) is ShardState.ACTIVE and join(c)[0].error == E.NONE


def test_groups_of_partitions_not_led_here_get_not_coordinator() -> None:
    c, _, _ = make_coordinator(load=False)
    other = E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert join(c)[0].error == other
    assert commit(c, "g") == [[other]]
    assert c.fetch_offsets("g", [("t", 0)]) == (other, [])
    assert c.list_groups() == (E.NONE, [])
    assert delete_offsets(c, "g", [("t", 0)]) == [(other, [])]


def test_resign_answers_parked_requests_and_a_new_leader_replays_what_committed() -> None:
    c, _, w = make_coordinator()
    a_id = one_member_stable(c)
    commit(c, "g", 1, a_id, [OffsetToCommit("t", 0, 6, -1, "")])
    newcomer = join(c)  # parked in the join phase
    p = c.partition_for("g")
    neighbour = next(f"n{i}" for i in range(1000) if c.partition_for(f"n{i}") == p)
    w.hold = True
    in_flight = commit(c, neighbour, offsets=[OffsetToCommit("t", 0, 1, -1, "")])
    c.runtime.on_resign(p, 1)
    assert newcomer[0].error == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert in_flight == [[E.NOT_COORDINATOR]]  # type: ignore[attr-defined]
    assert c.heartbeat("g", a_id, None, 1) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    w.hold = False
    w.commit()
    c.runtime.on_become_leader(p, 2)
    settle()
    group = the_group(c)
    assert set(group.members) == {a_id} and group.generation == 1
    assert fetched(c, "g") == 6


def test_shard_memory_is_a_replay_of_its_log_whatever_the_writes_did() -> None:
    """Writes committed at once, late (after their answer timed out), refused, and one
    whose fate was lost (reload): the coordinator's offsets equal those of a coordinator
    that loads the same log."""
    c, sched, w = make_coordinator()
    commit(c, "g", offsets=[OffsetToCommit("t", 0, 1, -1, "")])
    w.hold = True
    commit(c, "g", offsets=[OffsetToCommit("t", 1, 2, -1, "")])
    sched.advance(c.settings.write_timeout_ms)
    w.commit()
    w.hold = False
    w.fail_appends = NotEnoughReplicasError("isr")
    commit(c, "g", offsets=[OffsetToCommit("t", 2, 3, -1, "")])
    w.fail_appends = None
    w.hold = True
    commit(c, "g", offsets=[OffsetToCommit("t", 3, 4, -1, "")])
    w.fail(KafkaStorageError("fsync failed"))
    settle()
    w.hold = False
    reloaded, _, _ = make_coordinator(writer=w)
    ours = [(o.topic, o.partition, o.offset) for o in fetch(c, "g", None)]
    assert ours == [("t", 0, 1), ("t", 1, 2), ("t", 3, 4)]
    assert ours == [(o.topic, o.partition, o.offset) for o in fetch(reloaded, "g", None)]
