"""The classic group state machine, driven by hand: a manual scheduler and the in-memory
partition writer committing every write at once (failure paths: test_group_failures.py)."""

from __future__ import annotations

from dataclasses import replace

from kafka.protocol.consumer import ConsumerProtocolSubscription

from strom.common.errors import ErrorCode, KafkaStorageError
from strom.coordinator.group.coordinator import GroupCoordinator, GroupSettings
from strom.coordinator.group.model import Group, GroupState, JoinResult, OffsetToCommit, SyncResult
from strom.testing.scheduler import ManualScheduler
from tests.coordinator.fakes import (
    SETTINGS,
    commit,
    delete_groups,
    delete_offsets,
    fetch,
    make_coordinator,
)

E = ErrorCode


def sub(*topics: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None)
                 .encode(version=0))


def join(c: GroupCoordinator, member_id: str = "", *, instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, session: int = 10000,
         rebalance: int = 30000, group: str = "g", client: str = "c",
         known: bool = False) -> list[JoinResult]:
    out: list[JoinResult] = []
    c.join_group(group_id=group, member_id=member_id, group_instance_id=instance,
                 client_id=client, client_host="/h", session_timeout_ms=session,
                 rebalance_timeout_ms=rebalance, protocol_type="consumer",
                 protocols=protocols or [("range", sub("t"))],
                 require_known_member_id=known, callback=out.append)
    return out


def sync(c: GroupCoordinator, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None, group: str = "g",
         instance: str | None = None) -> list[SyncResult]:
    out: list[SyncResult] = []
    c.sync_group(group_id=group, generation=generation, member_id=member_id,
                 group_instance_id=instance, protocol_type=None, protocol_name=None,
                 assignments=assignments or {}, callback=out.append)
    return out


def the_group(c: GroupCoordinator, group_id: str = "g") -> Group:
    found = c.group(group_id)
    assert found is not None
    return found


def stable_group_of_two(c: GroupCoordinator) -> tuple[str, str]:
    a = join(c)
    assert a[0].error == E.NONE  # type: ignore[attr-defined]
    a_id = a[0].member_id
    assert a[0].leader == a_id and a[0].generation == 1
    sync(c, a_id, 1, {a_id: b"A"})
    b = join(c)  # group is Stable: a new member starts a rebalance and waits
    assert b == []
    assert c.heartbeat("g", a_id, None, 1) == E.REBALANCE_IN_PROGRESS  # type: ignore[attr-defined]
    a2 = join(c, a_id)
    assert len(a2) == 1 and len(b) == 1
    assert a2[0].generation == b[0].generation == 2
    assert len(a2[0].members) == 2 and b[0].members == []
    b_id = b[0].member_id
    follower = sync(c, b_id, 2)
    assert follower == []  # waits for the leader
    leader = sync(c, a_id, 2, {a_id: b"A2", b_id: b"B2"})
    assert leader[0].assignment == b"A2" and follower[0].assignment == b"B2"
    assert the_group(c).state is GroupState.STABLE
    return a_id, b_id


def test_member_id_required_then_join_and_sync() -> None:
    c, _, _ = make_coordinator()
    first = join(c, known=True)
    assert first[0].error == E.MEMBER_ID_REQUIRED  # type: ignore[attr-defined]
    member_id = first[0].member_id
    assert member_id.startswith("c-")
    again = join(c, member_id, known=True)
    assert again[0].error == E.NONE and again[0].member_id == member_id  # type: ignore[attr-defined]
    assert again[0].protocol_name == "range" and again[0].protocol_type == "consumer"


def test_two_members_rebalance_and_heartbeats() -> None:
    c, _, _ = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    assert c.heartbeat("g", a_id, None, 2) == E.NONE
    assert c.heartbeat("g", b_id, None, 1) == E.ILLEGAL_GENERATION  # type: ignore[attr-defined]
    assert c.heartbeat("g", "nobody", None, 2) == E.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]
    assert c.heartbeat("other", a_id, None, 2) == E.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]


def test_session_timeout_removes_member_and_rebalances() -> None:
    c, sched, _ = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    sched.advance(6000)
    assert c.heartbeat("g", a_id, None, 2) == E.NONE
    sched.advance(6000)  # b never heartbeats: gone after 10 s
    group = the_group(c)
    assert b_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    rejoin = join(c, a_id)
    assert rejoin[0].generation == 3 and [m[0] for m in rejoin[0].members] == [a_id]


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    c, sched, _ = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    newcomer = join(c)
    assert newcomer == []
    # a keeps heartbeating and rejoins; b keeps heartbeating but never rejoins.
    a2 = join(c, a_id)
    for _ in range(6):
        sched.advance(5000)
        c.heartbeat("g", b_id, None, 2)
    assert a2 and newcomer and a2[0].generation == 3
    assert set(the_group(c).members) == {a_id, newcomer[0].member_id}


def test_initial_delay_waits_for_more_members_up_to_the_rebalance_timeout() -> None:
    settings = replace(SETTINGS, initial_rebalance_delay_ms=3000)
    c, sched, _ = make_coordinator(settings)
    a = join(c, rebalance=7000)
    sched.advance(2000)
    b = join(c, rebalance=7000)
    sched.advance(1500)  # first delay over, but b arrived: extended
    assert a == [] and b == []
    c_ = join(c, rebalance=7000)
    sched.advance(3000)  # second delay: c arrived, extended again (only 1 s remains)
    assert a == []
    sched.advance(1000)
    assert a and b and c_
    assert a[0].generation == b[0].generation == 1
    assert len(a[0].members) == 3


def test_initial_delay_alone_completes_after_one_delay() -> None:
    c, sched, _ = make_coordinator(replace(SETTINGS, initial_rebalance_delay_ms=100))
    a = join(c)
    sched.advance(99)
    assert a == []
    sched.advance(1)
    assert a[0].generation == 1


def test_leave_group_triggers_rebalance_and_empty_group_is_stored() -> None:
    c, _, log = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    top, errors = c.leave_group("g", [(b_id, None), ("ghost", None)])
    assert top == E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID]  # type: ignore[attr-defined]
    assert the_group(c).state is GroupState.PREPARING_REBALANCE
    assert join(c, a_id)[0].generation == 3
    c.leave_group("g", [(a_id, None)])
    group = the_group(c)
    assert group.state is GroupState.EMPTY and group.generation == 4
    reloaded, _, _ = make_coordinator(writer=log)
    assert the_group(reloaded).state is GroupState.EMPTY
    assert the_group(reloaded).generation == 4


def test_commit_validation() -> None:
    c, _, _ = make_coordinator()
    offsets = [OffsetToCommit("t", 0, 10, -1, "meta")]

    def commit_one(gen: int, member: str, group_id: str = "g") -> int:
        return commit(c, group_id, gen, member, offsets)[0][0]

    assert commit_one(-1, "", "standalone") == E.NONE  # simple commit creates the group
    assert fetch(c, "standalone", None)[0].offset == 10
    assert commit_one(3, "m", "missing") == E.ILLEGAL_GENERATION  # type: ignore[attr-defined]
    a = join(c)
    a_id = a[0].member_id
    assert commit_one(1, a_id) == E.REBALANCE_IN_PROGRESS  # type: ignore[attr-defined]
    sync(c, a_id, 1, {a_id: b""})
    assert commit_one(1, a_id) == E.NONE
    assert commit_one(0, a_id) == E.ILLEGAL_GENERATION  # type: ignore[attr-defined]
    assert commit_one(1, "ghost") == E.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]
    assert commit_one(-1, "") == E.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]
    big = [OffsetToCommit("t", 1, 1, -1, "x" * 4097)]
    assert commit(c, "g", 1, a_id, big) == [[E.OFFSET_METADATA_TOO_LARGE]]  # type: ignore[attr-defined]


def test_static_member_rejoins_without_rebalance() -> None:
    c, _, log = make_coordinator()
    a = join(c, instance="i-a")
    a_id = a[0].member_id
    sync(c, a_id, 1, {a_id: b"A"})
    b = join(c, instance="i-b")
    join(c, a_id, instance="i-a")
    b_id = b[0].member_id
    sync(c, b_id, 2)
    sync(c, a_id, 2, {a_id: b"A2", b_id: b"B2"})
    # b restarts: a new join without member id, same instance id and subscription.
    again = join(c, instance="i-b")
    new_b = again[0].member_id
    assert again[0].error == E.NONE and new_b != b_id
    assert again[0].generation == 2 and again[0].members == []
    group = the_group(c)
    assert group.state is GroupState.STABLE and group.generation == 2
    assert sync(c, new_b, 2, instance="i-b")[0].assignment == b"B2"
    assert c.heartbeat("g", b_id, "i-b", 2) == E.FENCED_INSTANCE_ID  # type: ignore[attr-defined]
    assert c.heartbeat("g", new_b, "i-b", 2) == E.NONE
    assert c.heartbeat("g", a_id, None, 2) == E.NONE  # the leader was not disturbed
    # Static leader restarts: it is told it leads but must skip the assignment (KIP-814).
    leader_again = join(c, instance="i-a")
    assert leader_again[0].skip_assignment and leader_again[0].leader == leader_again[0].member_id
    # The swap is durable.
    reloaded, _, _ = make_coordinator(writer=log)
    assert the_group(reloaded).static_members["i-b"] == new_b
    assert the_group(reloaded).members[new_b].assignment == b"B2"


def test_static_member_with_new_subscription_rebalances() -> None:
    c, _, _ = make_coordinator()
    a = join(c, instance="i-a")
    a_id = a[0].member_id
    sync(c, a_id, 1, {a_id: b"A"})
    again = join(c, instance="i-a", protocols=[("range", sub("t", "u"))])
    assert again[0].generation == 2  # alone in the group, so the rebalance completes at once
    assert c.heartbeat("g", a_id, "i-a", 2) == E.FENCED_INSTANCE_ID  # type: ignore[attr-defined]


def test_leave_by_instance_id() -> None:
    c, _, _ = make_coordinator()
    a = join(c, instance="i-a")
    a_id = a[0].member_id
    _, errors = c.leave_group("g", [("wrong", "i-a"), ("", "i-zzz")])
    assert errors == [E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID]  # type: ignore[attr-defined]
    _, errors = c.leave_group("g", [("", "i-a")])
    assert errors == [E.NONE] and a_id not in the_group(c).members


def test_inconsistent_protocols_and_bad_session_timeout() -> None:
    c, _, _ = make_coordinator()
    join(c)
    bad = join(c, protocols=[("roundrobin", sub("t"))])
    assert bad[0].error == E.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[attr-defined]
    short = join(c, session=10)
    assert short[0].error == E.INVALID_SESSION_TIMEOUT  # type: ignore[attr-defined]
    assert join(c, group="")[0].error == E.INVALID_GROUP_ID  # type: ignore[attr-defined]


def test_protocol_vote() -> None:
    c, sched, _ = make_coordinator(replace(SETTINGS, initial_rebalance_delay_ms=100))
    a = join(c, protocols=[("range", sub("t")), ("roundrobin", sub("t"))])
    b = join(c, protocols=[("roundrobin", sub("t")), ("range", sub("t"))])
    d = join(c, protocols=[("roundrobin", sub("t"))])
    sched.advance(200)
    assert a[0].protocol_name == b[0].protocol_name == d[0].protocol_name == "roundrobin"


def test_restart_replays_groups_and_expires_gone_members() -> None:
    c, _, log = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    commit(c, "g", 2, a_id, [OffsetToCommit("t", 0, 42, 3, "m")])
    restarted, sched, _ = make_coordinator(writer=log)
    group = the_group(restarted)
    assert group.state is GroupState.STABLE and group.generation == 2
    assert set(group.members) == {a_id, b_id} and group.leader_id == a_id
    assert group.members[b_id].assignment == b"B2"
    [committed] = fetch(restarted, "g", [("t", 0)])
    assert (committed.offset, committed.leader_epoch, committed.metadata) == (42, 3, "m")
    assert restarted.heartbeat("g", a_id, None, 2) == E.NONE
    sched.advance(11000)  # nobody is really there any more
    assert the_group(restarted).state is GroupState.EMPTY
    assert fetch(restarted, "g", [("t", 0)])[0].offset == 42


def test_offset_expiry_kip_211() -> None:
    settings = replace(SETTINGS, offsets_retention_ms=60_000)
    c, sched, log = make_coordinator(settings)
    commit(c, "simple", -1, "", [OffsetToCommit("t", 0, 1, -1, "")])
    a = join(c)
    a_id = a[0].member_id
    sync(c, a_id, 1, {a_id: b""})
    commit(c, "g", 1, a_id, [OffsetToCommit("t", 0, 7, -1, "")])
    for _ in range(14):  # 70 s of heartbeats: the active group's offsets stay
        sched.advance(5000)
        c.heartbeat("g", a_id, None, 1)
    assert c.expire_offsets() == 1  # only the standalone commit expired (by commit time)
    assert c.group("simple") is None
    c.leave_group("g", [(a_id, None)])
    sched.advance(59_000)
    assert c.expire_offsets() == 0  # retention counts from when the group became empty
    sched.advance(1_000)
    assert c.expire_offsets() == 1
    assert c.group("g") is None
    reloaded, _, _ = make_coordinator(settings, writer=log)
    assert all(not shard.groups for shard in reloaded.runtime.active_shards())


def test_delete_groups_and_offsets() -> None:
    c, _, log = make_coordinator()
    a = join(c, protocols=[("range", sub("t"))])
    a_id = a[0].member_id
    sync(c, a_id, 1, {a_id: b""})
    commit(c, "g", 1, a_id, [OffsetToCommit("t", 0, 1, -1, ""), OffsetToCommit("u", 0, 2, -1, "")])
    assert delete_groups(c, ["g", "nope"]) == [[E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND]]  # type: ignore[attr-defined]
    [(top, errors)] = delete_offsets(c, "g", [("t", 0), ("u", 0)])
    assert top == E.NONE and errors == [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE]  # type: ignore[attr-defined]
    assert fetch(c, "g", [("u", 0)])[0].offset == -1
    assert delete_offsets(c, "nope", [("t", 0)])[0][0] == E.GROUP_ID_NOT_FOUND  # type: ignore[attr-defined]
    c.leave_group("g", [(a_id, None)])
    assert delete_groups(c, ["g"]) == [[E.NONE]]
    assert c.group("g") is None
    reloaded, _, _ = make_coordinator(writer=log)
    assert reloaded.group("g") is None


def test_list_and_describe() -> None:
    c, _, _ = make_coordinator()
    a_id, b_id = stable_group_of_two(c)
    assert c.list_groups() == (E.NONE, [("g", "consumer", "Stable", "classic")])
    assert c.list_groups({"empty"}) == (E.NONE, [])
    error, summary = c.describe_group("g")
    assert error == E.NONE
    assert summary.state == "Stable" and summary.protocol == "range"
    assert {m.member_id: m.assignment for m in summary.members} == {a_id: b"A2", b_id: b"B2"}
    assert c.describe_group("none")[1].state == "Dead"


def test_failed_write_keeps_state_unchanged() -> None:
    c, _, log = make_coordinator()
    a = join(c)
    a_id = a[0].member_id
    log.fail_appends = KafkaStorageError("disk gone")
    result = sync(c, a_id, 1, {a_id: b"A"})
    assert result[0].error == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert the_group(c).state is GroupState.PREPARING_REBALANCE
    assert commit(c, "g", 1, a_id) == [[E.NOT_COORDINATOR]]  # type: ignore[attr-defined]


def test_scheduler_twin_orders_timers() -> None:
    from strom.common.clock import ManualClock

    fired: list[int] = []
    sched = ManualScheduler(ManualClock())
    sched.call_later(20, lambda: fired.append(2))
    sched.call_later(10, lambda: fired.append(1))
    sched.call_later(30, lambda: fired.append(3)).cancel()
    sched.advance(25)
    assert fired == [1, 2]
    assert isinstance(SETTINGS, GroupSettings)
