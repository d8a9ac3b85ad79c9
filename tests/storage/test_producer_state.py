from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.common.clock import ManualClock
from strom.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from strom.protocol.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, crc32c, parse_header
from strom.storage.files import CorruptFileError
from strom.storage.log import Log
from strom.storage.log_validator import AppendOrigin
from strom.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import (
    NOW,
    batch_offsets,
    make_batch,
    marker_batch,
    payload,
    read_all,
    topic_config,
    values,
)

PID = 1000


def send(plog: Log, seq: int, count: int = 2, *, epoch: int = 0, pid: int = PID,
         now_ms: int | None = None) -> tuple[int, int, bool]:
    batch = make_batch(values(count), producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    result = plog.append(payload(batch), leader_epoch=0, now_ms=now_ms)
    return result.base_offset, result.last_offset, result.duplicate


def test_in_order_sequences_and_duplicates(open_log: OpenLog) -> None:
    plog = open_log()
    assert send(plog, 0) == (0, 1, False)
    assert send(plog, 2) == (2, 3, False)
    plog.append(payload(make_batch(values(1))), leader_epoch=0)  # a non-idempotent batch
    assert send(plog, 4) == (5, 6, False)
    size = plog.size_in_bytes()
    # Retries of any of the last five batches return the original offsets, write nothing.
    assert send(plog, 0) == (0, 1, True)
    assert send(plog, 2) == (2, 3, True)
    assert send(plog, 4) == (5, 6, True)
    assert plog.size_in_bytes() == size and plog.log_end_offset == 7


def test_only_the_last_five_batches_are_remembered(open_log: OpenLog) -> None:
    plog = open_log()
    for i in range(7):
        send(plog, i, 1)
    assert send(plog, 2, 1) == (2, 2, True)
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(plog, 1, 1)  # too old to be recognised


def test_gaps_and_epochs(open_log: OpenLog) -> None:
    plog = open_log()
    send(plog, 0, 3)
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(plog, 4)  # gap
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(plog, 1, 3)  # overlaps without being a duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(plog, 5, epoch=1)  # a new epoch must start at 0
    assert send(plog, 0, epoch=1)[2] is False
    with pytest.raises(InvalidProducerEpochError):
        send(plog, 3, epoch=0)  # fenced
    assert plog.log_end_offset == 5


def test_unknown_producer_may_start_anywhere(open_log: OpenLog) -> None:
    plog = open_log()
    assert send(plog, 17, pid=5)[2] is False  # e.g. its state expired
    assert send(plog, 19, pid=5)[2] is False
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(plog, 30, pid=5)


def test_sequence_wraps(open_log: OpenLog) -> None:
    plog = open_log()
    top = 2**31 - 1
    send(plog, top - 1, 2)  # last sequence 2^31-1
    assert send(plog, 0, 3)[2] is False
    assert send(plog, top - 1, 2)[2] is True


def test_multi_batch_payload_is_validated_in_order(open_log: OpenLog) -> None:
    plog = open_log()
    ok = payload(make_batch(values(2), producer_id=PID, producer_epoch=0, base_sequence=0),
                 make_batch(values(2), producer_id=PID, producer_epoch=0, base_sequence=2))
    assert plog.append(ok, leader_epoch=0).last_offset == 3
    bad = payload(make_batch(values(2), producer_id=PID, producer_epoch=0, base_sequence=4),
                  make_batch(values(2), producer_id=PID, producer_epoch=0, base_sequence=7))
    with pytest.raises(OutOfOrderSequenceNumberError):
        plog.append(bad, leader_epoch=0)
    assert plog.log_end_offset == 4
    assert send(plog, 4) == (4, 5, False)  # the rejected payload changed no state


def test_state_survives_clean_reopen(open_log: OpenLog) -> None:
    plog = open_log()
    for seq in range(0, 12, 2):
        send(plog, seq)
    plog.close()
    assert plog.producer_state.snapshot_offsets() == [12]
    again = open_log(clean_shutdown=True)
    assert send(again, 10) == (10, 11, True)
    assert send(again, 12) == (12, 13, False)
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(again, 20)


def test_state_is_rebuilt_from_the_log_after_a_crash(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400)
    for seq in range(0, 40, 2):
        send(plog, seq)
        send(plog, seq, pid=7, epoch=3)
    snapshots = plog.producer_state.snapshot_offsets()
    assert snapshots  # taken at each roll
    # No close: the newest snapshot is older than the log end; the tail is replayed.
    again = open_log(segment_bytes=400)
    assert send(again, 38) == (plog.log_end_offset - 4, plog.log_end_offset - 3, True)
    assert send(again, 38, pid=7, epoch=3)[2] is True
    assert send(again, 40)[2] is False
    with pytest.raises(InvalidProducerEpochError):
        send(again, 40, pid=7, epoch=2)


def test_snapshots_do_not_pile_up(open_log: OpenLog) -> None:
    for i in range(5):
        plog = open_log(clean_shutdown=i > 0, segment_bytes=400)
        for _ in range(3):
            send(plog, plog.log_end_offset)
        plog.close()
    offsets = plog.producer_state.snapshot_offsets()
    bases = {s.base_offset for s in plog.segments}
    assert offsets[-1] == plog.log_end_offset
    assert set(offsets[:-1]) <= bases


def test_corrupt_snapshot_falls_back(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400)
    for seq in range(0, 30, 2):
        send(plog, seq)
    plog.close()
    newest = plog.producer_state.snapshot_path(plog.log_end_offset)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1
    newest.write_bytes(bytes(data))
    again = open_log(clean_shutdown=True, segment_bytes=400)
    assert not newest.exists()
    assert send(again, 28)[2] is True and send(again, 30)[2] is False


def test_snapshots_above_the_log_end_are_dropped(open_log: OpenLog) -> None:
    plog = open_log()
    send(plog, 0)
    plog.close()
    (plog.directory / f"{99:020d}.snapshot").write_bytes(
        (plog.directory / f"{2:020d}.snapshot").read_bytes())
    again = open_log(clean_shutdown=True)
    assert again.producer_state.snapshot_offsets() == [2]


def test_truncation_rebuilds_state(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=300)
    for seq in range(0, 20, 2):
        send(plog, seq)
    plog.truncate_to(10)
    assert send(plog, 10) == (10, 11, False)  # sequence 10 is new again
    assert send(plog, 8) == (8, 9, True)


def test_expiry(open_log: OpenLog) -> None:
    plog = open_log()
    send(plog, 0, pid=1, now_ms=NOW)
    plog.append(payload(make_batch(values(1), timestamps=[NOW + 10], producer_id=2,
                                   producer_epoch=0, base_sequence=0)), leader_epoch=0)
    assert plog.remove_expired_producers(NOW + 86_400_000 + 5) == 1
    assert set(plog.producer_state.producers) == {2}
    assert send(plog, 99, pid=1)[2] is False  # forgotten: any sequence is accepted


def test_delete_records_evicts_producers(open_log: OpenLog) -> None:
    plog = open_log()
    send(plog, 0, pid=1)
    send(plog, 0, pid=2)
    plog.delete_records_before(2)
    assert set(plog.producer_state.producers) == {2}


def test_snapshot_round_trip_and_crc(tmp_path: Path) -> None:
    entries = [
        ProducerStateEntry(5, 2, [BatchMetadata(0, 4, 10, 14, NOW),
                                  BatchMetadata(5, 5, 20, 20, NOW + 1)], NOW + 1),
        ProducerStateEntry(9, 0, [], -1),
    ]
    data = encode_snapshot(entries)
    assert decode_snapshot(data) == entries
    for broken in (data[:-1], data + b"\x00", data[:6] + bytes([data[6] ^ 1]) + data[7:]):
        with pytest.raises(CorruptFileError):
            decode_snapshot(broken)
    manager = ProducerStateManager(tmp_path)
    manager.producers = {e.producer_id: e for e in entries}
    manager.map_end_offset = 21
    manager.take_snapshot()
    other = ProducerStateManager(tmp_path)
    assert other.load(100) == 21
    assert other.producers == manager.producers
    assert other.load(20) == -1 and not (tmp_path / f"{21:020d}.snapshot").exists()


def test_stored_batches_keep_producer_fields(open_log: OpenLog) -> None:
    plog = open_log()
    send(plog, 0, 3, epoch=4)
    assert batch_offsets(read_all(plog)) == [(0, 2)]


# -- transactions -------------------------------------------------------------------------
def txn_send(plog: Log, seq: int, count: int = 2, *, pid: int = PID, epoch: int = 0) -> int:
    """A transactional data batch; returns its base offset."""
    batch = make_batch(values(count), producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=TRANSACTIONAL_MASK)
    return plog.append(payload(batch), leader_epoch=0).base_offset


def marker(plog: Log, *, pid: int = PID, epoch: int = 0, commit: bool = True,
           coordinator_epoch: int = 3) -> int:
    """A commit / abort marker (control batch) of ``pid``; returns its offset."""
    batch = marker_batch(pid, commit=commit, epoch=epoch, coordinator_epoch=coordinator_epoch)
    return plog.append(payload(batch), leader_epoch=0,
                       origin=AppendOrigin.COORDINATOR).base_offset


def test_transactional_batches_open_and_markers_close_a_transaction(open_log: OpenLog) -> None:
    plog = open_log()
    state = plog.producer_state
    send(plog, 0, pid=7)  # idempotent, not transactional: no transaction
    assert state.ongoing_transactions() == {} and state.first_unstable_offset() is None
    first = txn_send(plog, 0)
    txn_send(plog, 2)  # the same transaction: its first offset does not move
    assert state.ongoing_transactions() == {PID: first}
    end = marker(plog, commit=False)
    assert state.ongoing_transactions() == {}
    # Decided, but the marker is not below the high watermark yet: still unstable.
    assert state.first_unstable_offset() == first
    state.on_high_watermark(end)
    assert state.first_unstable_offset() == first
    state.on_high_watermark(end + 1)
    assert state.first_unstable_offset() is None
    second = txn_send(plog, 4)  # the next transaction of the same producer
    assert state.ongoing_transactions() == {PID: second} == {PID: end + 1}


def test_first_unstable_offset_is_the_oldest_open_transaction(open_log: OpenLog) -> None:
    plog = open_log()
    state = plog.producer_state
    a = txn_send(plog, 0, pid=1)
    b = txn_send(plog, 0, pid=2)
    txn_send(plog, 2, pid=1)
    assert state.ongoing_transactions() == {1: a, 2: b}
    assert state.first_unstable_offset() == a
    end_a = marker(plog, pid=1)
    state.on_high_watermark(end_a + 1)
    assert state.first_unstable_offset() == b
    end_b = marker(plog, pid=2)
    assert state.first_unstable_offset() == b
    state.on_high_watermark(plog.log_end_offset)
    assert end_b < plog.log_end_offset and state.first_unstable_offset() is None


def test_marker_without_transaction_ends_nothing_and_needs_no_sequence(
    open_log: OpenLog,
) -> None:
    plog = open_log()
    state = plog.producer_state
    send(plog, 0)
    marker(plog)  # base sequence -1: no sequence check for control batches
    assert state.ongoing_transactions() == {} and state.first_unstable_offset() is None
    assert send(plog, 2) == (3, 4, False)  # the data sequence continues
    marker(plog, epoch=1)  # a bumped epoch (an aborting coordinator) is accepted
    with pytest.raises(InvalidProducerEpochError):
        marker(plog, epoch=0)  # fenced
    assert send(plog, 0, epoch=1)[2] is False


@pytest.mark.parametrize("clean", [True, False])
def test_markers_are_fenced_by_producer_and_coordinator_epochs(
    open_log: OpenLog, clean: bool
) -> None:
    plog = open_log()
    state = plog.producer_state
    txn_send(plog, 0, epoch=1)
    marker(plog, epoch=1, coordinator_epoch=4)
    assert state.producers[PID].coordinator_epoch == 4
    first = txn_send(plog, 2, epoch=1)
    end = plog.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(plog, epoch=1, coordinator_epoch=3)  # a zombie coordinator
    with pytest.raises(InvalidProducerEpochError):
        marker(plog, epoch=0, coordinator_epoch=9)  # the producer epoch is checked first
    assert plog.log_end_offset == end and state.ongoing_transactions() == {PID: first}
    if clean:
        plog.close()  # the snapshot keeps the coordinator epoch; without it, replay finds it
    plog = open_log(clean_shutdown=clean)
    assert plog.producer_state.producers[PID].coordinator_epoch == 4
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(plog, epoch=1, coordinator_epoch=3)
    marker(plog, epoch=1, coordinator_epoch=4)  # the same coordinator again: fine
    marker(plog, epoch=1, coordinator_epoch=5)  # a newer one takes over
    assert plog.producer_state.producers[PID].coordinator_epoch == 5
    assert plog.producer_state.ongoing_transactions() == {}


def test_non_transactional_batch_during_a_transaction_is_refused(open_log: OpenLog) -> None:
    plog = open_log()
    first = txn_send(plog, 0)
    end = plog.log_end_offset
    with pytest.raises(InvalidTxnStateError):
        send(plog, 2)
    assert plog.log_end_offset == end
    assert plog.producer_state.ongoing_transactions() == {PID: first}
    marker(plog)
    assert send(plog, 2)[2] is False


def test_a_rejected_payload_leaves_transactions_unchanged(open_log: OpenLog) -> None:
    plog = open_log()
    state = plog.producer_state
    txn = make_batch(values(1), producer_id=2, producer_epoch=0, base_sequence=0,
                     attributes=TRANSACTIONAL_MASK)
    gap = make_batch(values(1), producer_id=3, producer_epoch=0, base_sequence=0)
    plog.append(payload(gap), leader_epoch=0)
    bad = make_batch(values(1), producer_id=3, producer_epoch=0, base_sequence=5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        plog.append(payload(txn, bad), leader_epoch=0)
    assert state.ongoing_transactions() == {} and plog.log_end_offset == 1


@pytest.mark.parametrize("clean", [True, False])
def test_ongoing_transactions_survive_reopen(open_log: OpenLog, clean: bool) -> None:
    plog = open_log(segment_bytes=400)
    a = txn_send(plog, 0, pid=1)
    for seq in range(0, 20, 2):  # rolls: snapshots hold pid 1's open transaction
        send(plog, seq, pid=2)
    b = txn_send(plog, 0, pid=3)
    txn_send(plog, 0, pid=4)
    marker(plog, pid=4)
    assert len(plog.segments) > 2
    if clean:
        plog.close()
    again = open_log(segment_bytes=400, clean_shutdown=clean)
    assert again.producer_state.ongoing_transactions() == {1: a, 3: b}
    assert again.producer_state.first_unstable_offset() == a


@pytest.mark.parametrize("clean", [True, False])
def test_replayed_markers_are_unstable_until_the_high_watermark(
    open_log: OpenLog, clean: bool
) -> None:
    plog = open_log()
    first = txn_send(plog, 0)
    end = marker(plog)
    if clean:
        plog.close()  # the snapshot at the log end holds no unstable transaction (as Kafka's)
    state = open_log(clean_shutdown=clean).producer_state
    assert state.ongoing_transactions() == {}
    assert state.first_unstable_offset() == (None if clean else first)
    state.on_high_watermark(end + 1)
    assert state.first_unstable_offset() is None


def test_truncation_reopens_or_forgets_transactions(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400)
    state = plog.producer_state
    first = txn_send(plog, 0)
    for seq in range(0, 20, 2):
        send(plog, seq, pid=2)
    end = marker(plog)
    state.on_high_watermark(plog.log_end_offset)
    assert state.first_unstable_offset() is None
    plog.truncate_to(end)  # the marker is gone: the transaction is open again
    assert state.ongoing_transactions() == {PID: first}
    assert state.first_unstable_offset() == first
    plog.truncate_to(first)  # and now it never started
    assert state.ongoing_transactions() == {} and state.first_unstable_offset() is None


def test_log_start_past_an_open_transaction(open_log: OpenLog) -> None:
    plog = open_log()
    state = plog.producer_state
    txn_send(plog, 0, pid=1)  # offsets 0-1
    txn_send(plog, 0, pid=2)  # 2-3
    end = marker(plog, pid=2)  # 4
    send(plog, 0, pid=3)  # 5-6
    plog.delete_records_before(3)
    # pid 1's last batch is below the log start but its transaction is open: kept, and what
    # is left of the transaction starts at the log start.
    assert set(state.producers) == {1, 2, 3}
    assert state.ongoing_transactions() == {1: 3} and state.producers[1].txn_first_offset == 3
    # pid 2's decided transaction (marker not below the HW yet) also begins at the start now
    assert state.first_unstable_offset() == 3
    marker(plog, pid=1)
    plog.delete_records_before(end + 1)  # pid 2's marker is below the start: decided for good
    assert state.ongoing_transactions() == {}
    assert state.first_unstable_offset() == end + 1  # pid 1's remains, raised to the start
    plog.delete_records_before(plog.log_end_offset)
    assert state.first_unstable_offset() is None


def test_a_producer_with_an_open_transaction_does_not_expire(open_log: OpenLog) -> None:
    plog = open_log()
    txn_send(plog, 0, pid=1)
    send(plog, 0, pid=2)
    assert plog.remove_expired_producers(NOW + 86_400_000 * 30) == 1
    assert set(plog.producer_state.producers) == {1}


def test_empty_control_batch_ends_nothing(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    data = make_batch(values(1), producer_id=1, producer_epoch=0, base_sequence=0,
                      attributes=TRANSACTIONAL_MASK)
    state.replay(parse_header(data))
    emptied = make_batch([], base_offset=1, producer_id=1, producer_epoch=0,
                         attributes=TRANSACTIONAL_MASK | CONTROL_MASK)
    state.replay(parse_header(emptied))  # its marker record was compacted away
    assert state.ongoing_transactions() == {1: 0}


def test_snapshot_v2_keeps_transactions_and_v1_is_still_read(tmp_path: Path) -> None:
    entries = [
        ProducerStateEntry(5, 2, [BatchMetadata(0, 4, 10, 14, NOW)], NOW, txn_first_offset=10,
                           coordinator_epoch=7),
        ProducerStateEntry(9, 0, [], -1),
    ]
    data = encode_snapshot(entries)
    assert struct.unpack_from(">h", data)[0] == 2
    assert decode_snapshot(data) == entries
    # Version 1 (before transactions): no coordinator epoch, no transaction field.
    body = struct.pack(">i", 1) + struct.pack(">qhqb", 5, 2, NOW, 1) + struct.pack(
        ">iiqqq", 0, 4, 10, 14, NOW)
    v1 = struct.pack(">hI", 1, crc32c(body)) + body
    assert decode_snapshot(v1) == [ProducerStateEntry(5, 2, [BatchMetadata(0, 4, 10, 14, NOW)],
                                                      NOW)]
    with pytest.raises(CorruptFileError, match="version 3"):
        decode_snapshot(struct.pack(">hI", 3, crc32c(body)) + body)
    (tmp_path / f"{15:020d}.snapshot").write_bytes(v1)
    manager = ProducerStateManager(tmp_path)
    assert manager.load(100) == 15 and manager.ongoing_transactions() == {}
    (tmp_path / f"{21:020d}.snapshot").write_bytes(data)
    assert manager.load(100) == 21 and manager.ongoing_transactions() == {5: 10}


# Model check: random appends of three producers, then a crash reopen and a truncation; the
# transaction state always equals the one computed from the list of batches.
_OPS = st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["txn", "marker", "plain"])),
                max_size=30)


def _model(ops: list[tuple[int, str, int]]) -> dict[int, int]:
    ongoing: dict[int, int] = {}
    for pid, kind, offset in ops:
        if kind == "txn":
            ongoing.setdefault(pid, offset)
        elif kind == "marker":
            ongoing.pop(pid, None)
    return ongoing


@given(_OPS, st.integers(0, 60))
@settings(max_examples=40, deadline=None)
def test_transaction_state_matches_a_model(ops: list[tuple[int, str]], cut: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d) / "topic-0"
        clock = ManualClock(NOW)
        config = topic_config(segment_bytes=500)
        plog = Log.open(directory, config, clock=clock)
        seqs = {1: 0, 2: 0, 3: 0}
        done: list[tuple[int, str, int]] = []
        for pid, kind in ops:
            if kind == "marker":
                offset = marker(plog, pid=pid)
            elif kind == "txn":
                offset = txn_send(plog, seqs[pid], 1, pid=pid)
                seqs[pid] += 1
            else:
                if pid in _model(done):
                    continue  # refused (tested above)
                offset, _, _ = send(plog, seqs[pid], 1, pid=pid)
                seqs[pid] += 1
            done.append((pid, kind, offset))
            assert plog.producer_state.ongoing_transactions() == _model(done)
        crashed = Log.open(directory, config, clock=clock)  # no close: replay after a crash
        plog.close()
        assert crashed.producer_state.ongoing_transactions() == _model(done)
        crashed.truncate_to(min(cut, crashed.log_end_offset))
        kept = [op for op in done if op[2] < cut]
        assert crashed.producer_state.ongoing_transactions() == _model(kept)
        crashed.producer_state.on_high_watermark(crashed.log_end_offset)
        assert crashed.producer_state.first_unstable_offset() == min(
            _model(kept).values(), default=None)
        crashed.close()


# -- appends by origin: only a client's batches are deduplicated --------------------------------
def coordinator_txn_batch(plog: Log, *, pid: int = PID, epoch: int = 0) -> tuple[int, bool]:
    """A transactional batch as the group coordinator writes a TxnOffsetCommit: the producer's
    id and epoch, no sequence (-1). Returns (base offset, duplicate)."""
    batch = make_batch(values(1), producer_id=pid, producer_epoch=epoch,
                       attributes=TRANSACTIONAL_MASK)
    result = plog.append(payload(batch), leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    return result.base_offset, result.duplicate


def test_coordinator_batches_and_markers_are_never_deduplicated(open_log: OpenLog) -> None:
    """Kafka checks duplicates for client appends only: every transactional offset commit
    and every marker of the same producer epoch (all with sequence -1) is written."""
    plog = open_log()
    state = plog.producer_state
    offsets = []
    for _ in range(3):  # three transactions of one producer epoch, each with its offsets
        first, dup = coordinator_txn_batch(plog)
        assert not dup
        assert state.ongoing_transactions() == {PID: first}
        second, dup = coordinator_txn_batch(plog)  # a second commit in the same transaction
        assert not dup and second == first + 1
        end = marker(plog, commit=True)
        assert end == second + 1
        assert state.ongoing_transactions() == {}
        offsets += [first, second, end]
    assert offsets == list(range(9)) and plog.log_end_offset == 9
    assert [start for start, _ in batch_offsets(read_all(plog))] == offsets


def test_a_client_retry_is_still_deduplicated_after_markers(open_log: OpenLog) -> None:
    plog = open_log()
    first = txn_send(plog, 0)
    marker(plog, commit=True)
    batch = make_batch(values(2), producer_id=PID, producer_epoch=0, base_sequence=0,
                       attributes=TRANSACTIONAL_MASK)
    retry = plog.append(payload(batch), leader_epoch=0)
    assert retry.duplicate and retry.base_offset == first
    assert plog.log_end_offset == 3
