"""The follower fetcher state machine, driven by hand: a real follower log and a real leader
partition, a scripted network in between and a manual clock (no sockets). Truncation cases of
KIP-101 / KIP-279: diverged tails with different epochs, a follower ahead of the leader, an
epoch the follower does not know (walk back), an epoch the leader does not know, and a log
below the leader's log start; a truncation that fails on disk."""

from __future__ import annotations

import errno
import logging
import uuid
from pathlib import Path

import pytest

from strom.common.errors import OffsetOutOfRangeError, error_class
from strom.common.types import TopicPartition
from strom.replication.fetcher import (
    FULL_REBUILD_MS,
    THROTTLE_RECHECK_MS,
    EpochAnswer,
    EpochRequest,
    FetchAnswer,
    FetcherSettings,
    FetchRequest,
    Phase,
    ReplicaFetcher,
)
from strom.replication.partition import FetchIsolation, Partition
from strom.replication.quota import ReplicationQuota
from tests.replication.harness import Harness, partition_info
from tests.replication.harness import image as make_image
from tests.storage.helpers import make_batch, payload, read_all

TP = TopicPartition("t", 0)
FOLLOWER_ID = 2  # how the leader knows the follower
BACKOFF_MS = 500
FENCED = error_class("FENCED_LEADER_EPOCH").code
OUT_OF_RANGE = error_class("OFFSET_OUT_OF_RANGE").code


class ScriptedLeader:
    """Answers the follower's requests from a leader partition, as the broker would."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.epoch_queries: list[int] = []

    def _epoch_error(self, current: int) -> int:
        if current < self.partition.leader_epoch:
            return FENCED
        if current > self.partition.leader_epoch:
            return error_class("UNKNOWN_LEADER_EPOCH").code
        return 0

    def epochs(self, request: EpochRequest) -> dict[TopicPartition, EpochAnswer]:
        answers = {}
        for q in request.partitions:
            self.epoch_queries.append(q.leader_epoch)
            error = self._epoch_error(q.current_leader_epoch)
            if error:
                answers[q.tp] = EpochAnswer(error)
            else:
                answers[q.tp] = EpochAnswer(0, *self.partition.end_offset_for_epoch(
                    q.leader_epoch))
        return answers

    def fetch(self, request: FetchRequest) -> dict[TopicPartition, FetchAnswer]:
        answers = {}
        p = self.partition
        for q in request.partitions:
            error = self._epoch_error(q.current_leader_epoch)
            if error:
                answers[q.tp] = FetchAnswer(error, p.high_watermark, p.log_start_offset)
                continue
            try:
                data = p.read(q.fetch_offset, q.partition_max_bytes, FetchIsolation.LOG_END)
                p.update_follower_fetch_state(FOLLOWER_ID, q.fetch_offset)
            except OffsetOutOfRangeError:
                answers[q.tp] = FetchAnswer(OUT_OF_RANGE, p.high_watermark, p.log_start_offset)
                continue
            answers[q.tp] = FetchAnswer(0, p.high_watermark, p.log_start_offset,
                                        data.to_bytes())
        return answers


def write(p: Partition, *epochs: tuple[int, int]) -> None:
    """Append ``count`` one-record batches of each ``(epoch, count)`` (a past leader's)."""
    for epoch, count in epochs:
        for _ in range(count):
            offset = p.log.log_end_offset
            p.log.append_as_follower(payload(make_batch(
                [b"e%d-o%d" % (epoch, offset)], base_offset=offset, leader_epoch=epoch)))


class Pair:
    """A follower (node 1 of the harness, following broker 2) and a leader partition."""

    def __init__(self, tmp_path: Path, follower: tuple[tuple[int, int], ...],
                 leader: tuple[tuple[int, int], ...], leader_epoch: int) -> None:
        self.fh = Harness(tmp_path / "follower")
        self.lh = Harness(tmp_path / "leader")
        # the leader's log as a past of leaders wrote it, then it leads at leader_epoch
        self.lh.apply(make_image(partition_info(leader=3, epoch=0, replicas=(1, 2, 3))))
        lp = self.lh.replicas.partition(TP)
        assert lp is not None
        write(lp, *leader)
        self.lh.apply(make_image(partition_info(epoch=leader_epoch, replicas=(1, 2, 3)),
                                 epoch=2))
        self.fh.apply(make_image(partition_info(leader=3, epoch=0, replicas=(1, 2, 3))))
        fp = self.fh.replicas.partition(TP)
        assert fp is not None
        write(fp, *follower)
        self.fh.apply(make_image(partition_info(leader=2, epoch=leader_epoch,
                                                replicas=(1, 2, 3)), epoch=2))
        self.follower, self.leader = fp, lp
        self.network = ScriptedLeader(lp)
        self.fetcher = ReplicaFetcher(2, 0, FetcherSettings(FOLLOWER_ID, backoff_ms=BACKOFF_MS),
                                      self.fh.replicas)
        self.fetcher.add_partitions({TP: leader_epoch})

    @property
    def now(self) -> int:
        return self.fh.clock.now_ms()

    def step(self) -> bool:
        """One round: an epoch request and / or a fetch; False when nothing was sent."""
        sent = False
        query = self.fetcher.epoch_request(self.now)
        if query is not None:
            self.fetcher.on_epoch_response(query, self.network.epochs(query), self.now)
            sent = True
        request = self.fetcher.fetch_request(self.now)
        if request is not None:
            self.fetcher.on_fetch_response(request, self.network.fetch(request), self.now)
            sent = True
        return sent

    def run(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            if not self.step():
                return
            state = self.fetcher.state(TP)
            if state is not None and state.phase is Phase.FETCHING and (
                    state.fetch_offset == self.leader.log_end_offset):
                self.step()  # the answer that carries the final high watermark
                return

    def assert_identical(self) -> None:
        assert read_all(self.follower.log) == read_all(self.leader.log)
        # the leader's epochs that hold records (a new leader's epoch starts empty)
        end = self.leader.log_end_offset
        assert self.follower.log.leader_epochs.entries() == [
            (e, o) for e, o in self.leader.log.leader_epochs.entries() if o < end]

    def close(self) -> None:
        self.fh.close()
        self.lh.close()


@pytest.fixture
def pairs(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[Pair] = []

    def make(follower: tuple[tuple[int, int], ...], leader: tuple[tuple[int, int], ...],
             leader_epoch: int) -> Pair:
        pair = Pair(tmp_path / str(len(made)), follower, leader, leader_epoch)
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.close()


def test_a_new_follower_copies_the_leader_with_its_epochs(pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 3), (2, 4)), 2)
    pair.run()
    pair.assert_identical()
    assert pair.network.epoch_queries == []  # an empty log has nothing to truncate
    assert pair.follower.log_end_offset == 7
    # the leader now counts the follower's log end; the follower's high watermark follows
    assert pair.leader.remote[FOLLOWER_ID].log_end_offset == 7
    assert pair.follower.high_watermark == pair.leader.high_watermark
    # the follower's leader-epoch-checkpoint holds the leader's entries (from the batches)
    lines = (pair.follower.log.directory / "leader-epoch-checkpoint").read_text().split()
    assert lines[2:] == ["0", "0", "2", "3"]


def test_diverged_tails_with_different_epochs_truncate_to_the_leaders_epoch_end(
        pairs) -> None:  # type: ignore[no-untyped-def]
    # the follower led epoch 1 and wrote 4 records the new leader (epoch 2) never saw
    pair = pairs(((0, 3), (1, 4)), ((0, 3), (2, 3)), 2)
    pair.run()
    assert pair.network.epoch_queries == [1]  # leader: epoch 0 ends at 3
    pair.assert_identical()
    assert b"e1-" not in read_all(pair.follower.log)


def test_a_follower_ahead_in_the_same_epoch_truncates_to_the_leaders_end(
        pairs) -> None:  # type: ignore[no-untyped-def]
    # the old leader of epoch 0 had 6 records; the new leader (epoch 1) only 3 of them
    pair = pairs(((0, 6),), ((0, 3), (1, 2)), 1)
    pair.run()
    assert pair.network.epoch_queries == [0]
    pair.assert_identical()
    assert pair.follower.log_end_offset == 5


def test_an_epoch_the_follower_does_not_have_is_walked_back(
        pairs) -> None:  # type: ignore[no-untyped-def]
    # leader: epochs 0, 1, 3; follower: epochs 0, 2. Asked about 2, the leader answers with
    # epoch 1 (ending at 4), which the follower lacks: it cuts to the end of its epoch 0 and
    # asks again.
    pair = pairs(((0, 2), (2, 3)), ((0, 2), (1, 2), (3, 2)), 3)
    pair.run()
    assert pair.network.epoch_queries == [2, 0]
    pair.assert_identical()


def test_an_epoch_the_leader_does_not_know_is_dropped(
        pairs) -> None:  # type: ignore[no-untyped-def]
    # the follower holds an epoch (5) above everything the leader (epoch 4) has ever had
    pair = pairs(((0, 2), (5, 2)), ((0, 3),), 4)
    pair.run()
    assert pair.network.epoch_queries == [5, 0]
    pair.assert_identical()


def test_a_log_below_the_leaders_log_start_starts_over_there(
        pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 6),), 1)
    pair.leader.initialize_high_watermark(6)
    pair.leader.delete_records_before(4)
    pair.run()
    assert (pair.follower.log_start_offset, pair.follower.log_end_offset) == (4, 6)
    assert read_all(pair.follower.log) == read_all(pair.leader.log)


def test_a_fenced_epoch_pauses_until_newer_metadata_and_late_answers_are_ignored(
        pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 2),), 3)
    pair.fetcher.add_partitions({TP: 2})  # the follower's metadata is behind the leader's
    assert pair.fetcher.epoch_request(pair.now) is None  # an empty log fetches at once
    request = pair.fetcher.fetch_request(pair.now)
    assert request is not None and request.partitions[0].current_leader_epoch == 2
    pair.fetcher.on_fetch_response(request, pair.network.fetch(request), pair.now)
    assert pair.fetcher.fetch_request(pair.now) is None  # paused
    assert pair.fetcher.next_wakeup_ms(pair.now) == pair.now + BACKOFF_MS
    pair.fh.clock.advance(BACKOFF_MS)
    stale = pair.fetcher.fetch_request(pair.now)
    assert stale is not None
    pair.fetcher.add_partitions({TP: 3})  # newer metadata arrives meanwhile
    records = pair.leader.read(0, 1 << 20, FetchIsolation.LOG_END).to_bytes()
    pair.fetcher.on_fetch_response(stale, {TP: FetchAnswer(0, 2, 0, records)}, pair.now)
    state = pair.fetcher.state(TP)
    assert state is not None and (state.leader_epoch, state.phase) == (3, Phase.TRUNCATING)
    assert pair.follower.log_end_offset == 0  # the late answer was not appended
    pair.run()
    pair.assert_identical()


def test_a_request_without_answer_pauses_its_partitions(pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 2),), 0)
    assert pair.fetcher.epoch_request(pair.now) is None
    request = pair.fetcher.fetch_request(pair.now)
    assert request is not None
    pair.fetcher.on_request_failed(request.partitions, pair.now)
    assert pair.fetcher.fetch_request(pair.now) is None
    pair.fh.clock.advance(BACKOFF_MS)
    pair.run()
    pair.assert_identical()


def test_a_refused_append_pauses_and_keeps_the_offset(pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 2),), 0)
    assert pair.fetcher.epoch_request(pair.now) is None
    request = pair.fetcher.fetch_request(pair.now)
    assert request is not None
    pair.fetcher.on_fetch_response(request, {TP: FetchAnswer(0, 2, 0, b"\x00" * 70)},
                                   pair.now)
    state = pair.fetcher.state(TP)
    assert state is not None and state.fetch_offset == 0
    assert pair.fetcher.fetch_request(pair.now) is None


@pytest.mark.parametrize("fails", ["truncate_to", "truncate_fully_and_start_at"])
def test_a_truncation_that_fails_on_disk_goes_to_the_log_dir_health_and_is_retried(
        pairs, fails: str, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
        caplog: pytest.LogCaptureFixture) -> None:
    """An OSError while truncating (by epoch, or starting over at the leader's log start
    after OFFSET_OUT_OF_RANGE) is reported as a failing log directory, once, at ERROR; the
    partition pauses for the backoff and the fetcher goes on (nothing escapes to end it)."""
    if fails == "truncate_to":  # ahead of the leader in the same epoch: truncate by epoch
        pair = pairs(((0, 6),), ((0, 3), (1, 2)), 1)
    else:  # below the leader's log start
        pair = pairs((), ((0, 6),), 1)
        pair.leader.initialize_high_watermark(6)
        pair.leader.delete_records_before(4)

    def broken(*_args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(pair.follower.log, fails, broken)
    health = pair.fh.replicas.health
    with caplog.at_level(logging.ERROR, logger="strom.storage"):
        for _ in range(3):
            pair.step()
    assert health.failing and health.failures == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"log directory {health.directory} is failing: Input/output error while truncating "
        f"{TP}; writes to it are refused with KAFKA_STORAGE_ERROR until space is freed "
        "(reported once; the next failures are logged at DEBUG)"]
    state = pair.fetcher.state(TP)
    assert state is not None and state.delayed_until_ms == pair.now + BACKOFF_MS
    assert not pair.step()  # paused

    monkeypatch.undo()  # the disk is back: the retry truncates and the follower catches up
    pair.fh.clock.advance(BACKOFF_MS)
    pair.run()
    assert read_all(pair.follower.log) == read_all(pair.leader.log)
    assert not health.failing


def test_a_throttled_partition_is_left_out_while_the_follower_quota_is_exceeded(
        pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 30),), 0)
    # the leader alone in the ISR: its high watermark is its log end (a replica being copied)
    pair.lh.apply(make_image(partition_info(epoch=0, replicas=(1, 2, 3), isr=(1,)), epoch=3))
    assert pair.leader.high_watermark == 30
    quota = ReplicationQuota("follower", 1, pair.fh.clock.monotonic, bound=1_000_000)
    quota.mark_throttled(TP.topic, f"{TP.partition}:1")  # the harness's follower is node 1
    pair.fetcher = ReplicaFetcher(2, 0, FetcherSettings(FOLLOWER_ID, partition_max_bytes=200),
                                  pair.fh.replicas, quota=quota)
    pair.fetcher.add_partitions({TP: 0})
    assert pair.step()
    received = pair.follower.log_end_offset
    assert 0 < received < 30 and quota.rate() > 0  # the bytes received were recorded
    quota.bound = 1  # lowered: exceeded now
    request = pair.fetcher.fetch_request(pair.now)
    assert request is None  # held back, looked at again after THROTTLE_RECHECK_MS
    assert pair.fetcher.next_wakeup_ms(pair.now) == pair.now + THROTTLE_RECHECK_MS
    pair.fh.clock.advance(THROTTLE_RECHECK_MS)
    assert pair.fetcher.fetch_request(pair.now) is None  # still exceeded
    quota.bound = 1_000_000  # raised: fetching goes on at the next look
    pair.fh.clock.advance(THROTTLE_RECHECK_MS)
    pair.run(100)
    pair.assert_identical()
    # caught up with the leader's high watermark: no longer held back, whatever the rate
    quota.bound = 1
    assert quota.is_quota_exceeded()
    assert pair.fetcher.fetch_request(pair.now) is not None


def test_a_partition_replaced_by_another_topic_of_its_name_starts_over(tmp_path: Path) -> None:
    """The topic was deleted and created again under its name while this follower did not
    look: same leader, same epoch, another topic id. The follower drops its fetch position
    (the old log's end), ignores an answer for the old topic still in flight, and follows the
    new topic from its own, empty log; every Fetch names the topic id it is for."""
    pair = Pair(tmp_path, follower=((0, 3),), leader=((0, 3),), leader_epoch=0)
    pair.run()
    assert pair.fetcher.state(TP).fetch_offset == 3  # type: ignore[union-attr]
    in_flight = pair.fetcher.fetch_request(pair.now)
    assert in_flight is not None
    assert [q.topic_id for q in in_flight.partitions] == [pair.follower.topic_id]
    late = pair.network.fetch(in_flight)
    # the new topic: both sides start empty, with another id, at the same leader and epoch
    new_id = uuid.UUID(int=99)
    pair.lh.apply(make_image(partition_info(epoch=0, replicas=(1, 2, 3)), epoch=3,
                             topic_id=new_id))
    pair.fh.apply(make_image(partition_info(leader=2, epoch=0, replicas=(1, 2, 3)), epoch=3,
                             topic_id=new_id))
    follower, leader = pair.fh.replicas.partition(TP), pair.lh.replicas.partition(TP)
    assert follower is not None and leader is not None
    assert follower.topic_id == new_id and follower.log_end_offset == 0
    pair.fetcher.on_fetch_response(in_flight, late, pair.now)  # the old topic's answer
    assert follower.log_end_offset == 0
    write(leader, (0, 5))  # past the old log's end: fetching from there would skip 0-2
    pair.network.partition = leader
    pair.run()
    assert read_all(follower.log) == read_all(leader.log)
    assert pair.fetcher.state(TP).fetch_offset == 5  # type: ignore[union-attr]
    request = pair.fetcher.fetch_request(pair.now)
    assert request is not None and [q.topic_id for q in request.partitions] == [new_id]


def test_requests_are_rebuilt_from_the_partitions_marked_changed_and_in_full_each_second(
        pairs) -> None:  # type: ignore[no-untyped-def]
    pair = pairs((), ((0, 3),), 0)
    pair.run()
    fetcher = pair.fetcher
    first = fetcher.fetch_request(pair.now)  # after the answers of pair.run()
    assert first is not None and first.changed == {TP: first.query(TP)}
    fetcher.on_fetch_response(first, {}, pair.now, omitted_unchanged=True)  # nothing new
    quiet = fetcher.fetch_request(pair.now)
    assert quiet is not None and quiet.changed == {} and quiet.partitions == first.partitions
    write(pair.leader, (0, 2))
    answers = pair.network.fetch(quiet)
    fetcher.on_fetch_response(quiet, answers, pair.now, omitted_unchanged=True)
    moved = fetcher.fetch_request(pair.now)
    assert moved is not None and moved.changed == {TP: moved.query(TP)}
    assert moved.query(TP).fetch_offset == 5  # type: ignore[union-attr]
    fetcher.on_request_failed(moved.partitions, pair.now)  # paused: not asked for
    paused = fetcher.fetch_request(pair.now)
    assert paused is None
    pair.fh.clock.advance(BACKOFF_MS)  # the pause is over: asked for again
    again = fetcher.fetch_request(pair.now)
    assert again is not None and again.changed == {TP: again.query(TP)}
    pair.fh.clock.advance(FULL_REBUILD_MS)
    rebuilt = fetcher.fetch_request(pair.now)
    assert rebuilt is not None and rebuilt.changed is None
