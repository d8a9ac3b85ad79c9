from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from strom.storage.files import CorruptFileError
from strom.storage.log import Log
from strom.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, batch_offsets, make_batch, payload, read_all, values

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
