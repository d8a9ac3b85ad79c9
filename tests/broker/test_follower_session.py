"""The replica fetcher's side of an incremental fetch session (KIP-227)."""

from __future__ import annotations

from strom.broker.follower_session import FollowerFetchSession
from strom.common.types import TopicPartition
from strom.replication.fetcher import FetchQuery, FetchRequest


def request(*queries: tuple[str, int, int]) -> FetchRequest:
    return FetchRequest(3, 500, 1, 1 << 20, tuple(
        FetchQuery(TopicPartition(t, p), 0, offset, 0, 1 << 20) for t, p, offset in queries))


def named(wire: object) -> set[tuple[str, int, int]]:
    return {(t.name, p.partition, p.fetch_offset)
            for t in wire.topics for p in t.partitions}  # type: ignore[attr-defined]


def test_only_changed_partitions_are_sent_once_a_session_exists() -> None:
    session = FollowerFetchSession()
    first = session.build(request(("a", 0, 5), ("a", 1, 7), ("b", 0, 0)))
    assert (first.session_id, first.session_epoch) == (0, 0)  # full, asks for a session
    assert named(first) == {("a", 0, 5), ("a", 1, 7), ("b", 0, 0)}
    session.answered(41)
    assert session.incremental
    second = session.build(request(("a", 0, 6), ("a", 1, 7), ("b", 0, 0)))
    assert (second.session_id, second.session_epoch) == (41, 1)
    assert named(second) == {("a", 0, 6)} and second.forgotten == []
    session.answered(41)
    third = session.build(request(("a", 0, 6), ("b", 0, 0), ("c", 0, 0)))  # a-1 paused
    assert third.session_epoch == 2
    assert named(third) == {("c", 0, 0)} and third.forgotten == [("a", None, [1])]
    session.answered(41)
    fourth = session.build(request(("a", 0, 6), ("a", 1, 7), ("b", 0, 0), ("c", 0, 0)))
    assert named(fourth) == {("a", 1, 7)}  # back: sent whole again


def test_a_session_error_or_a_refused_session_means_full_requests() -> None:
    session = FollowerFetchSession()
    session.build(request(("a", 0, 5)))
    session.answered(0)  # the leader's cache is full: no session
    assert not session.incremental
    again = session.build(request(("a", 0, 5)))
    assert (again.session_id, again.session_epoch) == (0, 0) and named(again)
    session.answered(9)
    session.build(request(("a", 0, 6)))
    session.reset()  # FETCH_SESSION_ID_NOT_FOUND, a failed request, a new connection
    full = session.build(request(("a", 0, 6)))
    assert (full.session_id, full.session_epoch) == (0, 0) and named(full) == {("a", 0, 6)}
