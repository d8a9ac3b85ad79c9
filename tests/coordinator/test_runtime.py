"""The coordinator runtime's states (not led, loading, active, resigned, stale load, failed load)
and its write rule (replay at commit, in offset order; a write in the log is replayed when it
commits, whenever that is; one whose fate is unknown reloads the shard; refused writes never
replayed), with a shard that records what happens to it and the in-memory partition writer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    error_class,
)
from strom.common.types import TopicPartition
from strom.coordinator import runtime as runtime_module
from strom.coordinator.runtime import (
    CoordinatorRuntime,
    ReplayRecord,
    ShardContext,
    ShardState,
    coordinator_error,
)
from strom.testing.partition_writer import MemoryPartitionWriter
from strom.testing.scheduler import ManualScheduler
from tests.coordinator.fakes import settle

E = ErrorCode
TOPIC = "__internal"
TP = TopicPartition(TOPIC, 0)


class RecordingShard:
    def __init__(self, context: ShardContext) -> None:
        self.context = context
        self.events: list[object] = []
        self.replayed: list[ReplayRecord] = []

    def replay(self, record: ReplayRecord) -> None:
        self.replayed.append(record)
        self.events.append(("replay", record.key))

    def on_loaded(self) -> None:
        self.events.append("loaded")

    def on_unloaded(self) -> None:
        self.events.append("unloaded")

    def write(self, *keys: bytes, **flags: int | bool) -> list[object]:
        """Write one record per key; returns the outcome list ("ok", the error, or
        ("timeout", error) first when the answer was due before the write resolved)."""
        out: list[object] = []
        self.context.write(
            [(k, b"v") for k in keys],
            on_commit=lambda: (out.append("ok"), self.events.append(("commit", keys))),
            on_failure=lambda exc: (out.append(exc), self.events.append(("fail", keys))),
            on_timeout=lambda exc: (out.append(("timeout", exc)),
                                    self.events.append(("timeout", keys))),
            **flags,  # type: ignore[arg-type]
        )
        return out


Harness = tuple[CoordinatorRuntime[RecordingShard], MemoryPartitionWriter, ManualScheduler]


def make(writer: MemoryPartitionWriter | None = None) -> Harness:
    loop = asyncio.get_event_loop()
    scheduler = ManualScheduler(ManualClock())
    writer = writer or MemoryPartitionWriter(loop)
    runtime: CoordinatorRuntime[RecordingShard] = CoordinatorRuntime(
        TOPIC, writer, scheduler.clock, RecordingShard, scheduler=scheduler,
        write_timeout_ms=1000, loop=loop)
    return runtime, writer, scheduler


def active(runtime: CoordinatorRuntime[RecordingShard], partition: int = 0, epoch: int = 0
           ) -> RecordingShard:
    runtime.on_become_leader(partition, epoch)
    settle()
    assert runtime.state(partition) is ShardState.ACTIVE
    return runtime.shard(partition)


def code_of(call: Callable[[], object]) -> int:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


def prefill(writer: MemoryPartitionWriter, count: int, *, per_batch: int = 10) -> None:
    from strom.protocol.records.builder import BatchBuilder

    for start in range(0, count, per_batch):
        builder = BatchBuilder()
        for i in range(start, min(start + per_batch, count)):
            builder.append(0, b"k%d" % i, b"v")
        writer.append(TP, builder.build())


# -- states ------------------------------------------------------------
def test_not_led_is_not_coordinator() -> None:
    runtime, _, _ = make()
    assert runtime.state(0) is None
    assert code_of(lambda: runtime.shard(0)) == E.NOT_COORDINATOR  # type: ignore[attr-defined]


def test_load_replays_the_partition_then_serves() -> None:
    runtime, writer, _ = make()
    prefill(writer, 25)
    runtime.on_become_leader(0, 3)
    assert runtime.state(0) is ShardState.LOADING
    assert code_of(lambda: runtime.shard(0)) == E.COORDINATOR_LOAD_IN_PROGRESS  # type: ignore[attr-defined]
    settle()
    shard = runtime.shard(0)
    assert runtime.epoch(0) == 3
    assert [r.offset for r in shard.replayed] == list(range(25))
    assert shard.events[-1] == "loaded"


def test_load_yields_to_the_loop_between_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "LOAD_CHUNK_RECORDS", 10)
    runtime, writer, _ = make()
    prefill(writer, 50)
    runtime.on_become_leader(0, 0)
    loop = asyncio.get_event_loop()
    loop.run_until_complete(asyncio.sleep(0))
    loading = runtime._slots[0].shard
    assert loading is not None and 0 < len(loading.replayed) < 50
    assert runtime.state(0) is ShardState.LOADING
    settle(10)
    assert len(runtime.shard(0).replayed) == 50


def test_resign_during_load_discards_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "LOAD_CHUNK_RECORDS", 10)
    runtime, writer, _ = make()
    prefill(writer, 50)
    runtime.on_become_leader(0, 1)
    asyncio.get_event_loop().run_until_complete(asyncio.sleep(0))
    stale = runtime._slots[0].shard
    assert stale is not None
    runtime.on_resign(0, 2)
    settle(10)
    assert runtime.state(0) is None
    assert "loaded" not in stale.events and len(stale.replayed) < 50
    assert code_of(lambda: runtime.shard(0)) == E.NOT_COORDINATOR  # type: ignore[attr-defined]


def test_newer_epoch_while_loading_restarts_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "LOAD_CHUNK_RECORDS", 10)
    runtime, writer, _ = make()
    prefill(writer, 50)
    runtime.on_become_leader(0, 1)
    asyncio.get_event_loop().run_until_complete(asyncio.sleep(0))
    stale = runtime._slots[0].shard
    runtime.on_become_leader(0, 2)
    settle(20)
    fresh = runtime.shard(0)
    assert fresh is not stale and runtime.epoch(0) == 2
    assert [r.offset for r in fresh.replayed] == list(range(50))
    assert stale is not None and "loaded" not in stale.events


def test_epochs_active_shard_is_kept_and_old_epochs_ignored() -> None:
    runtime, _, _ = make()
    shard = active(runtime, epoch=5)
    runtime.on_become_leader(0, 5)  # same epoch: nothing
    runtime.on_become_leader(0, 4)  # older: nothing
    runtime.on_become_leader(0, 7)  # newer, still leader: the shard is kept, re-tagged
    settle()
    assert runtime.shard(0) is shard and runtime.epoch(0) == 7
    runtime.on_resign(0, 6)  # a resignation older than the shard: ignored
    assert runtime.shard(0) is shard
    runtime.on_resign(0, None)  # topic deleted
    assert runtime.state(0) is None and shard.events[-1] == "unloaded"


def test_failed_load_is_not_coordinator_until_reloaded() -> None:
    runtime, writer, _ = make()

    def broken(tp: TopicPartition) -> object:
        raise OSError("unreadable segment")
        yield  # pragma: no cover

    original = writer.read_batches
    writer.read_batches = broken  # type: ignore[method-assign,assignment]
    runtime.on_become_leader(0, 0)
    settle()
    assert runtime.state(0) is ShardState.FAILED
    assert code_of(lambda: runtime.shard(0)) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    writer.read_batches = original  # type: ignore[method-assign]
    runtime.on_become_leader(0, 1)
    settle()
    assert runtime.state(0) is ShardState.ACTIVE


def test_resign_unloads_then_fails_pending_writes() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    outcome = shard.write(b"a")
    runtime.on_resign(0, 1)
    assert shard.events[-2:] == ["unloaded", ("fail", (b"a",))]
    assert isinstance(outcome[0], KafkaError)
    assert coordinator_error(outcome[0]) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    writer.commit()  # the write resolving later changes nothing
    settle()
    assert shard.replayed == [] and len(outcome) == 1
    late = shard.write(b"b")  # a write through a closed context fails at once
    assert coordinator_error(late[0]) == E.NOT_COORDINATOR  # type: ignore[attr-defined]


def test_a_write_failing_after_the_resign_leaves_no_unretrieved_exception() -> None:
    """Seen on a cluster when the transaction coordinator's broker lost leadership: the
    pending write later failed NOT_LEADER_OR_FOLLOWER and asyncio logged "Future exception
    was never retrieved" at ERROR, as if a bug had escaped."""
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    shard.write(b"a")
    future = writer.held[0].future
    runtime.on_resign(0, 1)
    writer.fail(NotEnoughReplicasError("leadership moved"))
    settle()
    assert future.done()
    # asyncio logs a future whose exception nobody retrieved when it is collected; the flag
    # it decides by is the observable here (the test scheduler keeps the future alive)
    assert not future._log_traceback  # type: ignore[attr-defined]


# -- writes ------------------------------------------------------------
def test_committed_write_replays_before_answering() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    assert shard.write(b"a", b"b") == ["ok"]
    assert shard.events[-3:] == [("replay", b"a"), ("replay", b"b"), ("commit", (b"a", b"b"))]
    assert [r.offset for r in shard.replayed] == [0, 1]
    assert [r.offset for r in writer.records(TP)] == [0, 1]


def test_held_write_is_invisible_until_committed() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    outcome = shard.write(b"a")
    settle()
    assert outcome == [] and shard.replayed == []
    writer.commit()
    settle()
    assert outcome == ["ok"] and [r.key for r in shard.replayed] == [b"a"]


def test_writes_replay_in_offset_order_whatever_order_they_resolve_in() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    first, second, third = shard.write(b"a"), shard.write(b"b"), shard.write(b"c")
    writer.held[2].future.set_result(writer.held[2].last_offset)
    writer.held[1].future.set_result(writer.held[1].last_offset)
    settle()
    assert shard.replayed == [] and first == second == third == []
    writer.held[0].future.set_result(writer.held[0].last_offset)
    settle()
    assert [r.offset for r in shard.replayed] == [0, 1, 2]
    commits = [e for e in shard.events if isinstance(e, tuple) and e[0] == "commit"]
    assert commits == [("commit", (b"a",)), ("commit", (b"b",)), ("commit", (b"c",))]


def test_a_write_whose_fate_is_unknown_reloads_the_shard_from_the_log() -> None:
    """The writer gives up on a write in the log (an fsync round failed): whether its
    records survive is unknown, so the shard is loaded again from the log — the pending
    writes are answered NOT_COORDINATOR, the failed one with its error — and then holds
    exactly what the log does."""
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    failed, later = shard.write(b"a"), shard.write(b"b")
    writer.fail(KafkaStorageError("fsync failed"), 1)
    assert runtime.state(0) is ShardState.ACTIVE  # until the failure is seen
    settle()
    assert isinstance(failed[0], KafkaStorageError)  # type: ignore[misc]
    assert coordinator_error(failed[0]) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert coordinator_error(later[0]) == E.NOT_COORDINATOR  # type: ignore[arg-type,attr-defined]
    assert shard.replayed == [] and shard.events[-3:] == [
        "unloaded", ("fail", (b"a",)), ("fail", (b"b",))]
    writer.commit()  # the second write resolving later changes nothing in the old shard
    settle()
    reloaded = runtime.shard(0)
    assert reloaded is not shard and runtime.epoch(0) == 0
    assert [r.key for r in reloaded.replayed] == [b"a", b"b"]  # what the log holds


def test_a_write_whose_partition_moved_only_unloads() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.hold = True
    outcome = shard.write(b"a")
    writer.fail(error_class("NOT_LEADER_OR_FOLLOWER")("moved"))
    settle()
    assert coordinator_error(outcome[0]) == E.NOT_COORDINATOR  # type: ignore[arg-type,attr-defined]
    assert runtime.state(0) is None and shard.events[-1] == ("fail", (b"a",))


def test_a_timed_out_write_is_answered_and_replayed_when_it_commits() -> None:
    """Issue 22: a write not committed within the write timeout was failed for good — never
    replayed in this run — although it was in the log and committed later, so the shard's
    memory lacked it until a reload. Now the answer times out (the client hears
    REQUEST_TIMED_OUT as COORDINATOR_NOT_AVAILABLE) and the write stays pending: when it
    commits it is replayed, in order, as a load of the log replays it."""
    runtime, writer, scheduler = make()
    shard = active(runtime)
    writer.hold = True
    outcome = shard.write(b"a")
    scheduler.advance(999)
    settle()
    assert outcome == []
    scheduler.advance(1)
    settle()
    assert outcome[0][0] == "timeout"  # type: ignore[index]
    timed_out = outcome[0][1]  # type: ignore[index]
    assert isinstance(timed_out, RequestTimedOutError)  # type: ignore[misc]
    assert coordinator_error(timed_out) == E.COORDINATOR_NOT_AVAILABLE  # type: ignore[attr-defined]
    assert shard.replayed == []
    later = shard.write(b"b")  # queued behind it
    writer.commit()
    settle()
    assert outcome[1:] == ["ok"] and later == ["ok"]
    assert [r.key for r in shard.replayed] == [b"a", b"b"]
    reloaded, _, _ = make(writer)
    assert [(r.offset, r.key) for r in active(reloaded).replayed] == [
        (r.offset, r.key) for r in shard.replayed]


def test_a_write_committed_in_time_is_never_timed_out() -> None:
    runtime, writer, scheduler = make()
    shard = active(runtime)
    writer.hold = True
    outcome = shard.write(b"a")
    writer.commit()
    settle()
    scheduler.advance(5000)
    assert outcome == ["ok"] and ("timeout", (b"a",)) not in shard.events


def test_synchronous_failure_appends_nothing() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    writer.fail_appends = NotEnoughReplicasError("isr too small")
    outcome = shard.write(b"a")
    assert isinstance(outcome[0], NotEnoughReplicasError)  # type: ignore[misc]
    assert writer.records(TP) == [] and shard.replayed == []


def test_writer_bug_fails_the_write_not_the_request_path() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)

    def broken(tp: TopicPartition, batch: bytes, **_: object) -> int:
        raise RuntimeError("bug")

    writer.append = broken  # type: ignore[method-assign]
    outcome = shard.write(b"a")
    assert coordinator_error(outcome[0]) == E.UNKNOWN_SERVER_ERROR  # type: ignore[arg-type,attr-defined]
    assert shard.replayed == []


def test_a_continuation_may_write_again() -> None:
    runtime, _, _ = make()
    shard = active(runtime)
    nested: list[list[object]] = []
    shard.context.write([(b"a", b"v")], on_commit=lambda: nested.append(shard.write(b"b")),
                        on_failure=lambda exc: None)
    assert nested == [["ok"]] and [r.key for r in shard.replayed] == [b"a", b"b"]


def test_producer_id_epoch_and_control_flag_reach_replay_live_and_at_load() -> None:
    runtime, writer, _ = make()
    shard = active(runtime)
    shard.write(b"txn", producer_id=7, producer_epoch=3, transactional=True)
    shard.write(b"marker", producer_id=7, producer_epoch=3, transactional=True, control=True)
    shard.write(b"plain")
    live = [(r.producer_id, r.producer_epoch, r.is_control) for r in shard.replayed]
    assert live == [(7, 3, False), (7, 3, True), (-1, -1, False)]
    reloaded, _, _ = make(writer)
    again = active(reloaded)
    assert [(r.offset, r.producer_id, r.producer_epoch, r.is_control, r.key)
            for r in again.replayed] == [(r.offset, r.producer_id, r.producer_epoch,
                                          r.is_control, r.key) for r in shard.replayed]


def test_close_unloads_every_shard() -> None:
    runtime, _, _ = make()
    shards = [active(runtime, p) for p in range(3)]
    runtime.close()
    assert all(s.events[-1] == "unloaded" for s in shards)
    assert not runtime.active_shards()


# -- error mapping ------------------------------------------------------------
@pytest.mark.parametrize(("error", "plain", "offset_commit"), [
    ("UNKNOWN_TOPIC_OR_PARTITION", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_NOT_AVAILABLE"),
    ("NOT_ENOUGH_REPLICAS", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_NOT_AVAILABLE"),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", "COORDINATOR_NOT_AVAILABLE",
     "COORDINATOR_NOT_AVAILABLE"),
    ("REQUEST_TIMED_OUT", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_NOT_AVAILABLE"),
    ("NOT_LEADER_OR_FOLLOWER", "NOT_COORDINATOR", "NOT_COORDINATOR"),
    ("KAFKA_STORAGE_ERROR", "NOT_COORDINATOR", "NOT_COORDINATOR"),
    ("MESSAGE_TOO_LARGE", "UNKNOWN_SERVER_ERROR", "INVALID_COMMIT_OFFSET_SIZE"),
    ("RECORD_LIST_TOO_LARGE", "UNKNOWN_SERVER_ERROR", "INVALID_COMMIT_OFFSET_SIZE"),
    ("INVALID_FETCH_SIZE", "UNKNOWN_SERVER_ERROR", "INVALID_COMMIT_OFFSET_SIZE"),
    ("NETWORK_EXCEPTION", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_LOAD_IN_PROGRESS"),
    ("INVALID_TXN_STATE", "INVALID_TXN_STATE", "INVALID_TXN_STATE"),
])
def test_coordinator_error_mapping(error: str, plain: str, offset_commit: str) -> None:
    exc = error_class(error)("x")
    assert coordinator_error(exc) == error_class(plain).code
    assert coordinator_error(exc, offset_commit=True) == error_class(offset_commit).code


def test_unexpected_exception_is_unknown_server_error() -> None:
    assert coordinator_error(RuntimeError("bug")) == E.UNKNOWN_SERVER_ERROR  # type: ignore[attr-defined]
    assert coordinator_error(MessageTooLargeError("big")) == E.UNKNOWN_SERVER_ERROR  # type: ignore[attr-defined]
