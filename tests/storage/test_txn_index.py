"""The aborted-transaction index: Kafka's ``.txnindex`` bytes, its life with its segment, and
how the log fills it (abort markers, follower appends, crash recovery) and reads it."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from strom.common.errors import InvalidRecordError
from strom.storage.files import CorruptIndexError
from strom.storage.log import Log
from strom.storage.log_validator import AppendOrigin
from strom.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from tests.storage.conftest import OpenLog
from tests.storage.helpers import (
    make_batch,
    marker_batch,
    payload,
    read_all,
    txn_batch,
    values,
)

A, B, C = 7, 8, 9


def data(plog: Log, pid: int, seq: int, count: int = 2) -> int:
    """A transactional batch of ``pid``; returns its base offset."""
    return plog.append(payload(txn_batch(pid, seq, count)), leader_epoch=0).base_offset


def end(plog: Log, pid: int, *, commit: bool, coordinator_epoch: int = 0) -> int:
    """``pid``'s marker, written as the coordinator does; returns its offset."""
    batch = marker_batch(pid, commit=commit, coordinator_epoch=coordinator_epoch)
    return plog.append(payload(batch), leader_epoch=0,
                       origin=AppendOrigin.COORDINATOR).base_offset


def plain(plog: Log, count: int = 3) -> None:
    plog.append(payload(make_batch(values(count))), leader_epoch=0)


def index_files(plog: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(plog.directory.glob("*.txnindex"))}


# -- the file ---------------------------------------------------------------------------
def test_entries_are_kafkas_34_byte_layout(tmp_path: Path) -> None:
    path = tmp_path / f"{100:020d}.txnindex"
    index = TransactionIndex.create(path, 100)
    assert not path.exists()  # like Kafka's, the file appears with the first entry
    index.append(AbortedTxn(0x0102030405060708, 90, 110, 111))
    index.append(AbortedTxn(5, 105, 130, 105))
    # version int16 0 | producer id int64 | first int64 | last int64 | last stable int64
    assert ENTRY_SIZE == 34
    assert path.read_bytes() == bytes.fromhex(
        "0000" "0102030405060708" "000000000000005a" "000000000000006e" "000000000000006f"
        "0000" "0000000000000005" "0000000000000069" "0000000000000082" "0000000000000069")
    index.close()
    loaded = TransactionIndex.load(path, 100)
    assert loaded.entries() == [AbortedTxn(0x0102030405060708, 90, 110, 111),
                                AbortedTxn(5, 105, 130, 105)]
    loaded.close()
    assert TransactionIndex.load(tmp_path / "missing.txnindex", 0).entries() == []


def test_appends_must_follow_the_last_marker(tmp_path: Path) -> None:
    index = TransactionIndex.create(tmp_path / f"{10:020d}.txnindex", 10)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 0, 9, 10))  # marker below the segment
    index.append(AbortedTxn(1, 0, 12, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 11, 12, 13))
    index.close()


@pytest.mark.parametrize("raw", [
    struct.pack(">hqqqq", 1, 5, 0, 20, 21),  # unknown version
    struct.pack(">hqqqq", 0, 5, 0, 20, 21) + struct.pack(">hqqqq", 0, 6, 0, 20, 21),  # repeat
    struct.pack(">hqqqq", 0, 5, 0, 9, 10),  # marker below the base offset
    struct.pack(">hqqqq", 0, 5, 15, 12, 13),  # first offset past the marker
    struct.pack(">hqqqq", 0, 5, 0, 20, 21)[:-3],  # torn entry
])
def test_unsound_files_are_refused(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / f"{10:020d}.txnindex"
    path.write_bytes(raw)
    with pytest.raises(CorruptIndexError):
        TransactionIndex.load(path, 10)


def test_collect_stops_once_the_last_stable_offset_covers_the_range(tmp_path: Path) -> None:
    index = TransactionIndex.create(tmp_path / f"{0:020d}.txnindex", 0)
    # A aborted at 10 while B (from 3) was open; B aborted at 20 while C (from 15) was open.
    entries = [AbortedTxn(A, 0, 10, 3), AbortedTxn(B, 3, 20, 15), AbortedTxn(C, 15, 30, 31)]
    for txn in entries:
        index.append(txn)
    assert index.collect(11, 25) == (entries[1:], True)
    assert index.collect(0, 3) == ([entries[0]], True)
    assert index.collect(31, 40) == ([], False)  # a later segment may hold more
    index.truncate_to(20)
    assert index.entries() == entries[:1] and index.path.stat().st_size == ENTRY_SIZE
    index.close()


# -- the log fills it -------------------------------------------------------------------
def test_abort_markers_add_entries_with_the_last_stable_offset(open_log: OpenLog) -> None:
    plog = open_log()
    a = data(plog, A, 0)  # 0-1
    b = data(plog, B, 0)  # 2-3
    abort_a = end(plog, A, commit=False)  # 4: B still open, so the stable offset is B's start
    end(plog, B, commit=True)  # commits leave no entry
    again = data(plog, A, 2)
    abort_again = end(plog, A, commit=False)  # nothing else open: the marker's offset + 1
    end(plog, C, commit=False)  # a marker of a transaction without data here: no entry
    index = plog.active_segment.txn_index
    assert index.entries() == [AbortedTxn(A, a, abort_a, b),
                               AbortedTxn(A, again, abort_again, abort_again + 1)]
    assert b == 2 and index_files(plog) == {
        f"{0:020d}.txnindex": struct.pack(">hqqqq", 0, A, 0, 4, 2)
        + struct.pack(">hqqqq", 0, A, again, abort_again, abort_again + 1)}


def test_clients_cannot_write_control_batches(open_log: OpenLog) -> None:
    plog = open_log()
    data(plog, A, 0)
    for batches in ([marker_batch(A, commit=False)],
                    [txn_batch(A, 2), marker_batch(A, commit=False)]):
        with pytest.raises(InvalidRecordError, match="control records"):
            plog.append(payload(*batches), leader_epoch=0)
    assert plog.log_end_offset == 2 and plog.producer_state.ongoing_transactions() == {A: 0}


def test_the_entry_goes_to_the_segment_of_the_marker(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=300)
    first = data(plog, A, 0)
    for _ in range(6):
        plain(plog)
    abort = end(plog, A, commit=False)
    assert len(plog.segments) > 2
    holding = [s for s in plog.segments if len(s.txn_index)]
    assert [s.base_offset for s in holding] == [plog.active_segment.base_offset]
    assert plog.aborted_transactions(first, first + 1) == [AbortedTxn(A, first, abort,
                                                                      abort + 1)]
    assert len(index_files(plog)) == 1  # segments without aborts have no file


def test_follower_appends_build_the_same_index(open_log: OpenLog, tmp_path: Path) -> None:
    leader = open_log(segment_bytes=400)
    data(leader, A, 0)
    data(leader, B, 0)
    end(leader, B, commit=False)
    plain(leader)
    end(leader, A, commit=False)
    follower = open_log(directory=tmp_path / "follower-0", segment_bytes=400)
    follower.append_as_follower(memoryview(bytearray(read_all(leader))))
    assert follower.aborted_transactions(0, follower.log_end_offset) == leader.aborted_transactions(
        0, leader.log_end_offset) == [AbortedTxn(B, 2, 4, 0), AbortedTxn(A, 0, 8, 9)]


# -- reads ------------------------------------------------------------------------------
def test_read_committed_reads_carry_the_overlapping_aborts(open_log: OpenLog) -> None:
    plog = open_log()
    a = data(plog, A, 0)  # 0-1
    abort_a = end(plog, A, commit=False)  # 2
    plain(plog)  # 3-5
    b = data(plog, B, 0)  # 6-7
    end(plog, B, commit=False)  # 8
    leo = plog.log_end_offset

    def aborted(offset: int, max_bytes: int = 1 << 20) -> list[tuple[int, int]] | None:
        return plog.read(offset, max_bytes, upper_bound=leo,
                         aborted_transactions=True).aborted_transactions

    assert aborted(0) == [(A, a), (B, b)]
    assert aborted(abort_a + 1) == [(B, b)]  # A's marker is before the fetch offset
    first_batch = plog.read(0, 1, upper_bound=leo).size
    assert aborted(0, first_batch) == [(A, a)]  # the read ends at offset 2: B starts later
    assert aborted(leo) == []  # nothing to read, but read_committed gets an empty list
    assert plog.read(0, 1 << 20, upper_bound=leo).aborted_transactions is None
    # Bounded by the caller (the last stable offset): B's records are not returned.
    assert plog.read(0, 1 << 20, upper_bound=b,
                     aborted_transactions=True).aborted_transactions == [(A, a)]


# -- recovery, truncation, retention ----------------------------------------------------
def _mixed_log(plog: Log) -> None:
    """Aborts in several segments, one of them while C's transaction (from offset 2) is open
    across segment boundaries."""
    data(plog, A, 0)
    data(plog, C, 0)
    for i in range(4):
        plain(plog)
        data(plog, B, 2 * i)
        end(plog, B, commit=i % 2 == 1)
    end(plog, A, commit=False)
    data(plog, C, 2)
    end(plog, C, commit=False)
    plain(plog)


@pytest.mark.parametrize("damage", ["none", "deleted", "garbage", "extra entry"])
def test_crash_recovery_rebuilds_every_recovered_index(open_log: OpenLog, damage: str) -> None:
    plog = open_log(segment_bytes=500)
    _mixed_log(plog)
    before = index_files(plog)
    assert len(before) >= 2 and len(plog.segments) > 3
    for name in before:
        path = plog.directory / name
        if damage == "deleted":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(os.urandom(50))
        elif damage == "extra entry":  # sound, but names a transaction that was not aborted
            with open(path, "ab") as f:
                f.write(struct.pack(">hqqqq", 0, 99, 0, 1 << 40, 1 << 40))
    again = open_log(segment_bytes=500)  # unclean: recovered from the recovery point (0)
    assert index_files(again) == before
    assert again.aborted_transactions(0, again.log_end_offset) == plog.aborted_transactions(
        0, plog.log_end_offset)


def test_recovery_from_the_middle_starts_from_a_snapshot_below_it(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=500)
    _mixed_log(plog)
    before = index_files(plog)
    last = plog.segments[-2]  # A's and C's aborts, with C's transaction open since offset 2
    plog.close()
    for name in before:
        (plog.directory / name).unlink()
    again = open_log(segment_bytes=500, recovery_point=last.base_offset)
    rebuilt = index_files(again)
    assert {n: b for n, b in before.items() if n >= last.txn_index_path.name} == rebuilt
    lso = {t.producer_id: t.last_stable_offset for t in last.txn_index.entries()}
    assert lso[A] == 2  # C's open transaction, found by replaying from before it began


def test_a_corrupt_index_after_a_clean_shutdown_is_rebuilt(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=500)
    _mixed_log(plog)
    before = index_files(plog)
    plog.close()
    name = sorted(before)[0]
    (plog.directory / name).write_bytes(struct.pack(">hqqqq", 3, 0, 0, 0, 0))
    again = open_log(segment_bytes=500, clean_shutdown=True)
    assert index_files(again) == before


def test_truncation_and_retention_take_the_index_along(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=500)
    _mixed_log(plog)
    entries = plog.aborted_transactions(0, plog.log_end_offset)
    c_abort = entries[-1].last_offset
    plog.truncate_to(c_abort)
    assert plog.aborted_transactions(0, plog.log_end_offset) == entries[:-1]
    plog.truncate_to(entries[0].last_offset + 1)
    assert plog.aborted_transactions(0, plog.log_end_offset) == entries[:1]
    assert len(index_files(plog)) == 1
    holder = plog.directory / next(iter(index_files(plog)))
    plog.truncate_to(entries[0].last_offset)
    assert index_files(plog) == {holder.name: b""}  # cut like Kafka's, not removed
    plog.roll()
    plog.delete_records_before(plog.log_end_offset)
    plog.apply_retention(0)
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert index_files(plog) == {}
