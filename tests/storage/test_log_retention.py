from __future__ import annotations

import os

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import OffsetOutOfRangeError
from strom.storage.log import FileRegion, Log
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, batch_offsets, make_batch, payload, read_all, values


def fill(plog: Log, batches: int, *, ts_step: int = 0, records: int = 2) -> None:
    for i in range(batches):
        ts = NOW + i * ts_step
        plog.append(payload(make_batch(values(records, size=30), timestamps=[ts] * records)),
                    leader_epoch=0, now_ms=ts)


def test_retention_by_time_deletes_whole_old_segments(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400, retention_ms=10_000)
    fill(plog, 30, ts_step=1000)
    segments = plog.segments
    assert len(segments) > 4
    now = NOW + 30_000
    expected = [s for s in segments[:-1] if now - s.max_timestamp > 10_000]
    freed = plog.apply_retention(now)
    assert freed == sum(s.size for s in expected) > 0
    remaining = plog.segments
    assert remaining == segments[len(expected):]
    assert plog.log_start_offset == remaining[0].base_offset
    for s in expected:
        assert not s.log_path.exists() and not s.index_path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100, upper_bound=plog.log_end_offset)
    assert batch_offsets(read_all(plog))[0][0] == plog.log_start_offset
    # The active segment is never deleted, however old.
    assert plog.apply_retention(now + 10**9) > 0
    assert len(plog.segments) == 1 and plog.log_start_offset == plog.active_segment.base_offset


def test_retention_by_size(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=500, retention_bytes=1200)
    fill(plog, 40)
    sizes = [s.size for s in plog.segments]
    total = sum(sizes)
    freed = plog.apply_retention(NOW)
    assert plog.size_in_bytes() == total - freed
    assert plog.size_in_bytes() - plog.segments[0].size < 1200 <= plog.size_in_bytes()
    assert freed == sum(sizes[: len(sizes) - len(plog.segments)])


def test_retention_respects_cleanup_policy(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400, retention_ms=1, cleanup_policy="compact")
    for i in range(20):  # a compacted topic only accepts keyed records
        plog.append(payload(make_batch(values(2, size=30), keys=[b"k%d" % i, b"j%d" % i])),
                    leader_epoch=0, now_ms=NOW)
    assert len(plog.segments) > 1
    assert plog.apply_retention(NOW + 10**6) == 0


def test_deleted_segments_stay_readable_until_the_delay(
    open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=400, retention_ms=0, file_delete_delay_ms=1000)
    fill(plog, 10)
    region = plog.read(0, 100, upper_bound=plog.log_end_offset, inline_below=0).regions[0]
    assert isinstance(region, FileRegion)
    first = plog.segments[0]
    plog.apply_retention(NOW + 10)
    assert not first.log_path.exists() and not first.closed
    assert len(os.pread(region.file.fileno(), region.size, region.position)) == region.size
    clock.advance(1001)
    plog.apply_retention(NOW + 10)
    assert first.closed


def test_delete_records_before(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400)
    fill(plog, 20)
    segments = plog.segments
    target = segments[2].base_offset + 1
    assert plog.delete_records_before(target) == target
    assert plog.log_start_offset == target
    assert plog.segments == segments[2:]  # wholly-below segments go at once
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(target - 1, 100, upper_bound=plog.log_end_offset)
    # Reading at the new start returns the batch holding it.
    base, last = batch_offsets(read_all(plog))[0]
    assert base <= target <= last
    assert plog.delete_records_before(target - 5) == target  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(plog.log_end_offset + 1)
    assert plog.delete_records_before(plog.log_end_offset) == plog.log_end_offset
    assert plog.read(plog.log_end_offset, 100, upper_bound=plog.log_end_offset).regions == []


def test_truncate_to(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400, index_interval_bytes=50)
    for epoch in range(4):
        for _ in range(5):
            plog.append(payload(make_batch(values(2, size=30))), leader_epoch=epoch)
    assert plog.leader_epochs.entries() == [(0, 0), (1, 10), (2, 20), (3, 30)]
    before = read_all(plog)
    plog.flush()
    plog.truncate_to(16)  # a batch boundary (batches hold offset pairs)
    assert plog.log_end_offset == plog.recovery_point == 16
    after = read_all(plog)
    assert after == before[: len(after)]
    assert batch_offsets(after)[-1] == (14, 15)
    assert plog.leader_epochs.entries() == [(0, 0), (1, 10)]
    plog.truncate_to(13)  # mid-batch: the whole batch [12, 13] goes, the LEO is 13
    assert plog.log_end_offset == 13
    assert batch_offsets(read_all(plog))[-1] == (10, 11)
    plog.truncate_to(10)
    assert plog.log_end_offset == 10
    assert plog.leader_epochs.entries() == [(0, 0)]
    assert all(s.base_offset <= 10 for s in plog.segments)
    result = plog.append(payload(make_batch(values(1))), leader_epoch=9)
    assert result.base_offset == 10
    assert batch_offsets(read_all(plog))[-1] == (10, 10)
    assert plog.leader_epochs.entries() == [(0, 0), (9, 10)]


def test_truncate_below_log_start_starts_over(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400)
    fill(plog, 10)
    plog.delete_records_before(8)
    plog.truncate_to(5)
    assert (plog.log_start_offset, plog.log_end_offset) == (5, 5)
    assert [s.base_offset for s in plog.segments] == [5]
    assert plog.append(payload(make_batch(values(1))), leader_epoch=0).base_offset == 5


def test_truncated_log_reopens_consistently(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400, index_interval_bytes=50)
    fill(plog, 20)
    plog.truncate_to(17)
    expected = read_all(plog)
    plog.flush()
    plog.close()
    again = open_log(segment_bytes=400, index_interval_bytes=50)  # recovery path
    assert read_all(again) == expected and again.log_end_offset == 16
