"""The replica fetcher's side of an incremental fetch session (KIP-227)."""

from __future__ import annotations

import uuid

from strom.broker.follower_session import FollowerFetchSession
from strom.common.types import TopicPartition
from strom.replication.fetcher import FetchQuery, FetchRequest

IDS = {name: uuid.uuid4() for name in ("a", "b", "c")}
NAMES = {topic_id.bytes: name for name, topic_id in IDS.items()}


def request(*queries: tuple[str, int, int], ids: dict[str, uuid.UUID] = IDS) -> FetchRequest:
    return FetchRequest(3, 500, 1, 1 << 20, tuple(
        FetchQuery(TopicPartition(t, p), 0, offset, 0, 1 << 20, ids[t])
        for t, p, offset in queries))


def named(wire: object) -> set[tuple[str, int, int]]:
    """The partitions a wire request names (Fetch v13: topics by id)."""
    assert all(t.name is None for t in wire.topics)  # type: ignore[attr-defined]
    return {(NAMES[t.topic_id], p.partition, p.fetch_offset)
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
    assert named(third) == {("c", 0, 0)} and third.forgotten == [(None, IDS["a"].bytes, [1])]
    session.answered(41)
    fourth = session.build(request(("a", 0, 6), ("a", 1, 7), ("b", 0, 0), ("c", 0, 0)))
    assert named(fourth) == {("a", 1, 7)}  # back: sent whole again
    session.answered(41)
    # "a" deleted and created again under its name: its partitions are new to the leader's
    # session (sent under the new id), the old id's forgotten.
    renewed = {**IDS, "a": uuid.uuid4()}
    fifth = session.build(request(("a", 0, 0), ("a", 1, 0), ("b", 0, 0), ("c", 0, 0),
                                  ids=renewed))
    assert {(t.topic_id, p.partition) for t in fifth.topics for p in t.partitions} == {
        (renewed["a"].bytes, 0), (renewed["a"].bytes, 1)}
    assert fifth.forgotten == [(None, IDS["a"].bytes, [0, 1])]


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


def changed(req: FetchRequest, *tps: tuple[str, int]) -> FetchRequest:
    """``req`` as the fetcher builds it between full rebuilds: ``tps`` marked changed."""
    by_tp = {q.tp: q for q in req.partitions}
    return FetchRequest(req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes,
                        req.partitions, by_tp,
                        {TopicPartition(t, p): by_tp.get(TopicPartition(t, p)) for t, p in tps})


def test_an_incremental_request_compares_only_the_partitions_marked_changed() -> None:
    session = FollowerFetchSession()
    session.build(request(("a", 0, 5), ("a", 1, 7), ("b", 0, 0)))
    session.answered(41)
    # a-0 moved and is marked; b-0 is marked but the same; nothing else is looked at
    second = session.build(changed(request(("a", 0, 6), ("a", 1, 7), ("b", 0, 0)),
                                   ("a", 0), ("b", 0)))
    assert named(second) == {("a", 0, 6)} and second.forgotten == []
    session.answered(41)
    third = session.build(changed(request(("a", 0, 6), ("b", 0, 0)), ("a", 1)))  # a-1 paused
    assert named(third) == set() and third.forgotten == [(None, IDS["a"].bytes, [1])]
    # not answered: the next request cannot trust the marks of one request only
    fourth = session.build(changed(request(("a", 0, 6), ("b", 0, 0), ("c", 0, 3)), ("c", 0)))
    assert named(fourth) == {("c", 0, 3)} and fourth.forgotten == [(None, IDS["a"].bytes, [1])]
    session.answered(41)
    fifth = session.build(changed(request(("a", 0, 6), ("b", 0, 0), ("c", 0, 3)), ("a", 1)))
    assert named(fifth) == set() and fifth.forgotten == []  # a-1 was forgotten already
