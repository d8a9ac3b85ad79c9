"""The transaction coordinator over the in-memory partition writer: Kafka's state machine,
epochs and fencing, markers, timeouts, expiry, loading, and failed writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import ErrorCode, KafkaStorageError
from strom.common.types import TopicPartition
from strom.coordinator.runtime import ShardState
from strom.coordinator.txn.coordinator import TxnCoordinator
from strom.coordinator.txn.model import (
    VALID_PREVIOUS,
    IllegalTransition,
    TxnMetadata,
    TxnState,
)
from strom.coordinator.txn.records import (
    TXN_TOPIC,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.coordinator.txn.shard import MarkerJob, TxnSettings
from strom.testing.partition_writer import MemoryPartitionWriter
from strom.testing.scheduler import ManualScheduler
from tests.coordinator.fakes import settle

E = ErrorCode
SETTINGS = TxnSettings(partitions=3, max_timeout_ms=60_000, abort_interval_ms=1000,
                       id_expiration_ms=100_000, remove_interval_ms=10_000)
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class RecordingMarkers:
    """Records marker jobs; a test completes them by hand (the network sender's twin)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[MarkerJob, Callable[[], None]]] = []

    def send(self, job: MarkerJob, on_done: Callable[[], None]) -> None:
        self.jobs.append((job, on_done))

    def deliver_all(self) -> list[MarkerJob]:
        jobs, self.jobs = self.jobs, []
        for _, done in jobs:
            done()
        settle()
        return [job for job, _ in jobs]


class Harness:
    def __init__(self, writer: MemoryPartitionWriter | None = None,
                 clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.scheduler = ManualScheduler(self.clock)
        loop = asyncio.get_event_loop()
        self.writer = writer or MemoryPartitionWriter(loop)
        self.markers = RecordingMarkers()
        self.next_pid = 1000
        self.c = TxnCoordinator(self.writer, self.scheduler, self.clock, SETTINGS,
                                self._pid, self.markers, loop=loop)
        for p in range(SETTINGS.partitions):
            self.c.runtime.on_become_leader(p, 7)
        for p in range(SETTINGS.partitions):
            loop.run_until_complete(self.c.runtime.wait_loaded(p))
            assert self.c.runtime.state(p) is ShardState.ACTIVE

    def _pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def init(self, tid: str = "tx", timeout_ms: int = 10_000,
             expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        out: list[tuple[int, int, int]] = []
        self.c.init_producer_id(tid, timeout_ms, expected, lambda *a: out.append(a))
        settle()
        assert len(out) == 1
        return out[0]

    def add(self, pid: int, epoch: int, *tps: TopicPartition, tid: str = "tx") -> int:
        out: list[int] = []
        self.c.add_partitions(tid, pid, epoch, set(tps) or {T0}, out.append)
        settle()
        assert len(out) == 1
        return out[0]

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "tx") -> int:
        out: list[int] = []
        self.c.end_txn(tid, pid, epoch, commit, out.append)
        settle()
        assert len(out) == 1
        return out[0]

    def state(self, tid: str = "tx") -> TxnState:
        error, view = self.c.describe(tid)
        assert error == 0 and view is not None
        return view.state


# -- records -------------------------------------------------------------------------------
def test_value_round_trip_and_kafka_layout() -> None:
    value = TxnLogValue(42, 3, 60_000, int(TxnState.ONGOING),
                        frozenset({TopicPartition("b", 1), TopicPartition("a", 0),
                                   TopicPartition("a", 2)}), 1700, 1600)
    data = encode_value(value)
    # version 0 | pid | epoch | timeout | status | 2 topics: "a" [0, 2], "b" [1] | times
    assert data[:17] == b"\x00\x00" + (42).to_bytes(8, "big") + b"\x00\x03" + (
        60_000).to_bytes(4, "big") + b"\x01"
    assert data[17:21] == (2).to_bytes(4, "big") and data[21:24] == b"\x00\x01a"
    assert decode_value(data) == value
    empty = TxnLogValue(42, 3, 60_000, int(TxnState.EMPTY), frozenset(), 1700, -1)
    assert encode_value(empty)[17:21] == b"\xff\xff\xff\xff"  # null partitions when Empty
    assert decode_value(encode_value(empty)) == empty
    assert decode_value(None) is None
    assert decode_key(encode_key("my-txn")) == "my-txn"
    assert encode_key("x") == b"\x00\x00\x00\x01x"


def test_flexible_value_version_1_is_read() -> None:
    # version 1: compact arrays / strings (+1), tagged fields: 0 previous producer id.
    body = (b"\x00\x01" + (7).to_bytes(8, "big") + b"\x00\x02" + (1000).to_bytes(4, "big")
            + b"\x04" + b"\x02" + b"\x02t" + b"\x02" + (5).to_bytes(4, "big") + b"\x00"
            + (9).to_bytes(8, "big") + (8).to_bytes(8, "big")
            + b"\x01" + b"\x00\x08" + (6).to_bytes(8, "big"))
    value = decode_value(body)
    assert value is not None
    assert (value.producer_id, value.producer_epoch, value.state) == (7, 2, 4)
    assert value.partitions == {TopicPartition("t", 5)} and value.previous_producer_id == 6


def test_state_machine_follows_kafkas_transitions() -> None:
    assert VALID_PREVIOUS[TxnState.PREPARE_COMMIT] == {TxnState.ONGOING}
    meta = TxnMetadata("x", 1, producer_epoch=0, state=TxnState.EMPTY)
    with pytest.raises(IllegalTransition):
        meta.prepare_end(True, 0)  # Empty -> PrepareCommit is illegal
    meta.prepare_add_partitions({T0}, 5)
    with pytest.raises(IllegalTransition):  # one pending transition at a time
        meta.prepare_add_partitions({T1}, 6)
    assert TxnState.from_display("PrepareCommit") is TxnState.PREPARE_COMMIT


# -- InitProducerId ----------------------------------------------------------------------------
def test_init_allocates_then_bumps_and_fences() -> None:
    h = Harness()
    error, pid, epoch = h.init()
    assert (error, epoch) == (E.NONE, 0) and pid == 1001
    assert h.init() == (E.NONE, pid, 1)  # a second incarnation fences the first
    assert h.add(pid, 0) == E.PRODUCER_FENCED  # type: ignore[attr-defined]
    assert h.add(pid, 1) == E.NONE
    assert h.init(timeout_ms=SETTINGS.max_timeout_ms + 1)[0] == E.INVALID_TRANSACTION_TIMEOUT  # type: ignore[attr-defined]
    assert h.init(tid="")[0] == E.INVALID_REQUEST  # type: ignore[attr-defined]


def test_kip_360_epoch_bump_and_lost_answer_retry() -> None:
    h = Harness()
    _, pid, _ = h.init()
    assert h.init(expected=(pid, 0)) == (E.NONE, pid, 1)
    assert h.init(expected=(pid, 0)) == (E.NONE, pid, 1)  # retry of a bump it never heard
    assert h.init(expected=(pid, 1)) == (E.NONE, pid, 2)
    assert h.init(expected=(pid, 0))[0] == E.PRODUCER_FENCED  # type: ignore[attr-defined]
    assert h.init(expected=(999, 2))[0] == E.PRODUCER_FENCED  # type: ignore[attr-defined]


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    h = Harness()
    _, pid, _ = h.init()
    shard = h.c.runtime.shard(h.c.partition_for("tx"))
    shard.txns["tx"].producer_epoch = 32766
    error, new_pid, epoch = h.init()
    assert error == E.NONE and new_pid != pid and epoch == 0


def test_init_while_ongoing_aborts_first_and_asks_to_retry() -> None:
    h = Harness()
    _, pid, _ = h.init()
    assert h.add(pid, 0, T0, T1) == E.NONE
    assert h.init()[0] == E.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
    assert h.state() is TxnState.PREPARE_ABORT
    [job] = [j for j, _ in h.markers.jobs]
    assert (job.commit, job.producer_epoch, job.partitions) == (False, 1, {T0, T1})
    assert job.coordinator_epoch == 7
    assert h.init()[0] == E.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
    h.markers.deliver_all()
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.init() == (E.NONE, pid, 2)


# -- AddPartitions / EndTxn ----------------------------------------------------------------------
def test_add_partitions_checks_the_producer() -> None:
    h = Harness()
    assert h.add(5, 0, tid="nobody") == E.INVALID_PRODUCER_ID_MAPPING  # type: ignore[attr-defined]
    _, pid, _ = h.init()
    assert h.add(pid + 1, 0) == E.INVALID_PRODUCER_ID_MAPPING  # type: ignore[attr-defined]
    assert h.add(pid, 0) == E.NONE and h.state() is TxnState.ONGOING
    writes = h.writer.appends
    assert h.add(pid, 0) == E.NONE and h.writer.appends == writes  # already in: no write
    assert h.c.verify_partitions("tx", pid, 0, {T0, T1}) == {
        T0: E.NONE, T1: E.TRANSACTION_ABORTABLE}  # type: ignore[attr-defined]


def test_verification_answers_as_kafkas_coordinator() -> None:
    """KIP-890 verification (Kafka 4.4's handleVerifyPartitionsInTransaction): the producer's
    error for every partition, CONCURRENT_TRANSACTIONS while completing, else per partition
    NONE or TRANSACTION_ABORTABLE."""
    h = Harness()
    assert h.c.verify_partitions("nobody", 5, 0, {T0}) == {
        T0: E.INVALID_PRODUCER_ID_MAPPING}  # type: ignore[attr-defined]
    _, pid, _ = h.init()
    assert h.c.verify_partitions("tx", pid, 0, {T0}) == {
        T0: E.TRANSACTION_ABORTABLE}  # type: ignore[attr-defined]  # Empty
    assert h.c.verify_partitions("tx", pid + 1, 0, {T0}) == {
        T0: E.INVALID_PRODUCER_ID_MAPPING}  # type: ignore[attr-defined]
    assert h.c.verify_partitions("tx", pid, 1, {T0}) == {
        T0: E.PRODUCER_FENCED}  # type: ignore[attr-defined]
    h.add(pid, 0, T0)
    assert h.end(pid, 0, commit=True) == E.NONE
    assert h.c.verify_partitions("tx", pid, 0, {T0, T1}) == {
        T0: E.CONCURRENT_TRANSACTIONS, T1: E.CONCURRENT_TRANSACTIONS}  # type: ignore[attr-defined]
    h.markers.deliver_all()
    assert h.c.verify_partitions("tx", pid, 0, {T0}) == {
        T0: E.TRANSACTION_ABORTABLE}  # type: ignore[attr-defined]  # CompleteCommit


def test_commit_sends_markers_then_completes() -> None:
    h = Harness()
    _, pid, _ = h.init()
    h.add(pid, 0, T0, T1)
    assert h.end(pid, 0, commit=True) == E.NONE
    assert h.state() is TxnState.PREPARE_COMMIT
    assert h.add(pid, 0) == E.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
    assert h.end(pid, 0, commit=True) == E.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
    assert h.end(pid, 0, commit=False) == E.INVALID_TXN_STATE  # type: ignore[attr-defined]
    [job] = h.markers.deliver_all()
    assert job.commit and job.partitions == {T0, T1}
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.end(pid, 0, commit=True) == E.NONE  # a retry after completion
    assert h.end(pid, 0, commit=False) == E.INVALID_TXN_STATE  # type: ignore[attr-defined]
    assert h.add(pid, 0) == E.NONE and h.state() is TxnState.ONGOING  # the next one


def test_end_txn_errors() -> None:
    h = Harness()
    assert h.end(1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING  # type: ignore[attr-defined]
    _, pid, _ = h.init()
    assert h.end(pid, 0, True) == E.INVALID_TXN_STATE  # type: ignore[attr-defined]  # Empty
    h.add(pid, 0)
    assert h.end(pid, 3, True) == E.PRODUCER_FENCED  # type: ignore[attr-defined]


# -- timeouts, expiry ----------------------------------------------------------------------------
def test_timed_out_transaction_is_fenced_and_aborted() -> None:
    h = Harness()
    _, pid, _ = h.init(timeout_ms=5000)
    h.add(pid, 0)
    h.scheduler.advance(4000)
    assert h.state() is TxnState.ONGOING
    h.scheduler.advance(2000)
    settle()
    assert h.state() is TxnState.PREPARE_ABORT
    [job] = h.markers.deliver_all()
    assert not job.commit and job.producer_epoch == 1
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.end(pid, 0, True) == E.PRODUCER_FENCED  # type: ignore[attr-defined]


def test_idle_transactional_id_expires() -> None:
    h = Harness()
    h.init()
    h.scheduler.advance(SETTINGS.id_expiration_ms + SETTINGS.remove_interval_ms)
    settle()
    assert h.c.describe("tx")[0] == E.TRANSACTIONAL_ID_NOT_FOUND  # type: ignore[attr-defined]


# -- loading and failures -------------------------------------------------------------------------
def test_prepared_transaction_found_on_load_is_completed() -> None:
    h = Harness()
    _, pid, _ = h.init()
    h.add(pid, 0, T1)
    h.end(pid, 0, commit=True)
    assert h.markers.jobs  # decided, markers not yet written: the broker dies here
    h2 = Harness(writer=h.writer, clock=h.clock)
    assert h2.state() is TxnState.PREPARE_COMMIT
    [job] = h2.markers.deliver_all()
    assert job.commit and job.partitions == {T1} and job.producer_id == pid
    assert h2.state() is TxnState.COMPLETE_COMMIT


def test_failed_write_reloads_and_refused_write_changes_nothing() -> None:
    h = Harness()
    _, pid, _ = h.init()
    h.writer.hold = True
    out: list[int] = []
    h.c.add_partitions("tx", pid, 0, {T0}, out.append)
    settle()
    assert out == [] and h.add(pid, 0) == E.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
    h.writer.fail(KafkaStorageError("disk"))
    settle()
    assert out == [E.NOT_COORDINATOR]  # type: ignore[attr-defined]
    # the record is in the log (the writer lost track of it, it was not refused): the shard
    # was reloaded and holds what a fresh load of the log gives
    settle()
    assert h.state() is Harness(writer=h.writer, clock=h.clock).state() is TxnState.ONGOING
    h.writer.hold = False
    h.writer.fail_appends = KafkaStorageError("disk")
    assert h.init(tid="fresh")[0] == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert h.c.describe("fresh")[0] == E.TRANSACTIONAL_ID_NOT_FOUND  # type: ignore[attr-defined]


def test_requests_for_partitions_not_led_here() -> None:
    h = Harness()
    partition = h.c.partition_for("tx")
    h.c.runtime.on_resign(partition, 7)
    assert h.init()[0] == E.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert TXN_TOPIC == "__transaction_state"
