"""The partition owns the high watermark: the smallest log end in the ISR, min ISR for acks=-1."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from strom.common.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from strom.common.types import LATEST_TIMESTAMP, TopicPartition
from strom.replication.partition import FetchIsolation, IsrChange, IsrState, Partition
from tests.replication.harness import Harness, partition_info
from tests.replication.harness import image as make_image
from tests.storage.helpers import make_batch, payload

TP = TopicPartition("t", 0)


def leader(tmp_path: Path, replicas: tuple[int, ...] = (1, 2, 3), **configs: str
           ) -> tuple[Harness, Partition]:
    h = Harness(tmp_path)
    h.apply(make_image(partition_info(replicas=replicas), configs=configs))
    p = h.replicas.partition(TopicPartition("t", 0))
    assert p is not None
    return h, p


def append(p: Partition, count: int, acks: int = 1) -> None:
    p.append_as_leader(payload(make_batch([b"x"] * count)), acks)


def test_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path: Path) -> None:
    h, p = leader(tmp_path)
    append(p, 5)
    assert (p.log_end_offset, p.high_watermark) == (5, 0)  # followers have nothing yet
    p.update_follower_fetch_state(2, 5)
    assert p.high_watermark == 0  # replica 3 is in the ISR and still at nothing
    p.update_follower_fetch_state(3, 3)
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 2)  # an older fetch never moves it back
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 5)
    assert p.high_watermark == p.last_stable_offset == 5
    # Consumers read to the high watermark, followers to the log end.
    append(p, 2)
    assert p.read(5, 1 << 20, FetchIsolation.HIGH_WATERMARK).regions == []
    assert p.read(5, 1 << 20, FetchIsolation.LOG_END).regions
    assert p.list_offset(LATEST_TIMESTAMP, FetchIsolation.HIGH_WATERMARK) == (5, -1, 0)
    assert p.log.stable_end == 5  # the cleaner's bound follows the last stable offset
    h.close()


def test_isr_shrunk_to_the_leader_makes_the_log_end_the_high_watermark(tmp_path: Path) -> None:
    h, p = leader(tmp_path)
    append(p, 4)
    assert p.high_watermark == 0
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1,))))
    assert p.isr_state == IsrState(frozenset({1})) and p.high_watermark == 4
    h.close()


def test_min_insync_replicas_refuses_acks_all_before_appending(tmp_path: Path) -> None:
    h, p = leader(tmp_path, replicas=(1,), **{"min.insync.replicas": "2"})
    with pytest.raises(NotEnoughReplicasError):
        append(p, 3, acks=-1)
    assert p.log_end_offset == 0  # nothing appended
    append(p, 3, acks=1)  # acks=1 does not need the ISR
    assert p.log_end_offset == p.high_watermark == 3
    h.close()


def test_isr_shrinking_after_the_append_fails_acks_all(tmp_path: Path) -> None:
    h, p = leader(tmp_path, replicas=(1, 2), **{"min.insync.replicas": "2"})
    append(p, 2, acks=-1)
    assert p.check_enough_replicas_reach_offset(2) == (False, None)
    h.apply(make_image(partition_info(replicas=(1, 2), isr=(1,)),
                       configs={"min.insync.replicas": "2"}))
    done, error = p.check_enough_replicas_reach_offset(2)
    assert done and isinstance(error, NotEnoughReplicasAfterAppendError)
    h.close()


def test_follower_role(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.apply(make_image(partition_info(leader=2, epoch=4, replicas=(2, 1))))
    p = h.replicas.partition(TopicPartition("t", 0))
    assert p is not None and not p.is_leader and p.leader_id == 2
    with pytest.raises(NotLeaderOrFollowerError):
        append(p, 1)
    with pytest.raises(NotLeaderOrFollowerError):
        p.read(0, 100, FetchIsolation.HIGH_WATERMARK)
    replicated = make_batch([b"a", b"b"], leader_epoch=4)
    p.append_as_follower(payload(replicated))
    assert p.log_end_offset == 2 and p.log.latest_epoch == 4
    p.update_follower_high_watermark(7)  # bounded by its own log end
    assert p.high_watermark == 2
    # Becoming leader at a new epoch starts that epoch at the log end.
    h.apply(make_image(partition_info(leader=1, epoch=5, replicas=(2, 1), isr=(1,))))
    assert p.is_leader and p.log.leader_epochs.entries()[-1] == (5, 2)
    h.close()


def test_high_watermark_restore_is_clamped_to_the_log(tmp_path: Path) -> None:
    h, p = leader(tmp_path, replicas=(1, 2))
    append(p, 4)
    p.initialize_high_watermark(100)
    assert p.high_watermark == 4
    h.close()


def test_last_stable_offset_stops_at_an_open_transaction(tmp_path: Path) -> None:
    h, p = leader(tmp_path, replicas=(1,))
    append(p, 2)
    txn = make_batch([b"t1", b"t2"], producer_id=9, producer_epoch=0, base_sequence=0,
                     attributes=0x10)  # transactional
    p.append_as_leader(payload(txn), 1, verification_guard=p.start_transaction_verification(9))
    append(p, 1)
    assert p.high_watermark == 5 and p.last_stable_offset == 2
    assert p.log.stable_end == 2  # the cleaner stays below the open transaction
    assert p.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED).size < (
        p.read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK).size)
    h.close()


class Proposals:
    """Collects ISR proposals (the metadata write is the broker's, tested end to end)."""

    def __init__(self) -> None:
        self.changes: list[IsrChange] = []

    def submit(self, change: IsrChange) -> None:
        self.changes.append(change)


def test_isr_shrinks_after_the_lag_time_and_expands_when_caught_up(tmp_path: Path) -> None:
    h, p = leader(tmp_path)
    proposals = Proposals()
    h.replicas.isr_writer = proposals
    append(p, 5)
    h.clock.advance(29_000)
    p.update_follower_fetch_state(2, 5)
    assert h.replicas.shrink_isrs(30_000) == 0  # 3 is not lagging long enough yet
    append(p, 1)
    h.clock.advance(2_000)
    # behind the log end, but at the one the leader had at its previous fetch: caught up
    # as of that fetch (under steady traffic no follower is ever at the log end)
    p.update_follower_fetch_state(2, 5)
    assert h.replicas.shrink_isrs(30_000) == 1
    assert proposals.changes == [IsrChange(TP, 0, frozenset({1, 2}), frozenset({1, 2, 3}))]
    # pending: the high watermark still waits for the maximal ISR, nothing else is proposed
    assert p.isr_state.maximal == {1, 2, 3} and p.high_watermark == 0
    assert h.replicas.shrink_isrs(30_000) == 0
    h.apply(make_image(partition_info(replicas=(1, 2, 3)), epoch=2))  # not written yet
    assert p.isr_state.pending is not None
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=3))
    assert p.isr_state == IsrState(frozenset({1, 2}))
    p.update_follower_fetch_state(2, 6)
    assert p.high_watermark == 6
    # replica 3 catches up to the high watermark: proposed back, counted at once
    p.update_follower_fetch_state(3, 6)
    assert proposals.changes[-1] == IsrChange(TP, 0, frozenset({1, 2, 3}), frozenset({1, 2}))
    assert p.isr_state.maximal == {1, 2, 3}
    h.replicas.isr_change_failed(proposals.changes[-1])  # the write did not happen
    assert p.isr_state == IsrState(frozenset({1, 2}))
    p.update_follower_fetch_state(3, 6)  # proposed again
    assert len(proposals.changes) == 3
    h.close()


def test_a_caught_up_follower_that_is_not_registered_is_not_added_back(tmp_path: Path) -> None:
    """KIP-841's rule: a broker whose registration is gone (session expired, shutting down) may
    still fetch, but the leader must not re-add what the controller removed (the ISR flapped
    [1,2] <-> [1,2,3] every few tens of ms in the simulation before this rule)."""
    h, p = leader(tmp_path)
    proposals = Proposals()
    h.replicas.isr_writer = proposals
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=2))
    unregistered = make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=3)
    h.apply(dataclasses.replace(unregistered, brokers={
        b: info for b, info in unregistered.brokers.items() if b != 3}))
    append(p, 3)
    p.update_follower_fetch_state(2, 3)
    p.update_follower_fetch_state(3, 3)  # caught up, but broker 3 is not registered
    assert proposals.changes == [] and p.isr_state == IsrState(frozenset({1, 2}))
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=4))  # back
    p.update_follower_fetch_state(3, 3)
    assert proposals.changes == [IsrChange(TP, 0, frozenset({1, 2, 3}), frozenset({1, 2}))]
    h.close()


def test_a_follower_fetch_outside_the_log_is_out_of_range(tmp_path: Path) -> None:
    h, p = leader(tmp_path)
    append(p, 2)
    with pytest.raises(OffsetOutOfRangeError):
        p.update_follower_fetch_state(2, 3)
    assert p.remote[2].log_end_offset == -1
    h.close()


@pytest.mark.parametrize("report_first", [False, True])
def test_a_written_proposal_the_controller_undid_before_this_broker_saw_it_is_settled(
        tmp_path: Path, report_first: bool) -> None:
    """The leader's write of ISR {1, 2, 3} lands (image 3), the controller takes 3 out again
    (image 4) and this broker's refresh reads only image 4, whose ISR is the committed one:
    the write's report settles the proposal whichever comes first, so the partition can
    propose again (it stayed pending for ever: no ISR change, ever)."""
    h, p = leader(tmp_path)
    proposals = Proposals()
    h.replicas.isr_writer = proposals
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=2))
    append(p, 2)
    p.update_follower_fetch_state(2, 2)
    p.update_follower_fetch_state(3, 2)  # caught up: proposed back
    change = IsrChange(TP, 0, frozenset({1, 2, 3}), frozenset({1, 2}))
    assert proposals.changes == [change]
    undone = make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=4)
    if report_first:
        h.replicas.isr_change_written(change, 3)  # the image of the write is not read yet
        assert p.isr_state.pending == change
        h.apply(undone)
    else:
        h.apply(undone)  # indistinguishable from an image older than the write ...
        assert p.isr_state.pending == change
        h.replicas.isr_change_written(change, 3)  # ... until the write's report
    assert p.isr_state == IsrState(frozenset({1, 2}))
    p.update_follower_fetch_state(3, 2)
    assert proposals.changes == [change, change]  # proposed again
    h.close()


def test_an_image_older_than_the_written_proposal_leaves_it_pending(tmp_path: Path) -> None:
    h, p = leader(tmp_path)
    proposals = Proposals()
    h.replicas.isr_writer = proposals
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=2))
    p.update_follower_fetch_state(3, 0)
    change = proposals.changes[-1]
    h.replicas.isr_change_written(change, 5)
    h.apply(make_image(partition_info(replicas=(1, 2, 3), isr=(1, 2)), epoch=4))
    assert p.isr_state.pending == change and p.isr_state.maximal == {1, 2, 3}
    h.apply(make_image(partition_info(replicas=(1, 2, 3)), epoch=5))
    assert p.isr_state == IsrState(frozenset({1, 2, 3}))
    h.close()
