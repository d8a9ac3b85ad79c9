from __future__ import annotations

import pytest

from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, make_batch, payload, values


def brute_force(records: list[tuple[int, int]], target: int) -> tuple[int, int] | None:
    for offset, ts in records:
        if ts >= target:
            return offset, ts
    return None


def test_offset_for_timestamp_is_exact_per_record(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=400, index_interval_bytes=60)
    records: list[tuple[int, int]] = []
    # Timestamps go up and down inside batches and across batches and segments.
    pattern = [50, 10, 30, 70, 20, 90, 40, 60, 80, 5, 100, 15]
    offset = 0
    for i in range(30):
        stamps = [NOW + pattern[(i * 3 + j) % len(pattern)] * 10 + i for j in range(1 + i % 3)]
        plog.append(payload(make_batch(values(len(stamps)), timestamps=stamps)), leader_epoch=i)
        for ts in stamps:
            records.append((offset, ts))
            offset += 1
    assert len(plog.segments) > 3
    for target in range(NOW - 5, NOW + 1100, 7):
        expected = brute_force(records, target)
        got = plog.offset_for_timestamp(target)
        if expected is None:
            assert got is None
        else:
            assert got is not None and got[:2] == expected, target


def test_offset_for_timestamp_reports_leader_epoch_and_respects_log_start(
    open_log: OpenLog,
) -> None:
    plog = open_log()
    plog.append(payload(make_batch(values(2), timestamps=[NOW + 10, NOW + 20])), leader_epoch=3)
    plog.append(payload(make_batch(values(2), timestamps=[NOW + 5, NOW + 30])), leader_epoch=4)
    assert plog.offset_for_timestamp(NOW + 15) == (1, NOW + 20, 3)
    assert plog.offset_for_timestamp(NOW + 25) == (3, NOW + 30, 4)
    assert plog.offset_for_timestamp(NOW + 31) is None
    plog.delete_records_before(2)
    assert plog.offset_for_timestamp(NOW) == (2, NOW + 5, 4)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_offset_for_timestamp_in_compressed_batches(open_log: OpenLog, codec: int) -> None:
    plog = open_log()
    stamps = [NOW + 40, NOW + 10, NOW + 50, NOW + 20]
    plog.append(payload(make_batch(values(4), timestamps=stamps, codec=codec)), leader_epoch=0)
    assert plog.offset_for_timestamp(NOW + 15) == (0, NOW + 40, 0)
    assert plog.offset_for_timestamp(NOW + 45) == (2, NOW + 50, 0)
    assert plog.max_timestamp() == (2, NOW + 50, 0)


def test_max_timestamp(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=300)
    assert plog.max_timestamp() is None
    plog.append(payload(make_batch(values(3), timestamps=[NOW + 1, NOW + 9, NOW + 2])),
                leader_epoch=1)
    for i in range(6):
        plog.append(payload(make_batch(values(2), timestamps=[NOW + 3, NOW + 9])), leader_epoch=2)
        del i
    assert len(plog.segments) > 1
    assert plog.max_timestamp() == (1, NOW + 9, 1)  # the earliest record with the max
    plog.append(payload(make_batch(values(2), timestamps=[NOW + 99, NOW])), leader_epoch=5)
    assert plog.max_timestamp() == (plog.log_end_offset - 2, NOW + 99, 5)


def test_max_timestamp_survives_reopen(open_log: OpenLog) -> None:
    plog = open_log(segment_bytes=300, index_interval_bytes=10**6)
    for i in range(8):
        plog.append(payload(make_batch(values(2), timestamps=[NOW + i, NOW + 50 - i])),
                    leader_epoch=0)
    expected = plog.max_timestamp()
    plog.close()
    reopened = open_log(clean_shutdown=True, segment_bytes=300, index_interval_bytes=10**6)
    assert reopened.max_timestamp() == expected == (1, NOW + 50, 0)
    assert reopened.offset_for_timestamp(NOW + 49) == (1, NOW + 50, 0)


def test_log_append_time_records_share_the_batch_time(open_log: OpenLog) -> None:
    plog = open_log(message_timestamp_type="LogAppendTime")
    plog.append(payload(make_batch(values(3), timestamps=[1, 2, 3])), leader_epoch=0,
                now_ms=NOW)
    plog.append(payload(make_batch(values(2), timestamps=[9, 1])), leader_epoch=0,
                now_ms=NOW + 10)
    assert plog.offset_for_timestamp(0) == (0, NOW, 0)
    assert plog.offset_for_timestamp(NOW + 1) == (3, NOW + 10, 0)
    assert plog.max_timestamp() == (3, NOW + 10, 0)
