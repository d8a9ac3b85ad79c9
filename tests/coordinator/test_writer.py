"""The broker's PartitionWriter over a real ReplicaManager (real logs in a temporary
directory): what commits at once, what waits for the ISR or an fsync round, what fails and how
— and the group coordinator on top of it, when a write fails asynchronously."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from strom.broker.handlers.write_txn_markers import marker_batch
from strom.common.errors import ErrorCode, KafkaError
from strom.common.types import TopicPartition
from strom.coordinator import runtime
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import GroupSettings, OffsetToCommit
from strom.coordinator.group.records import (
    OFFSETS_TOPIC,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from strom.coordinator.runtime import ShardState, coordinator_error
from strom.coordinator.writer import ReplicaPartitionWriter
from strom.protocol.records.builder import BatchBuilder
from strom.replication.partition import Partition
from strom.replication.replica_manager import AppendOrigin
from strom.testing.scheduler import ManualScheduler
from tests.replication.harness import Harness, image, partition_info

E = ErrorCode
TP = TopicPartition(OFFSETS_TOPIC, 0)


@pytest.fixture(autouse=True)
def loop() -> None:
    """These scenarios run their own loop (overrides the package's synchronous one)."""


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def offsets_topic(h: Harness, replicas: tuple[int, ...] = (1,), **configs: str) -> Partition:
    h.apply(image(partition_info(replicas=replicas), topic=OFFSETS_TOPIC, internal=True,
                  configs={"cleanup.policy": "compact", **configs}))
    partition = h.replicas.partition(TP)
    assert partition is not None and partition.is_leader
    return partition


def batch(*keys: bytes, producer_id: int = -1, epoch: int = -1, control: bool = False) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                           transactional=producer_id >= 0, control=control)
    for key in keys:
        builder.append(0, key, b"value")
    return builder.build()


def test_single_replica_commits_at_once_and_reads_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        offsets_topic(h)
        writer = ReplicaPartitionWriter(h.replicas)
        assert writer.append(TP, batch(b"a", b"b")) == 1
        guard = h.replicas.partition(TP).start_transaction_verification(9)  # type: ignore[union-attr]
        assert writer.append(TP, batch(b"c", producer_id=9, epoch=2),
                             verification_guard=guard) == 2
        records = [r for chunk in writer.read_batches(TP) for r in chunk]
        assert [(r.offset, r.key, r.producer_id, r.producer_epoch, r.is_control)
                for r in records] == [(0, b"a", -1, -1, False), (1, b"b", -1, -1, False),
                                      (2, b"c", 9, 2, False)]
        h.close()
    run(scenario)


def test_refusals_are_synchronous(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path)
        offsets_topic(h, **{"min.insync.replicas": "2"})
        writer = ReplicaPartitionWriter(h.replicas)
        with pytest.raises(KafkaError) as refused:
            writer.append(TP, batch(b"a"))
        assert refused.value.code == E.NOT_ENOUGH_REPLICAS  # type: ignore[attr-defined]
        assert coordinator_error(refused.value) == E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
        with pytest.raises(KafkaError) as missing:
            writer.append(TopicPartition(OFFSETS_TOPIC, 7), batch(b"a"))
        assert coordinator_error(missing.value) == E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
        h.apply(image(partition_info(leader=2, epoch=1, replicas=(1, 2)), topic=OFFSETS_TOPIC,
                      internal=True))
        with pytest.raises(KafkaError) as follower:
            writer.append(TP, batch(b"a"))
        assert coordinator_error(follower.value) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
        h.close()
    run(scenario)


def test_waits_for_the_isr_without_a_time_limit(tmp_path: Path) -> None:
    """An appended write is waited for until the ISR has it, however long that takes: the
    runtime times out its answer, never the write (issue 22: a write failed by time but
    committed later was missing from the shard's memory)."""
    async def scenario() -> None:
        h = Harness(tmp_path)
        partition = offsets_topic(h, replicas=(1, 2))
        writer = ReplicaPartitionWriter(h.replicas)
        pending = writer.append(TP, batch(b"a", b"b"))
        assert isinstance(pending, asyncio.Future) and not pending.done()
        partition.update_follower_fetch_state(2, 2)
        await asyncio.sleep(0)
        assert pending.result() == 1
        late = writer.append(TP, batch(b"c"))
        assert isinstance(late, asyncio.Future)
        h.timers.advance(3_600_000)
        await asyncio.sleep(0)
        assert not late.done()
        partition.update_follower_fetch_state(2, 3)
        await asyncio.sleep(0)
        assert late.result() == 2
        h.close()
    run(scenario)


def test_failed_fsync_fails_the_write_asynchronously(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = Harness(tmp_path, {"log.flush.interval.messages": 1})
        partition = offsets_topic(h)

        def broken_flush(up_to: int | None = None) -> None:
            raise OSError(28, "No space left on device")

        partition.log.flush = broken_flush  # type: ignore[method-assign]
        writer = ReplicaPartitionWriter(h.replicas)
        pending = writer.append(TP, batch(b"a"))
        assert isinstance(pending, asyncio.Future)
        with pytest.raises(KafkaError) as failed:
            await asyncio.wait_for(pending, 5)
        assert coordinator_error(failed.value) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
        del partition.log.flush
        h.close()
    run(scenario)


def test_group_commit_over_the_replica_manager_fails_closed(tmp_path: Path) -> None:
    """OffsetCommit waits for the ISR; a commit whose fsync fails answers NOT_COORDINATOR and
    the shard is reloaded from the log, so OffsetFetch returns what the log holds."""
    async def scenario() -> None:
        h = Harness(tmp_path, {"log.flush.interval.messages": 1})
        partition = offsets_topic(h, replicas=(1, 2))
        scheduler = ManualScheduler(h.clock)
        coordinator = GroupCoordinator(ReplicaPartitionWriter(h.replicas), scheduler, h.clock,
                                       GroupSettings(partitions=1))
        h.replicas.add_leadership_listener(OFFSETS_TOPIC, coordinator.runtime)
        await coordinator.runtime.wait_loaded(0)
        assert coordinator.runtime.state(0) is ShardState.ACTIVE

        def commit(offset: int) -> list[list[int]]:
            out: list[list[int]] = []
            coordinator.commit_offsets(
                group_id="g", generation=-1, member_id="", group_instance_id=None,
                offsets=[OffsetToCommit("t", 0, offset, -1, "")], callback=out.append)
            return out

        def committed() -> int:
            error, offsets = coordinator.fetch_offsets("g", [("t", 0)])
            assert error == 0
            return offsets[0].offset

        first = commit(5)
        for _ in range(20):
            await asyncio.sleep(0.01)  # the fsync round runs in a thread
            if partition.log.recovery_point >= 1:
                break
        assert first == [] and committed() == -1  # durable, not yet replicated
        partition.update_follower_fetch_state(2, partition.log_end_offset)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert first == [[E.NONE]] and committed() == 5

        def broken_flush(up_to: int | None = None) -> None:
            raise OSError(28, "No space left on device")

        partition.log.flush = broken_flush  # type: ignore[method-assign]
        second = commit(9)
        partition.update_follower_fetch_state(2, partition.log_end_offset)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if second:
                break
        assert second == [[E.NOT_COORDINATOR]]  # type: ignore[attr-defined]
        # the records are in the log (the ISR has them; only the fsync failed): the shard
        # was reloaded from the log and holds what a fresh load of it gives
        await coordinator.runtime.wait_loaded(0)
        assert committed() == 9
        del partition.log.flush
        coordinator.shutdown()
        h.close()
    run(scenario)


def test_a_marker_appended_while_the_shard_loads_is_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction's marker reaches ``__consumer_offsets`` (WriteTxnMarkers) while the
    group shard of a new leader is loading: the live path finds the shard LOADING and leaves
    it to the load. The load read to the log end as it was when it began, so the marker was
    never replayed and the transaction's offsets stayed pending for good (OffsetFetch with
    require_stable answered UNSTABLE_OFFSET_COMMIT to every retry)."""
    async def scenario() -> None:
        monkeypatch.setattr(runtime, "LOAD_CHUNK_RECORDS", 1)  # yield after every batch
        h = Harness(tmp_path)
        offsets_topic(h)
        writer = ReplicaPartitionWriter(h.replicas)
        pid, epoch = 42, 0
        txn_commit = BatchBuilder(producer_id=pid, producer_epoch=epoch, transactional=True)
        txn_commit.append(0, encode_key(OffsetCommitKey("g", "t", 0)),
                          encode_value(OffsetCommitValue(7)))
        guard = h.replicas.partition(TP).start_transaction_verification(pid)  # type: ignore[union-attr]
        writer.append(TP, txn_commit.build(), verification_guard=guard)  # TxnOffsetCommit
        writer.append(TP, batch(b"x"))  # more to load: the load yields
        writer.append(TP, batch(b"y"))
        coordinator = GroupCoordinator(writer, ManualScheduler(h.clock), h.clock,
                                       GroupSettings(partitions=1))
        h.replicas.add_leadership_listener(OFFSETS_TOPIC, coordinator.runtime)
        await asyncio.sleep(0)  # the load replayed its first batch and yielded
        assert coordinator.runtime.state(0) is ShardState.LOADING
        marker = marker_batch(pid, epoch, commit=True, coordinator_epoch=0, timestamp_ms=0)
        outcome = h.replicas.append({TP: memoryview(bytearray(marker))}, required_acks=-1,
                                    origin=AppendOrigin.COORDINATOR, timeout_ms=1000)
        assert outcome.results[TP].error is None and outcome.done is None
        coordinator.complete_transaction(0, pid, True)  # what WriteTxnMarkers does: dropped
        await coordinator.runtime.wait_loaded(0)
        error, offsets = coordinator.fetch_offsets("g", [("t", 0)], require_stable=True)
        assert (error, offsets[0].offset, offsets[0].error) == (0, 7, 0)
        coordinator.shutdown()
        h.close()
    run(scenario)
