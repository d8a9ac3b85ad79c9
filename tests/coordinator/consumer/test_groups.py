"""The KIP-848 state machine on the in-memory partition writer and a manual clock:
session and revocation timers, queued heartbeats, refused writes, and a reload that
rebuilds exactly what was in memory (memory is a replay of the log)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import ErrorCode, error_class
from strom.coordinator.group.consumer.groups import HeartbeatArgs, HeartbeatResult
from strom.coordinator.group.consumer.model import MemberState
from strom.coordinator.group.consumer.settings import ConsumerSettings
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import GroupSettings, OffsetToCommit
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.testing.partition_writer import MemoryPartitionWriter
from strom.testing.scheduler import ManualScheduler

T = uuid.UUID(int=7)
TOPICS = {"t": TopicInfo("t", T, tuple(PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(4)))}
SESSION_MS, REBALANCE_MS, RETENTION_MS = 6000, 10000, 2000


class Harness:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.scheduler = ManualScheduler(self.clock)
        self.writer = MemoryPartitionWriter(self.loop)
        settings = GroupSettings(partitions=1, offsets_retention_ms=RETENTION_MS,
                                 consumer=ConsumerSettings(session_timeout_ms=SESSION_MS,
                                                           heartbeat_interval_ms=500))
        self.coordinator = GroupCoordinator(self.writer, self.scheduler, self.clock, settings,
                                            loop=self.loop, topics=lambda: TOPICS)
        self.load()

    def load(self, epoch: int = 0) -> None:
        self.coordinator.runtime.on_become_leader(0, epoch)
        self.loop.run_until_complete(self.coordinator.runtime.wait_loaded(0))

    def settle(self) -> None:
        for _ in range(10):
            self.loop.run_until_complete(asyncio.sleep(0))

    def beat(self, member: str, epoch: int, owned: set[int] | None = None,
             **extra: Any) -> list[HeartbeatResult]:
        """Send one heartbeat; its answers so far (empty while its write is held)."""
        out: list[HeartbeatResult] = []
        fields: dict[str, Any] = {
            "group_id": "g", "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": REBALANCE_MS if epoch == 0 else -1,
            "subscribed_topic_names": ("t",) if epoch == 0 else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "owned": {T: frozenset(owned)} if owned is not None else None}
        fields.update(extra)
        self.coordinator.consumer_heartbeat(HeartbeatArgs(**fields), out.append)
        self.settle()
        return out

    def ok(self, member: str, epoch: int, owned: set[int] | None = None) -> HeartbeatResult:
        answers = self.beat(member, epoch, owned)
        assert answers and answers[0].error == 0, answers
        return answers[0]

    def group(self) -> Any:
        return self.coordinator.consumer_group("g")[1]


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.loop.close()


def parts(result: HeartbeatResult) -> set[int]:
    return set((result.assignment or {}).get(T, ()))


def test_a_member_that_stops_heartbeating_is_removed_after_the_session(h: Harness) -> None:
    a = h.ok("a", 0, set())
    b = h.ok("b", 0, set())
    kept = parts(h.ok("a", a.member_epoch, parts(a)))  # told to give two up
    acked = h.ok("a", a.member_epoch, kept)  # revoked: a moves to b's epoch
    assert acked.member_epoch == b.member_epoch
    assert len(parts(h.ok("b", b.member_epoch))) == 2  # released: b gets its two
    h.scheduler.advance(SESSION_MS - 100)
    h.ok("a", acked.member_epoch)  # a keeps its session; b is silent
    h.scheduler.advance(200)
    h.settle()
    group = h.group()
    assert set(group.members) == {"a"} and group.group_epoch > b.member_epoch
    again = h.ok("a", acked.member_epoch)
    assert parts(again) == {0, 1, 2, 3} and again.member_epoch == group.group_epoch


def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout(h: Harness
                                                                             ) -> None:
    a = h.ok("a", 0, set())
    assert parts(a) == {0, 1, 2, 3}
    b = h.ok("b", 0, set())
    assert parts(b) == set()  # a still holds them all
    moving = h.ok("a", a.member_epoch)  # told to give two up
    assert len(parts(moving)) == 2
    assert h.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    epoch_b = b.member_epoch
    for _ in range(REBALANCE_MS // 1000):
        h.scheduler.advance(1000)
        epoch_b = h.ok("b", epoch_b).member_epoch  # b keeps its session
    h.settle()
    assert set(h.group().members) == {"b"}
    assert h.beat("a", a.member_epoch)[0].error == ErrorCode.UNKNOWN_MEMBER_ID
    h.ok("b", h.group().members["b"].member_epoch)
    assert h.group().members["b"].assigned == {T: frozenset({0, 1, 2, 3})}


def test_heartbeats_of_one_group_wait_for_its_write_in_flight(h: Harness) -> None:
    a = h.ok("a", 0, set())
    h.writer.hold = True
    first = h.beat("b", 0, set())
    second = h.beat("c", 0, set())
    assert first == [] and second == []  # the second waits behind the first's write
    assert h.writer.appends == 2  # a's join, b's join; c has not computed yet
    h.writer.commit()
    h.settle()
    assert first and first[0].error == 0 and second == []  # now c's write is held
    h.writer.commit()
    h.settle()
    assert second and second[0].error == 0
    assert second[0].member_epoch == first[0].member_epoch + 1  # computed after b's replay
    h.writer.hold = False
    assert a.member_epoch < first[0].member_epoch


def test_a_refused_write_answers_the_error_and_changes_nothing(h: Harness) -> None:
    h.ok("a", 0, set())
    before = h.group().group_epoch
    h.writer.fail_appends = error_class("NOT_LEADER_OR_FOLLOWER")("moved")
    answer = h.beat("b", 0, set())
    assert answer and answer[0].error == ErrorCode.NOT_COORDINATOR
    h.writer.fail_appends = None
    assert set(h.group().members) == {"a"} and h.group().group_epoch == before
    assert h.ok("b", 0, set()).member_epoch == before + 1  # and the next one works


def test_a_reload_rebuilds_exactly_what_was_in_memory(h: Harness) -> None:
    a = h.ok("a", 0, set())
    b = h.ok("b", 0, set())
    h.ok("a", a.member_epoch, parts(a))
    h.ok("b", b.member_epoch)
    def state() -> Any:
        g = h.group()
        return (g.group_epoch, g.assignment_epoch, dict(g.target), {
            m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, dict(m.assigned),
                          dict(m.pending_revocation), dict(m.assignment_epochs),
                          m.subscribed_topic_names, m.rebalance_timeout_ms)
            for m in g.members.values()})

    before = state()
    h.coordinator.runtime.on_resign(0, 1)
    h.settle()
    h.load(epoch=2)
    assert state() == before


def commit(h: Harness, member: str, epoch: int, topic: str) -> list[int]:
    out: list[list[int]] = []
    h.coordinator.commit_offsets(group_id="g", generation=epoch, member_id=member,
                                 group_instance_id=None,
                                 offsets=[OffsetToCommit(topic, 0, 5, -1, "")],
                                 callback=out.append,
                                 stale_epoch_error=ErrorCode.STALE_MEMBER_EPOCH)
    h.settle()
    return out[0]


def test_an_active_groups_subscribed_offsets_do_not_expire(h: Harness) -> None:
    """KIP-211 for consumer groups: while members subscribe to a topic its offsets stay;
    others expire by commit time; an emptied group goes with its offsets; OffsetDelete of a
    subscribed topic is GROUP_SUBSCRIBED_TO_TOPIC."""
    a = h.ok("a", 0, set())
    assert commit(h, "a", a.member_epoch, "t") == [0]
    assert commit(h, "a", a.member_epoch, "u") == [0]
    for _ in range(3):
        h.scheduler.advance(1000)
        h.ok("a", a.member_epoch)  # the member stays
    h.coordinator.expire_offsets()
    h.settle()
    assert [c.topic for c in h.coordinator.fetch_offsets("g", None)[1]] == ["t"]
    answers: list[Any] = []
    h.coordinator.delete_offsets("g", [("t", 0)], lambda *r: answers.append(r))
    h.settle()
    assert answers == [(0, [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC])]
    assert h.beat("a", -1)[0].error == 0  # leaves: the group is empty
    h.scheduler.advance(RETENTION_MS + 1000)
    h.coordinator.expire_offsets()
    h.settle()
    assert h.coordinator.fetch_offsets("g", None)[1] == []
    assert h.coordinator.consumer_group("g")[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_an_unexpected_error_answers_and_releases_the_groups_queue(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in one heartbeat answers UNKNOWN_SERVER_ERROR and is logged; the group's next
    operations are not left queued behind it for good."""
    h.ok("a", 0, set())
    groups = h.coordinator.runtime.shard(0).consumer
    real = groups._heartbeat

    def broken(*_args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(groups, "_heartbeat", broken)
    assert [r.error for r in h.beat("b", 0, set())] == [ErrorCode.UNKNOWN_SERVER_ERROR]
    monkeypatch.setattr(groups, "_heartbeat", real)
    assert h.ok("b", 0, set()).member_epoch > 0
