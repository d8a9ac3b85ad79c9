from __future__ import annotations

import os

from strom.storage import dump
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, make_batch, payload, values


def test_dump_segment_lists_batches(open_log: OpenLog) -> None:
    plog = open_log(index_interval_bytes=50)
    plog.append(payload(make_batch(values(3), timestamps=[NOW, NOW + 5, NOW + 2])), leader_epoch=2)
    plog.append(payload(make_batch(values(2), producer_id=9, producer_epoch=1, base_sequence=0,
                                   codec=1)), leader_epoch=3)
    path = plog.active_segment.log_path
    result = dump.dump_segment(path)
    assert result.problem is None and result.valid_bytes == result.file_size
    first, second = result.batches
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (first.base_timestamp, first.max_timestamp) == (NOW, NOW + 5)
    assert first.partition_leader_epoch == 2 and first.codec == "none" and first.crc_valid
    assert (second.base_offset, second.producer_id, second.producer_epoch) == (3, 9, 1)
    assert second.codec == "gzip" and second.position == first.size
    assert dump.base_offset_of(path) == 0


def test_dump_reports_corruption(open_log: OpenLog) -> None:
    plog = open_log()
    for _ in range(3):
        plog.append(payload(make_batch(values(2))), leader_epoch=0)
    path = plog.active_segment.log_path
    sizes = [b.size for b in dump.iter_segment_batches(path)]
    with open(path, "r+b") as f:
        f.seek(sizes[0] + sizes[1] - 1)
        f.write(b"\xee")
        f.truncate(sum(sizes) - 4)
    result = dump.dump_segment(path)
    assert [b.crc_valid for b in result.batches] == [True, False]
    assert result.valid_bytes == sizes[0]
    assert result.problem is not None and "CRC" in result.problem


def test_index_entries_and_verification(open_log: OpenLog) -> None:
    plog = open_log(index_interval_bytes=50)
    for i in range(20):
        plog.append(payload(make_batch(values(2), timestamps=[NOW + i, NOW + 100 - i])),
                    leader_epoch=0)
    segment = plog.active_segment
    plog.flush()  # index entries reach their files when the log is flushed
    entries = dump.offset_index_entries(segment.index_path)
    assert [(e.offset, e.position) for e in entries] == segment.offset_index.entries()
    times = dump.time_index_entries(segment.time_index_path)
    assert [(t.timestamp, t.offset) for t in times] == segment.time_index.entries()
    assert dump.verify_offset_index(segment.log_path).ok
    assert dump.verify_time_index(segment.log_path).ok
    # Point an entry into the middle of a batch.
    raw = bytearray(segment.index_path.read_bytes())
    raw[-1] += 1
    segment.index_path.write_bytes(bytes(raw))
    check = dump.verify_offset_index(segment.log_path)
    assert not check.ok and check.entries == len(entries)
    os.remove(segment.time_index_path)
    assert not dump.verify_time_index(segment.log_path).ok
