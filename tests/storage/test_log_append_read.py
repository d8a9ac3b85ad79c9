from __future__ import annotations

import struct

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from strom.protocol.records.batch import iter_batches, parse_header
from strom.storage.log import FileRegion, Log
from strom.storage.segment import INLINE_READ_BYTES
from tests.storage.conftest import OpenLog
from tests.storage.helpers import (
    NOW,
    batch_offsets,
    make_batch,
    marker_batch,
    payload,
    read_all,
    txn_batch,
    values,
)


def region_bytes(plog: Log, offset: int, max_bytes: int, **kw: object) -> bytes:
    kw.setdefault("upper_bound", plog.log_end_offset)
    result = plog.read(offset, max_bytes, **kw)  # type: ignore[arg-type]
    assert result.size == len(result.to_bytes())
    return result.to_bytes()


def test_append_assigns_offsets_and_patches_in_place(open_log: OpenLog) -> None:
    plog = open_log()
    buf = payload(make_batch(values(3)), make_batch(values(2)))
    result = plog.append(buf, leader_epoch=7)
    assert (result.base_offset, result.last_offset, result.record_count) == (0, 4, 5)
    assert not result.duplicate and result.log_append_time == -1
    headers = iter_batches(buf)
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (3, 7)]
    assert plog.log_end_offset == 5
    result = plog.append(payload(make_batch(values(1))), leader_epoch=7)
    assert result.base_offset == result.last_offset == 5
    stored = region_bytes(plog, 0, 1 << 20)
    assert batch_offsets(stored) == [(0, 2), (3, 4), (5, 5)]
    assert iter_batches(stored)  # CRCs still valid after patching


def test_round_trip_across_many_rolls(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=1024, index_interval_bytes=100)
    sent = []
    for i in range(300):
        batch = make_batch(values(1 + i % 4, size=20, prefix=f"b{i}-"))
        plog.append(payload(batch), leader_epoch=0)
        sent.append(bytes(batch[16:]))  # all but base offset, length, leader epoch
    assert len(plog.segments) > 20
    for segment in plog.segments:
        assert segment.size <= 1024
    data = read_all(plog)
    stored = []
    pos = 0
    while pos < len(data):
        size = parse_header(data, pos).size
        stored.append(data[pos + 16 : pos + size])
        pos += size
    assert stored == sent
    # Reading from every offset returns the batch that holds it first.
    ranges = batch_offsets(data)
    for base, last in ranges[::7]:
        for offset in (base, last):
            got = batch_offsets(region_bytes(plog, offset, 1 << 20))
            assert got[0] == (base, last)


def test_read_bounds_and_errors(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append(payload(make_batch(values(5))), leader_epoch=0)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(6, 1000, upper_bound=plog.log_end_offset)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 1000, upper_bound=plog.log_end_offset)
    empty = plog.read(5, 1000, upper_bound=plog.log_end_offset)
    assert empty.regions == [] and empty.size == 0 and empty.log_end_offset == 5
    assert plog.read(0, 1000, upper_bound=0).regions == []
    # Offset inside a batch: the whole batch is returned.
    assert batch_offsets(region_bytes(plog, 3, 1000)) == [(0, 4)]


def test_read_max_bytes_cuts_at_batch_boundaries(open_log: OpenLog) -> None:
    plog = open_log(index_interval_bytes=200)
    sizes = []
    for i in range(50):
        batch = make_batch(values(1 + i % 3, size=30))
        sizes.append(len(batch))
        plog.append(payload(batch), leader_epoch=0)
    for max_bytes in (sizes[0], sizes[0] + 1, 500, 1000, 2345):
        data = region_bytes(plog, 0, max_bytes)
        assert len(data) <= max_bytes
        whole = batch_offsets(data)
        assert sum(sizes[: len(whole)]) == len(data)  # only whole batches
        assert len(data) + sizes[len(whole)] > max_bytes  # and as many as fit


def test_read_min_one_returns_oversized_first_batch(open_log: OpenLog) -> None:
    plog = open_log()
    big = make_batch(values(10, size=100))
    plog.append(payload(big), leader_epoch=0)
    plog.append(payload(make_batch(values(1))), leader_epoch=0)
    data = region_bytes(plog, 0, 50)
    assert len(data) == len(big) and batch_offsets(data) == [(0, 9)]
    result = plog.read(0, 50, min_one=False, upper_bound=plog.log_end_offset)
    assert result.regions == [] and result.size == 0


def test_read_upper_bound_stops_before_uncommitted_batches(open_log: OpenLog) -> None:
    plog = open_log()
    for _ in range(4):
        plog.append(payload(make_batch(values(2))), leader_epoch=0)
    data = region_bytes(plog, 0, 1 << 20, upper_bound=4)
    assert batch_offsets(data) == [(0, 1), (2, 3)]
    assert batch_offsets(region_bytes(plog, 2, 1 << 20, upper_bound=6))[-1] == (4, 5)
    assert plog.read(6, 1000, upper_bound=6).regions == []


def test_read_stays_within_one_segment(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=300)
    for _ in range(10):
        plog.append(payload(make_batch(values(2, size=40))), leader_epoch=0)
    first = plog.segments[0]
    result = plog.read(0, 1 << 20, upper_bound=plog.log_end_offset)
    assert result.regions == [first.read_bytes(0, first.size)] and result.size == first.size


def test_small_reads_are_bytes_and_large_ones_file_regions(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=1 << 20)
    for _ in range(20):
        plog.append(payload(make_batch(values(8, size=1000))), leader_epoch=0)
    small = plog.read(0, 20_000, upper_bound=plog.log_end_offset)
    assert isinstance(small.regions[0], bytes) and 8000 < small.size <= 20_000
    large = plog.read(0, 1 << 20, upper_bound=plog.log_end_offset)
    region = large.regions[0]
    assert isinstance(region, FileRegion) and region.size == large.size > INLINE_READ_BYTES
    assert region.lease is not None and region.lease.file is region.file
    assert region.file.name == plog.active_segment.log_path
    assert large.to_bytes().startswith(small.to_bytes())
    forced = plog.read(0, 20_000, upper_bound=plog.log_end_offset, inline_below=0)
    assert isinstance(forced.regions[0], FileRegion) and forced.to_bytes() == small.to_bytes()


def test_validation_rejects_whole_payload(open_log: OpenLog) -> None:
    plog = open_log(max_message_bytes=500, segment_bytes=2000)
    good = make_batch(values(1))
    bad_crc = make_batch(values(1))
    bad_crc[-1] ^= 0xFF
    v1 = make_batch(values(1))
    v1[16] = 1
    empty = make_batch([])
    cases: list[tuple[bytes | bytearray, type[Exception]]] = [
        (good + bad_crc, CorruptMessageError),
        (good + v1, UnsupportedForMessageFormatError),
        (good + empty, InvalidRecordError),
        (good + make_batch(values(1, size=600)), MessageTooLargeError),
        (good * 30, RecordListTooLargeError),
        (good + good[:30], CorruptMessageError),
        (b"", InvalidRecordError),
    ]
    for buf, error in cases:
        with pytest.raises(error):
            plog.append(payload(buf), leader_epoch=0)
    assert plog.log_end_offset == 0 and plog.size_in_bytes() == 0


def test_timestamp_validation(open_log: OpenLog) -> None:
    plog = open_log(message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=5000)
    plog.append(payload(make_batch(values(2), timestamps=[NOW - 5000, NOW + 1000])),
                leader_epoch=0)
    with pytest.raises(InvalidTimestampError):
        plog.append(payload(make_batch(values(1), timestamps=[NOW + 1001])), leader_epoch=0)
    with pytest.raises(InvalidTimestampError):
        plog.append(payload(make_batch(values(1), timestamps=[NOW - 5001])), leader_epoch=0)
    assert plog.log_end_offset == 2


def test_log_append_time(open_log: OpenLog, clock: object) -> None:
    plog = open_log(message_timestamp_type="LogAppendTime")
    old = make_batch(values(2), timestamps=[1, 2])  # never rejected: the broker sets the time
    result = plog.append(payload(old), leader_epoch=0, now_ms=NOW + 42)
    assert result.log_append_time == NOW + 42
    stored = region_bytes(plog, 0, 1000)
    header = iter_batches(stored)[0]  # CRC recomputed
    assert header.is_log_append_time and header.max_timestamp == NOW + 42


def test_readonly_buffer_is_copied(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append(payload(make_batch(values(1))), leader_epoch=0)
    result = plog.append(memoryview(bytes(make_batch(values(1)))), leader_epoch=0)
    assert result.base_offset == 1
    assert batch_offsets(region_bytes(plog, 1, 1000)) == [(1, 1)]


def test_roll_by_time_and_index_full(open_log: OpenLog) -> None:
    plog = open_log(segment_ms=1000)
    plog.append(payload(make_batch(values(1))), leader_epoch=0, now_ms=NOW)
    plog.append(payload(make_batch(values(1))), leader_epoch=0, now_ms=NOW + 1000)
    assert len(plog.segments) == 1
    plog.append(payload(make_batch(values(1))), leader_epoch=0, now_ms=NOW + 1001)
    assert [s.base_offset for s in plog.segments] == [0, 2]

    full = open_log(directory=plog.directory.with_name("full-0"), segment_index_bytes=16,
                    index_interval_bytes=1)
    for _ in range(10):
        full.append(payload(make_batch(values(1))), leader_epoch=0)
    assert len(full.segments) > 1
    assert all(len(s.offset_index) <= 3 for s in full.segments)


def test_index_lookups_are_exact(open_log: OpenLog) -> None:
    plog = open_log(index_interval_bytes=150)
    for i in range(40):
        plog.append(payload(make_batch(values(1 + i % 5, size=25))), leader_epoch=0)
    segment = plog.active_segment
    entries = segment.offset_index.entries()
    assert len(entries) > 5
    for batch_last, position in entries:
        found = segment.translate_offset(batch_last)
        assert found is not None
        assert found[0] == position and found[1].last_offset == batch_last
    data = read_all(plog)
    pos = 0
    for base, last in batch_offsets(data):
        for offset in range(base, last + 1):
            found = segment.translate_offset(offset)
            assert found is not None and found[0] == pos
        pos += parse_header(data, pos).size
    assert segment.translate_offset(plog.log_end_offset) is None


def test_flush_bookkeeping(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(flush_messages=3)
    assert plog.unflushed_messages == 0 and not plog.needs_flush()
    plog.append(payload(make_batch(values(2))), leader_epoch=0)
    assert plog.unflushed_messages == 2 and not plog.needs_flush()
    plog.append(payload(make_batch(values(1))), leader_epoch=0)
    assert plog.needs_flush()
    clock.advance(250)
    assert plog.time_since_flush_ms() == 250
    plog.flush(up_to=2)
    assert plog.recovery_point == 2 and plog.unflushed_messages == 1
    assert plog.time_since_flush_ms() == 0 and plog.last_flush_ms == clock.now_ms()
    plog.flush()
    assert plog.recovery_point == 3 and not plog.needs_flush()


def test_follower_append_keeps_the_leaders_offsets_and_epochs(open_log: OpenLog) -> None:
    leader = open_log()
    leader.append(payload(make_batch(values(3))), leader_epoch=3)
    leader.append(payload(make_batch(values(2), producer_id=7, producer_epoch=0,
                                     base_sequence=0)), leader_epoch=5)
    fetched = region_bytes(leader, 0, 1 << 20)
    follower = open_log(directory=leader.directory.parent / "follower-0")
    result = follower.append_as_follower(memoryview(bytearray(fetched)))
    assert (result.base_offset, result.last_offset, result.record_count) == (0, 4, 5)
    assert follower.log_end_offset == 5
    assert follower.leader_epochs.entries() == [(3, 0), (5, 3)]
    assert region_bytes(follower, 0, 1 << 20) == fetched  # byte for byte, epochs included
    assert follower.producer_state.producers[7].last_seq == 1
    # A batch that does not start at the follower's log end is refused, nothing appended.
    with pytest.raises(OffsetOutOfRangeError):
        follower.append_as_follower(memoryview(bytearray(fetched)))
    assert follower.log_end_offset == 5


def at(batch: bytes | bytearray, base_offset: int, leader_epoch: int = 4) -> bytearray:
    """``batch`` placed at ``base_offset`` by leader epoch ``leader_epoch`` (neither field is
    covered by the CRC), as a leader's log holds it."""
    placed = bytearray(batch)
    struct.pack_into(">q", placed, 0, base_offset)
    struct.pack_into(">i", placed, 12, leader_epoch)
    return placed


def test_follower_append_keeps_the_gaps_of_a_compacted_leader(open_log: OpenLog) -> None:
    """A cleaned leader log has offset gaps; the follower appends its batches at the leader's
    offsets as long as they increase (Kafka's rule), across rolls, and recovers them so."""
    far = 2**31 + 50  # past a 32-bit relative offset from every earlier offset
    batches = [at(make_batch(values(2)), 0), at(txn_batch(7, 0, 2), 5),
               at(bytes(marker_batch(7, commit=False)), 9), at(make_batch(values(1)), 1000),
               at(make_batch(values(2)), far)]
    follower = open_log(segment_bytes=200)
    for batch in batches[:3]:
        follower.append_as_follower(payload(batch))
    result = follower.append_as_follower(payload(*batches[3:]))  # two batches, one payload
    assert (result.base_offset, result.last_offset) == (1000, far + 1)
    expected = b"".join(bytes(b) for b in batches)

    def check(plog: Log) -> None:
        assert plog.log_end_offset == far + 2
        assert read_all(plog) == expected
        assert [b for b, _ in batch_offsets(read_all(plog))] == [0, 5, 9, 1000, far]
        assert plog.producer_state.producers[7].last_seq == 1
        assert plog.read(5, 1 << 20, upper_bound=far + 2,
                         aborted_transactions=True).aborted_transactions == [(7, 5)]
        assert plog.read(3, 1 << 20, upper_bound=far + 2).to_bytes().startswith(
            bytes(batches[1]))  # an offset in a gap reads the next batch
        assert plog.leader_epochs.entries() == [(4, 0)]

    check(follower)
    directory = follower.directory
    follower.close()
    for path in directory.glob("*.index"):
        path.unlink()  # rebuilt from the segments, gaps and all
    reopened = open_log(directory=directory, segment_bytes=200)
    check(reopened)
    # Offsets below the log end, or not increasing within a payload, are refused whole.
    with pytest.raises(OffsetOutOfRangeError):
        reopened.append_as_follower(payload(at(make_batch(), far + 1)))
    with pytest.raises(InvalidRecordError):
        reopened.append_as_follower(payload(at(make_batch(values(2)), far + 10),
                                            at(make_batch(), far + 11)))
    assert reopened.log_end_offset == far + 2
