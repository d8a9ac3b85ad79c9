"""Transactional offset commits in the group coordinator: invisible until their marker,
committed or dropped by it, UNSTABLE_OFFSET_COMMIT for stable fetches meanwhile, and rebuilt
from control records when the partition loads."""

from __future__ import annotations

from strom.common.errors import ErrorCode
from strom.common.types import TopicPartition
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import OffsetToCommit
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.control import (
    ControlType,
    encode_control_key,
    encode_end_txn_marker_value,
)
from tests.coordinator.fakes import fetch, fetched, make_coordinator, settle

E = ErrorCode
PID = 77


def txn_commit(c: GroupCoordinator, offset: int, *, group: str = "g", member: str = "",
               generation: int = -1) -> list[list[int]]:
    out: list[list[int]] = []
    c.txn_commit_offsets(group_id=group, producer_id=PID, producer_epoch=0,
                         generation=generation, member_id=member, group_instance_id=None,
                         offsets=[OffsetToCommit("t", 0, offset, -1, "m")],
                         callback=out.append)
    settle()
    return out


def test_offsets_wait_for_the_commit_marker() -> None:
    c, _, _ = make_coordinator()
    assert txn_commit(c, 42) == [[E.NONE]]
    assert fetched(c, "g") == -1  # written, not committed
    _, [stable] = c.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert stable.error == E.UNSTABLE_OFFSET_COMMIT  # type: ignore[attr-defined]
    c.complete_transaction(c.partition_for("g"), PID, commit=True)
    assert fetched(c, "g") == 42
    assert fetch(c, "g", [("t", 0)])[0].metadata == "m"


def test_abort_marker_drops_them() -> None:
    c, _, _ = make_coordinator()
    txn_commit(c, 42)
    c.complete_transaction(c.partition_for("g"), PID, commit=False)
    assert fetched(c, "g") == -1
    _, [stable] = c.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert stable.error == 0 and stable.offset == -1


def test_member_checks_as_kafka() -> None:
    c, _, _ = make_coordinator()
    assert txn_commit(c, 1, member="ghost", generation=1) == [
        [E.UNKNOWN_MEMBER_ID]]  # type: ignore[attr-defined]


def test_load_replays_the_markers_in_the_log() -> None:
    c, _, writer = make_coordinator()
    txn_commit(c, 5)
    tp = TopicPartition(OFFSETS_TOPIC, c.partition_for("g"))
    marker = BatchBuilder(producer_id=PID, producer_epoch=0, transactional=True, control=True)
    marker.append(0, encode_control_key(ControlType.COMMIT), encode_end_txn_marker_value(0))
    writer.append(tp, marker.build())  # what WriteTxnMarkers appends
    c2, _, _ = make_coordinator(writer=writer)
    assert fetched(c2, "g") == 5
