"""The one write path: acks, min ISR, fsync group commit, timeouts, parked fetches, checkpoints."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from strom.common import slices
from strom.common.errors import ErrorCode, KafkaStorageError
from strom.common.types import TopicPartition, kafka_uuid
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.replication import replica_manager
from strom.replication.delayed import DelayedFetch
from strom.replication.partition import FetchIsolation, Partition
from strom.replication.replica_manager import BUILD_AT_ONCE, AppendOrigin
from strom.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, read_offsets
from strom.storage.log_manager import LogToOpen
from strom.storage.partition_metadata import read_topic_id
from tests.replication.harness import NOW, TOPIC_ID, Harness, partition_info
from tests.replication.harness import image as make_image
from tests.storage.helpers import make_batch, payload

TP = TopicPartition("t", 0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def hosted(h: Harness) -> Partition:
    p = h.replicas.partition(TP)
    assert p is not None
    return p


def code(outcome_error: object) -> int:
    return getattr(outcome_error, "code", 0)


def test_single_replica_acks_all_is_acknowledged_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info()))
        outcome = h.produce(3, acks=-1)
        assert outcome.done is None
        result = outcome.results[TP]
        assert result.error is None and (result.base_offset, result.last_offset) == (0, 2)
        assert hosted(h).high_watermark == 3
        h.close()
    run(scenario)


def test_acks_all_waits_for_the_isr_and_times_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(replicas=(1, 2))))
        outcome = h.produce(2, acks=-1, timeout_ms=500)
        assert outcome.done is not None and not outcome.done.done()
        assert len(h.replicas.produce_purgatory) == 1
        hosted(h).update_follower_fetch_state(2, 2)  # the follower has the records
        await asyncio.sleep(0)
        assert outcome.done.done() and outcome.results[TP].error is None
        assert outcome.results[TP].base_offset == 0
        # Nobody fetches the next one: it expires with REQUEST_TIMED_OUT.
        late = h.produce(1, acks=-1, timeout_ms=500)
        assert late.done is not None
        h.timers.advance(500)
        await asyncio.sleep(0)
        assert late.done.done()
        assert code(late.results[TP].error) == ErrorCode.REQUEST_TIMED_OUT
        # acks=1 never waits for followers.
        assert h.produce(1, acks=1).done is None
        h.close()
    run(scenario)


def test_acks_all_parked_on_a_leader_that_resigns_fails_at_once(tmp_path: Path) -> None:
    """An acks=all produce waiting on a leader that an image makes a follower is answered
    NOT_LEADER_OR_FOLLOWER then and there (Kafka's makeFollowers completes the delayed
    produces and fetches), not after its timeout: librdkafka waited 30 s for such answers
    after a leader move while the old leader learned of it late."""
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(replicas=(1, 2))))
        outcome = h.produce(2, acks=-1, timeout_ms=30_000)
        assert outcome.done is not None and not outcome.done.done()
        h.apply(make_image(partition_info(leader=2, epoch=1, replicas=(1, 2)), epoch=2))
        await asyncio.sleep(0)
        assert outcome.done.done()
        assert code(outcome.results[TP].error) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert len(h.replicas.produce_purgatory) == 0
        h.close()
    run(scenario)


def test_min_insync_replicas_on_one_broker(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(), configs={"min.insync.replicas": "2"}))
        refused = h.produce(2, acks=-1)
        assert code(refused.results[TP].error) == ErrorCode.NOT_ENOUGH_REPLICAS == 19
        assert hosted(h).log_end_offset == 0
        accepted = h.produce(2, acks=1)
        assert accepted.results[TP].error is None and hosted(h).log_end_offset == 2
        h.close()
    run(scenario)


def test_durable_appends_wait_for_their_fsync_round(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path, {"log.flush.interval.messages": 1})
        h.apply(make_image(partition_info()))
        outcomes = [h.produce(1, acks=1) for _ in range(20)]
        assert all(o.done is not None for o in outcomes)
        await asyncio.gather(*(o.done for o in outcomes if o.done is not None))
        assert all(o.results[TP].error is None for o in outcomes)
        assert hosted(h).log.recovery_point == 20
        assert h.replicas.flusher.rounds <= 3
        h.close()
    run(scenario)


def test_a_failed_fsync_fails_the_waiting_appends_asynchronously(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path, {"log.flush.interval.messages": 1})
        h.apply(make_image(partition_info()))
        plog = hosted(h).log

        def broken_flush(up_to: int | None = None) -> None:
            raise OSError(28, "No space left on device")

        plog.flush = broken_flush  # type: ignore[method-assign]
        outcome = h.produce(1, acks=-1)
        assert outcome.results[TP].error is not None  # REQUEST_TIMED_OUT until answered
        assert outcome.done is not None
        await asyncio.wait_for(outcome.done, 5)
        error = outcome.results[TP].error
        assert code(error) == ErrorCode.KAFKA_STORAGE_ERROR
        assert "No space left" in str(error)
        del plog.flush
        h.close()
    run(scenario)


def test_parked_consumer_fetch_wakes_on_high_watermark_not_log_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(replicas=(1, 2))))
        p = hosted(h)
        loop = asyncio.get_running_loop()
        consumer: asyncio.Future[int] = loop.create_future()
        follower: asyncio.Future[int] = loop.create_future()

        def reader(isolation: FetchIsolation) -> Callable[[], tuple[int, int, bool]]:
            def read() -> tuple[int, int, bool]:
                size = p.read(0, 1 << 20, isolation).size
                return size, size, False
            return read

        h.replicas.park_fetch(DelayedFetch(10_000, 1, reader(FetchIsolation.HIGH_WATERMARK),
                                           consumer), [TP])
        h.replicas.park_fetch(DelayedFetch(10_000, 1, reader(FetchIsolation.LOG_END),
                                           follower), [TP])
        h.produce(2, acks=1)
        assert follower.done() and follower.result() > 0  # the log end moved
        assert not consumer.done()  # the high watermark did not
        p.update_follower_fetch_state(2, 2)
        assert consumer.done() and consumer.result() == follower.result()
        assert len(h.replicas.fetch_purgatory) == 0
        h.close()
    run(scenario)


def test_internal_topics_take_coordinator_writes_only(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(), internal=True))
        refused = h.produce(1, acks=-1)
        assert code(refused.results[TP].error) == ErrorCode.INVALID_TOPIC_EXCEPTION
        ok = h.produce(1, acks=-1, origin=AppendOrigin.COORDINATOR)
        assert ok.results[TP].error is None
        unknown = h.produce(1, acks=1, topic="missing")
        assert code(unknown.results[TopicPartition("missing", 0)].error) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        invalid = h.produce(1, acks=2)
        assert code(invalid.results[TP].error) == ErrorCode.INVALID_REQUIRED_ACKS
        h.close()
    run(scenario)


def test_high_watermark_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(replicas=(1, 2))))
        h.produce(5, acks=1)
        hosted(h).update_follower_fetch_state(2, 3)
        assert hosted(h).high_watermark == 3
        await h.replicas.shutdown()
        assert read_offsets(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {TP: 3}
        h.close()
        # Restart as a follower: the high watermark comes back from the checkpoint.
        again = Harness(tmp_path)
        again.apply(make_image(partition_info(leader=2, epoch=1, replicas=(1, 2))))
        assert hosted(again).high_watermark == 3 and hosted(again).log_end_offset == 5
        again.close()
    run(scenario)


def test_leadership_listeners_hear_every_transition(tmp_path: Path) -> None:
    events: list[tuple[str, int, int | None]] = []

    class Listener:
        def on_become_leader(self, partition: int, leader_epoch: int) -> None:
            events.append(("lead", partition, leader_epoch))

        def on_resign(self, partition: int, leader_epoch: int | None) -> None:
            events.append(("resign", partition, leader_epoch))

    h = Harness(tmp_path)
    h.apply(make_image(partition_info(0), partition_info(1, leader=2, replicas=(2, 1))))
    h.replicas.add_leadership_listener("t", Listener())
    assert events == [("lead", 0, 0)]  # led already: reported at registration
    h.apply(make_image(partition_info(0, leader=2, epoch=1, replicas=(1, 2)),
                       partition_info(1, leader=1, epoch=1, replicas=(2, 1))))
    assert events[1:] == [("resign", 0, 1), ("lead", 1, 1)]
    h.apply(make_image())  # topic deleted
    assert events[3:] == [("resign", 1, None)]
    assert h.logs.logs() == []
    h.close()


def test_a_partition_whose_log_cannot_be_created_is_offline_until_it_can(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        blocker = tmp_path / "t-0"
        blocker.write_bytes(b"")  # a file where the partition's directory must go: mkdir fails
        h.apply(make_image(partition_info(0), partition_info(1)))
        assert h.replicas.partition(TP) is None
        assert h.replicas.partition(TopicPartition("t", 1)) is not None  # the others go on
        assert h.replicas.health.failing
        refused = h.produce(1, acks=1)
        assert code(refused.results[TP].error) == ErrorCode.KAFKA_STORAGE_ERROR
        blocker.unlink()
        h.apply(make_image(partition_info(0), partition_info(1), epoch=2))  # retried
        assert h.produce(1, acks=1).results[TP].error is None
        assert not h.replicas.health.failing
        h.close()
    run(scenario)


def test_new_partitions_are_prepared_all_or_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    topic = make_image(*(partition_info(p) for p in range(4)),
                       configs={"segment.bytes": "2048"}).topics["t"]
    (tmp_path / "t-2").write_text("in the way")  # creating partition 2's log fails
    with pytest.raises(KafkaStorageError, match="t-2"):
        h.replicas.prepare_partitions(topic, topic.partitions)
    assert [p.name for p in tmp_path.glob("t-*")] == ["t-2"] and h.logs.partitions() == []
    (tmp_path / "t-2").unlink()
    created = h.replicas.prepare_partitions(topic, topic.partitions)
    assert sorted(created) == [("t", p) for p in range(4)]
    plog = h.logs.get("t", 3)
    assert plog is not None and plog.settings.segment_bytes == 2048  # the new topic's configs
    # The write that was to name them did not happen (crash, stale epoch): not hosted, so
    # they go (discard_partitions, or the first image after a restart).
    h.replicas.discard_partitions(created[:1])
    assert h.logs.get("t", 0) is None and not (tmp_path / "t-0").exists()
    h.apply(make_image(partition_info(1)))  # t-2, t-3 wait for their write: kept
    assert sorted(h.logs.partitions()) == [TP._replace(partition=p) for p in (1, 2, 3)]
    h.replicas.discard_partitions(created[2:])
    assert h.logs.partitions() == [TP._replace(partition=1)]
    assert sorted(p.name for p in tmp_path.glob("t-*")) == ["t-1"]
    h.close()


def test_an_exception_part_way_gives_exact_per_partition_outcomes(tmp_path: Path) -> None:
    """Issue 22: one append to four partitions — one takes its records normally, one refuses
    with an unexpected exception (nothing written), one raises after its records reached the
    log, one's high-watermark listener raises. Each is answered as what happened to it: the
    written ones with their offsets (never as failed), the refused one UNKNOWN_SERVER_ERROR
    (never as written), and the others are not affected."""
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(*(partition_info(i) for i in range(4))))
        tps = [TopicPartition("t", i) for i in range(4)]
        parts = [h.replicas.partition(tp) for tp in tps]
        assert all(p is not None for p in parts)
        _, refusing, raising_after, listener = parts  # type: ignore[misc]

        def refuse(*args: object, **kwargs: object) -> object:
            raise RuntimeError("bug before the write")

        real_append = raising_after.log.append

        def write_then_raise(*args: object, **kwargs: object) -> object:
            real_append(*args, **kwargs)  # type: ignore[arg-type]
            raise RuntimeError("bug after the write")

        def broken_listener(tp: TopicPartition) -> None:
            raise RuntimeError("listener bug")

        refusing.log.append = refuse  # type: ignore[method-assign]
        raising_after.log.append = write_then_raise  # type: ignore[method-assign]
        listener._on_high_watermark = broken_listener
        for acks in (1, -1):
            entries = {tp: payload(make_batch([b"a", b"b"], timestamps=[NOW] * 2))
                       for tp in tps}
            outcome = h.replicas.append(entries, required_acks=acks,
                                        origin=AppendOrigin.CLIENT, timeout_ms=1000)
            if outcome.done is not None:
                await asyncio.wait_for(outcome.done, 5)
            results = outcome.results
            base = 0 if acks == 1 else 2
            for tp in (tps[0], tps[2], tps[3]):
                assert results[tp].error is None, (acks, tp, results[tp].error)
                assert (results[tp].base_offset, results[tp].last_offset) == (base, base + 1)
            assert code(results[tps[1]].error) == ErrorCode.UNKNOWN_SERVER_ERROR
            assert results[tps[1]].base_offset == -1
            assert [p.log.log_end_offset for p in parts] == [base + 2, 0, base + 2, base + 2]
            assert [p.high_watermark for p in parts] == [base + 2, 0, base + 2, base + 2]
        del refusing.log.append, raising_after.log.append
        h.close()
    run(scenario)


# -- many new partitions: incremental images, logs opened off the event loop ---------------

def test_new_partitions_are_opened_on_worker_threads_and_a_request_never_waits(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        h.apply(make_image(*(partition_info(p) for p in range(300))))
        assert h.replicas.pending == 300 and h.replicas.partitions() == []
        # A request for a partition not open yet is refused (retriable), not held up; the
        # partition is opened next.
        outcome = h.produce(1, partition=299)
        assert code(outcome.results[TopicPartition("t", 299)].error) == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if h.replicas.pending == 0 and len(h.replicas.partitions()) == 300:
                break
        assert len(h.replicas.partitions()) == 300
        assert all(p.is_leader for p in h.replicas.partitions())
        assert h.produce(1, partition=299).results[TopicPartition("t", 299)].error is None
        # A topic dropped while its logs are being opened leaves no log behind.
        other = make_image(*(partition_info(p) for p in range(300)))
        other.topics["u"] = other.topics["t"].__class__(
            "u", other.topics["t"].topic_id, other.topics["t"].partitions[:50])
        h.apply(other)
        await asyncio.sleep(0)
        h.apply(make_image(*(partition_info(p) for p in range(300))))
        # (its logs still being opened when it was dropped are deleted once open: wait for
        # the worker threads, generously on a loaded machine)
        def left() -> list[str]:
            return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("u-"))
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if h.replicas.pending == 0 and not left():
                break
        assert not left()
        assert not any(h.replicas.opening(TopicPartition("u", p)) for p in range(50))
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_a_replica_making_new_logs_rests_between_chunks_but_not_when_opening_old_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New partitions' logs are background work: the adoption task rests three times as
    long as each chunk took; logs found on disk at start are opened without rests."""
    first = Harness(tmp_path)
    first.apply(make_image(*(partition_info(p) for p in range(60))))
    first.close()
    rests: list[float] = []
    sleep = asyncio.sleep

    async def recording(delay: float, *args: object) -> object:
        if delay:
            rests.append(delay)
        return await sleep(delay, *args)

    monkeypatch.setattr(replica_manager.asyncio, "sleep", recording)

    async def settle(h: Harness, count: int) -> None:
        for _ in range(2000):
            await sleep(0.005)
            if h.replicas.pending == 0 and len(h.replicas.partitions()) == count:
                return
        raise AssertionError("not adopted")

    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2, scan_only=True)
        h.apply(make_image(*(partition_info(p) for p in range(60))))
        await settle(h, 60)
        assert rests == []  # opened as found: no rests
        began = time.monotonic()
        h.apply(make_image(*(partition_info(p) for p in range(60 + 5 * BUILD_AT_ONCE))))
        await settle(h, 60 + 5 * BUILD_AT_ONCE)
        took = time.monotonic() - began
        assert len(rests) >= 4  # a rest after each chunk of new logs
        assert sum(rests) >= 0.6 * took  # about three quarters of the time spent resting
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def _new_topic(count: int) -> tuple[TopicInfo, list[PartitionInfo]]:
    parts = [partition_info(p) for p in range(count)]
    return TopicInfo("new", TOPIC_ID, tuple(parts), {}, False), parts


def test_a_topic_writes_new_logs_are_made_on_threads_and_built_on_the_loop_in_slices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new log's files are made on a worker thread (system calls only: a busy disk holds
    no loop) and its Log built on the loop between its turns (built on a thread, the Python
    work would hold the GIL the loop waits for); every one labelled with its topic id."""
    monkeypatch.setattr(replica_manager, "CREATE_SLICE_S", 0.0)  # one log a slice
    monkeypatch.setattr(replica_manager, "MAKER_MIN", 10**6)  # the threads make the files
    threads: dict[str, set[str]] = {"make_files": set(), "build": set()}
    for name in threads:
        original = getattr(LogToOpen, name)

        def spy(spec: LogToOpen, *args: object, _name: str = name,
                _original: Any = original) -> object:
            threads[_name].add(threading.current_thread().name)
            return _original(spec, *args)

        monkeypatch.setattr(LogToOpen, name, spy)

    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        outcomes = await h.replicas.prepare_new([_new_topic(120)])
        tick.cancel()
        assert outcomes == [[TopicPartition("new", p) for p in range(120)]]
        assert turns >= 100
        assert threads["build"] == {threading.current_thread().name}
        assert threads["make_files"] and threading.current_thread().name not in threads[
            "make_files"]
        assert all(read_topic_id(tmp_path / f"new-{p}") == TOPIC_ID for p in range(120))
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_a_burst_of_new_logs_has_its_files_made_by_the_log_maker_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs of MAKER_MIN new logs or more: directory and files made by the helper process
    (no make_files on the broker's threads), each log opened, built and labelled as one made
    here; a smaller job stays on the thread; the helper stops with the replica manager."""
    on_threads: list[TopicPartition] = []
    original = LogToOpen.make_files

    def spy(spec: LogToOpen) -> Any:
        on_threads.append(spec.tp)
        return original(spec)

    monkeypatch.setattr(LogToOpen, "make_files", spy)

    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        outcomes = await h.replicas.prepare_new([_new_topic(120)])
        assert outcomes == [[TopicPartition("new", p) for p in range(120)]]
        assert on_threads == []
        maker = h.replicas._maker
        assert maker is not None and maker._process is not None
        helper = maker._process
        assert all(read_topic_id(tmp_path / f"new-{p}") == TOPIC_ID for p in range(120))
        few = TopicInfo("few", uuid.uuid4(), tuple(partition_info(p) for p in range(3)), {},
                        False)
        assert await h.replicas.prepare_new([(few, list(few.partitions))]) == [
            [TopicPartition("few", p) for p in range(3)]]
        assert on_threads == [TopicPartition("few", p) for p in range(3)]
        h.apply(make_image(*(partition_info(p) for p in range(120)), topic="new"))
        for _ in range(500):
            if h.replicas.pending == 0 and len(h.replicas.partitions()) == 120:
                break
            await asyncio.sleep(0.01)
        h.produce(3, acks=1, topic="new", partition=119)
        log = h.logs.get("new", 119)
        assert log is not None and log.log_end_offset == 3
        await h.replicas.shutdown()
        assert helper.wait(10) == 0
        h.close()
    run(scenario)


def test_a_log_maker_that_died_is_replaced_by_the_threads(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The helper killed between two bursts: the next burst's logs are all made by the
    broker's own threads (a warning says so), none lost or half made."""
    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        assert await h.replicas.prepare_new([_new_topic(20)]) == [
            [TopicPartition("new", p) for p in range(20)]]
        maker = h.replicas._maker
        assert maker is not None and maker._process is not None
        maker._process.kill()
        maker._process.wait()
        other = TopicInfo("other", uuid.uuid4(), tuple(partition_info(p) for p in range(40)),
                          {}, False)
        with caplog.at_level(logging.WARNING, logger="strom.replication"):
            outcomes = await h.replicas.prepare_new([(other, list(other.partitions))])
        assert outcomes == [[TopicPartition("other", p) for p in range(40)]]
        assert h.replicas._maker is None
        assert any("made by the broker's own threads" in r.getMessage() for r in caplog.records)
        assert all(read_topic_id(tmp_path / f"other-{p}") == other.topic_id for p in range(40))
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_new_logs_made_off_the_loop_are_reported_at_info(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As Kafka logs each log it creates: a topic write's and a follower's, whichever
    thread made their files."""
    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        with caplog.at_level(logging.INFO, logger="strom.replication"):
            await h.replicas.prepare_new([_new_topic(3)])
            h.apply(make_image(*(partition_info(p) for p in range(4))))
            for _ in range(500):
                await asyncio.sleep(0.01)
                if h.replicas.pending == 0 and len(h.replicas.partitions()) == 4:
                    break
        created = [r.getMessage() for r in caplog.records if "created the logs" in r.message]
        assert created == [
            f"topic new (id {kafka_uuid(TOPIC_ID)}): created the logs of partitions [0, 1, 2]",
            f"topic t (id {kafka_uuid(TOPIC_ID)}): created the logs of partitions [0, 1, 2, 3]"]
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_a_stop_while_new_logs_are_built_leaves_none_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager, "CREATE_SLICE_S", 0.0)
    # The scenario polls with sleep(0), a callback always ready: background work must not
    # wait for it to go quiet (up to 4 ms a slice), or too few logs are built meanwhile.
    monkeypatch.setattr(slices, "FOREGROUND_FIRST_S", 0.0)
    built = 0
    original = LogToOpen.build

    def counting(spec: LogToOpen, log_file: Any) -> Any:
        nonlocal built
        built += 1
        return original(spec, log_file)

    monkeypatch.setattr(LogToOpen, "build", counting)

    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2)
        job = asyncio.create_task(h.replicas.prepare_new([_new_topic(100)]))
        for _ in range(5000):
            await asyncio.sleep(0.001 if not built else 0)
            if built >= 10:
                break
        assert 10 <= built < 100 and not job.done()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        assert not list(tmp_path.glob("new-*")) and h.logs.get("new", 0) is None
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_a_request_for_a_log_still_to_load_is_refused_retriably_and_the_log_opened_next(
        tmp_path: Path) -> None:
    """A log start-up found on disk (perhaps to recover) is never loaded on the event loop
    for a request either: the request gets NOT_LEADER_OR_FOLLOWER and the log is opened
    next."""
    first = Harness(tmp_path)
    first.apply(make_image(*(partition_info(p) for p in range(50))))
    first.produce(3, partition=49)
    first.close()

    async def scenario() -> None:
        h = Harness(tmp_path, log_threads=2, scan_only=True)
        h.apply(make_image(*(partition_info(p) for p in range(50))))
        assert h.replicas.pending > 0
        tp = TopicPartition("t", 49)
        assert h.replicas.partition(tp) is None  # nothing loaded before the loop yields
        outcome = h.produce(1, partition=49)
        assert code(outcome.results[tp].error) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if h.replicas.pending == 0 and len(h.replicas.partitions()) == 50:
                break
        partition = h.replicas.partition(tp)
        assert partition is not None and partition.log_end_offset >= 3
        await h.replicas.shutdown()
        h.close()
    run(scenario)


def test_an_image_looks_only_at_the_topics_that_changed(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(tmp_path)
    first = make_image(partition_info(0))
    first.topics["u"] = first.topics["t"].__class__("u", first.topics["t"].topic_id,
                                                     (partition_info(0),))
    h.apply(first)
    seen: list[str] = []
    original = h.replicas._apply_topic

    def spy(image: object, topic: object, events: object) -> object:
        seen.append(topic.name)  # type: ignore[attr-defined]
        return original(image, topic, events)  # type: ignore[arg-type]

    monkeypatch.setattr(h.replicas, "_apply_topic", spy)
    second = make_image(partition_info(0), epoch=2)
    second.topics["u"] = first.topics["u"]  # the same object: unchanged
    h.apply(second)
    assert seen == ["t"]
    h.close()
