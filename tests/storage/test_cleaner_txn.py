"""Compaction of logs with transactions: aborted data goes, committed transactional records
compact like others, markers stay while their transaction has data, then leave after
``delete.retention.ms``; the transaction index and producer state stay right throughout."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import InvalidProducerEpochError
from strom.protocol.records.batch import DELETE_HORIZON_MASK, TRANSACTIONAL_MASK, BatchHeader
from strom.protocol.records.control import ControlType, control_type_of
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import Record
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log
from strom.storage.log_validator import AppendOrigin
from strom.storage.txn_index import AbortedTxn
from tests.storage.cleaner_helpers import (
    TP,
    log_batches,
    one_log_cleaner,
    produce,
    stable_to_lso,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, make_batch, marker_batch, payload, read_all, txn_batch

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01",
           "delete_retention_ms": 1000, "segment_bytes": 700}


CleanerFor = Callable[[Log], LogCleaner]


class Producer:
    """A transactional producer writing keyed records to one log, sequences tracked."""

    def __init__(self, plog: Log, pid: int, epoch: int = 0) -> None:
        self.plog, self.pid, self.epoch, self.seq = plog, pid, epoch, 0

    def send(self, pairs: Sequence[tuple[bytes, bytes]]) -> int:
        batch = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs],
                           producer_id=self.pid, producer_epoch=self.epoch,
                           base_sequence=self.seq, attributes=TRANSACTIONAL_MASK)
        self.seq += len(pairs)
        return self.plog.append(payload(batch), leader_epoch=0).base_offset

    def end(self, *, commit: bool, epoch: int | None = None) -> int:
        batch = marker_batch(self.pid, commit=commit,
                             epoch=self.epoch if epoch is None else epoch)
        return self.plog.append(payload(batch), leader_epoch=0,
                                origin=AppendOrigin.COORDINATOR).base_offset


def committed_view(plog: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer gets from the whole log: a Kafka consumer's rules over
    the batches and the aborted transactions the log returns with them."""
    result = plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.log_end_offset,
                       aborted_transactions=True)
    assert result.aborted_transactions is not None
    pending = sorted(result.aborted_transactions, key=lambda t: t[1])
    aborting: set[int] = set()
    out = []
    for header, records in decode_batches(read_all(plog)):
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.is_control:
            if records and control_type_of(records[0].key) is ControlType.ABORT:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        out.extend((r.offset, r.key, r.value) for r in records)
    return out


def latest(view: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    seen: dict[bytes | None, bytes | None] = {}
    for _, key, value in view:
        seen[key] = value
    return seen


def assert_committed_unchanged(plog: Log, before: dict[bytes | None, bytes | None]) -> None:
    """Every key committed before has the same latest committed value (later writes aside)."""
    after = latest(committed_view(plog))
    assert {key: after.get(key) for key in before} == before


def markers(plog: Log) -> list[tuple[BatchHeader, list[Record]]]:
    return [(h, r) for h, r in log_batches(plog) if h.is_control]


@pytest.fixture(params=["process", "thread"])
def cleaner_for(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
                ) -> Iterator[CleanerFor]:
    """A one-log cleaner running its passes in the worker process or in its own thread."""
    use_process = request.param == "process"
    made: list[LogCleaner] = []

    def make(plog: Log) -> LogCleaner:
        cleaner = one_log_cleaner(tmp_path, plog, clock, use_process=use_process)
        made.append(cleaner)
        return cleaner

    yield make
    for cleaner in made:
        assert cleaner.uses_process == use_process
        cleaner.stop()


def reopen_from_log_alone(plog: Log, open_log: OpenLog) -> Log:
    """Close ``plog`` and open it again with producer state rebuilt from the segments."""
    directory = plog.directory
    plog.close()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    return open_log(directory=directory, clean_shutdown=True, **COMPACT)


def roll_with(plog: Log, tag: bytes) -> None:
    """New dirty data in a segment of its own, then a fresh active segment."""
    produce(plog, [(b"filler-" + tag, b"x" * 40)])
    plog.roll()
    produce(plog, [(b"active-" + tag, b"y")])


def test_aborted_data_goes_and_markers_follow_after_delete_retention(
    cleaner_for: CleanerFor, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(**COMPACT)
    one, two, three = Producer(plog, 1), Producer(plog, 2), Producer(plog, 3)
    produce(plog, [(b"k5", b"plain-old"), (b"k6", b"plain-keep")])
    one.send([(b"k0", b"one"), (b"k1", b"one"), (b"k2", b"one")])
    two.send([(b"k0", b"aborted"), (b"k6", b"aborted")])  # must never hide k6's committed value
    one.end(commit=True)
    two.end(commit=False)
    three.send([(b"k1", b"three"), (b"k5", b"three")])  # committed: supersedes plain-old
    three.end(commit=True)
    # Each producer writes again later, in the active segment: its old batches may go.
    roll_with(plog, b"0")
    for producer in (one, two, three):
        producer.send([(b"late-%d" % producer.pid, b"v")])
        producer.end(commit=True)
    before = latest(committed_view(plog))
    assert before[b"k0"] == b"one" and before[b"k6"] == b"plain-keep"
    aborted_before = plog.aborted_transactions(0, plog.log_end_offset)
    assert [t.producer_id for t in aborted_before] == [2]
    cleaner = cleaner_for(plog)

    assert cleaner.clean_once(NOW)
    values = [r.value for h, rs in log_batches(plog) if not h.is_control for r in rs]
    assert b"aborted" not in values and b"plain-old" not in values
    assert_committed_unchanged(plog, before)
    # The pass met two's data: its abort marker and index entry stay; one's commit marker
    # stays (its k0 / k2 are still there); three's too.
    assert [(h.producer_id, h.attributes & DELETE_HORIZON_MASK) for h, _ in markers(plog)
            if h.base_offset < plog.active_segment.base_offset] == [(1, 0), (2, 0), (3, 0)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == aborted_before

    clock.advance(10)
    roll_with(plog, b"1")
    assert cleaner.clean_once()
    # two's data is gone: its marker may go, first with a delete horizon; its entry is dropped
    stamped = {h.producer_id: h for h, _ in markers(plog) if h.attributes & DELETE_HORIZON_MASK}
    assert list(stamped) == [2] and stamped[2].base_timestamp == NOW + 10 + 1000
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert_committed_unchanged(plog, before)

    clock.advance(1000)
    roll_with(plog, b"2")
    assert cleaner.clean_once()
    assert 2 not in [h.producer_id for h, _ in markers(plog)
                     if h.base_offset < aborted_before[0].last_offset + 1]
    assert_committed_unchanged(plog, before)
    assert not any(p.stat().st_size for p in plog.directory.glob("*.txnindex"))

    # Rebuilt from the compacted log alone, producer state has no transaction left open.
    reopened = reopen_from_log_alone(plog, open_log)
    assert reopened.producer_state.ongoing_transactions() == {}
    assert_committed_unchanged(reopened, before)


def test_a_live_producers_last_aborted_batch_keeps_its_marker_and_entry(
    cleaner_for: CleanerFor, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(**COMPACT)
    producer = Producer(plog, 7)
    first = producer.send([(b"a", b"aborted")])
    abort = producer.end(commit=False)
    roll_with(plog, b"0")
    cleaner = cleaner_for(plog)
    for i in range(3):
        clock.advance(2000)
        roll_with(plog, b"%d" % (i + 1))
        assert cleaner.clean_once()
    # The batch stays emptied (its sequences are the producer's state), so the marker that
    # ends its transaction stays too, and consumers still learn it was aborted.
    kept = [h for h, _ in log_batches(plog) if h.producer_id == 7]
    assert [(h.base_offset, h.records_count, h.is_control) for h in kept] == [
        (first, 0, False), (abort, 1, True)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [
        AbortedTxn(7, first, abort, abort + 1)]
    assert b"aborted" not in [v for _, _, v in committed_view(plog)]


def test_a_bumped_epoch_marker_survives_for_fencing(
    cleaner_for: CleanerFor, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(**COMPACT)
    producer = Producer(plog, 9)
    producer.send([(b"a", b"aborted")])
    producer.end(commit=False, epoch=1)  # the coordinator aborted it, bumping the epoch
    assert plog.producer_state.producers[9].batches == []
    cleaner = cleaner_for(plog)
    for i in range(3):
        clock.advance(2000)
        roll_with(plog, b"%d" % i)
        assert cleaner.clean_once()
    kept = [h for h, _ in log_batches(plog) if h.producer_id == 9]
    assert [(h.is_control, h.producer_epoch, h.records_count) for h in kept] == [(True, 1, 0)]
    reopened = reopen_from_log_alone(plog, open_log)
    assert reopened.producer_state.producers[9].epoch == 1
    with pytest.raises(InvalidProducerEpochError):
        reopened.append(payload(txn_batch(9, 0, epoch=0, keys=[b"a", b"b"])), leader_epoch=0)


def test_the_first_segments_index_is_replaced_by_the_swap(
    cleaner_for: CleanerFor, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(**COMPACT)
    producer = Producer(plog, 4)
    producer.send([(b"a", b"aborted")])
    producer.end(commit=False)
    roll_with(plog, b"0")
    producer.send([(b"late", b"v")])
    producer.end(commit=True)
    first = plog.segments[0]
    assert first.txn_index_path.exists() and len(first.txn_index) == 1
    cleaner = cleaner_for(plog)
    for i in range(3):  # data removed; marker stamped with a horizon; marker removed
        clock.advance(2000)
        roll_with(plog, b"%d" % (i + 1))
        assert cleaner.clean_once()
    # Gone from the log and from the index file that the cleaned segment took over.
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert plog.segments[0].txn_index_path.read_bytes() == b""
    assert [h.base_offset for h, _ in log_batches(plog) if h.producer_id == 4] == [4, 5]


def test_cleaning_stops_at_the_last_stable_offset(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(**COMPACT)
    produce(plog, [(b"a", b"v1"), (b"b", b"v1")])
    produce(plog, [(b"a", b"v2")])
    plog.roll()
    producer = Producer(plog, 5)
    open_at = producer.send([(b"a", b"undecided"), (b"b", b"undecided")])
    plog.roll()
    produce(plog, [(b"b", b"v3"), (b"c", b"v3")])
    roll_with(plog, b"0")
    cleaner = one_log_cleaner(tmp_path, plog, clock, use_process=False, stable=stable_to_lso)
    assert stable_to_lso(plog).stable_end == open_at

    assert cleaner.clean_once()  # only the segment below the open transaction
    values = [(r.key, r.value) for h, rs in log_batches(plog) if not h.is_control for r in rs]
    assert (b"a", b"v1") not in values
    assert {(b"b", b"v1"), (b"a", b"undecided"), (b"b", b"undecided")} <= set(values)
    assert cleaner.checkpoint_offsets()[TP] == open_at

    producer.end(commit=False)
    clock.advance(10)
    roll_with(plog, b"1")
    assert cleaner.clean_once()
    values = [(r.key, r.value) for h, rs in log_batches(plog) if not h.is_control for r in rs]
    assert (b"a", b"undecided") not in values and (b"b", b"undecided") not in values
    assert (b"b", b"v1") not in values and (b"a", b"v2") in values and (b"b", b"v3") in values
    cleaner.stop()
