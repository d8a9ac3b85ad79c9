"""The client side of KIP-227 fetch sessions (sans-io). Tansu keeps no sessions (it answers
session id 0, measured); strom's broker does, and tests/broker/test_fetch_sessions.py runs the
Consumer against it."""

from __future__ import annotations

from strom.client.fetch_session import FetchSession
from strom.common.types import TopicPartition as TP


def test_full_then_incremental_with_changed_and_forgotten_partitions() -> None:
    session = FetchSession()
    wanted = {TP("t", p): (0, 100) for p in range(100)}
    first = session.build(wanted, 12)
    assert (first.session_id, first.epoch, first.full, len(first.partitions)) == (0, 0, True, 100)
    session.completed(0, 77)
    wanted[TP("t", 5)] = (9, 100)
    del wanted[TP("t", 6)]
    second = session.build(wanted, 12)
    assert (second.session_id, second.epoch, second.full) == (77, 1, False)
    assert second.partitions == {TP("t", 5): (9, 100)} and second.forgotten == [TP("t", 6)]
    session.completed(0, 77)
    idle = session.build(wanted, 12)  # an idle consumer sends an empty request
    assert (idle.epoch, idle.partitions, idle.forgotten) == (2, {}, [])


def test_session_errors_and_sessionless_brokers_fall_back_to_full_requests() -> None:
    session = FetchSession()
    wanted = {TP("t", 0): (0, 100)}
    session.build(wanted, 12)
    session.completed(0, 5)
    session.build(wanted, 12)
    session.completed(71, 0)  # INVALID_FETCH_SESSION_EPOCH
    again = session.build(wanted, 12)
    assert (again.session_id, again.epoch, again.full) == (0, 0, True)
    session.completed(0, 0)  # the broker keeps no session: stay full
    assert session.build(wanted, 12).full
    session.failed()
    assert session.build(wanted, 6).epoch == -1  # before Fetch v7: sessionless
