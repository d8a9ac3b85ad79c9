"""The modules Log delegates to, tested on their own: payload checks, loading steps,
retention selection and the graveyard, lookups by time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.common.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from strom.protocol.records.batch import iter_batches
from strom.storage import log_timestamps
from strom.storage.files import parse_partition_dir
from strom.storage.log import Log, LogSettings
from strom.storage.log_append import check_client_batches, check_replicated_batches
from strom.storage.log_loader import recovery_start, scan_directory
from strom.storage.log_retention import (
    Graveyard,
    below_log_start,
    expired_by_time,
    over_size,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, make_batch, payload, topic_config, values


def _settings(**overrides: object) -> LogSettings:
    return LogSettings(topic_config(**overrides))


def _filled(open_log: OpenLog, segments: int) -> Log:
    """A log with ``segments`` segments of one 3-record batch each (timestamps 0, 1000, ...)."""
    plog = open_log()
    for i in range(segments):
        stamp = NOW + 1000 * i
        plog.append(payload(make_batch(values(3), timestamps=[stamp] * 3)), leader_epoch=0,
                    now_ms=stamp)
        if i < segments - 1:
            plog.roll(stamp)
    return plog


def test_client_batch_size_checks() -> None:
    settings = _settings()
    batches = make_batch(values(2)) + make_batch(values(3), producer_id=4, producer_epoch=0,
                                                 base_sequence=0)
    headers = iter_batches(memoryview(batches))
    assert check_client_batches(headers, len(batches), settings) == (5, True)
    assert check_client_batches(headers[:1], 100, settings) == (2, False)
    with pytest.raises(RecordListTooLargeError):
        check_client_batches(headers, 2**31, settings)
    with pytest.raises(MessageTooLargeError):
        check_client_batches(headers, len(batches), _settings(max_message_bytes=70))


def test_replicated_batches_increase_from_the_log_end_gaps_allowed() -> None:
    data = make_batch(values(2), base_offset=10) + make_batch(values(1), base_offset=12)
    headers = iter_batches(memoryview(data))
    assert check_replicated_batches(headers, 10, "t-0") == 13
    with pytest.raises(OffsetOutOfRangeError, match="below the log end 11 of t-0"):
        check_replicated_batches(headers, 11, "t-0")
    # a compacted leader's batches: gaps before the first and between batches
    gap = make_batch(values(2), base_offset=10) + make_batch(values(1), base_offset=13)
    assert check_replicated_batches(iter_batches(memoryview(gap)), 4, "t-0") == 14
    overlap = make_batch(values(2), base_offset=10) + make_batch(values(1), base_offset=11)
    with pytest.raises(InvalidRecordError, match="out of order"):
        check_replicated_batches(iter_batches(memoryview(overlap)), 10, "t-0")


def test_recovery_start_and_directory_scan(tmp_path: Path) -> None:
    assert recovery_start([0, 10, 20], 15) == 10
    assert recovery_start([0, 10, 20], 20) == 20
    assert recovery_start([5], 0) == -1 and recovery_start([], 7) == -1
    for name in ("00000000000000000000.log", "00000000000000000000.index",
                 "00000000000000000030.log", "00000000000000000010.index",
                 "00000000000000000010.timeindex", "leftover.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert scan_directory(tmp_path) == [0, 30]
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000030.log",
    ]


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    for bad in ("topic", "-1", "topic-x"):
        with pytest.raises(ValueError):
            parse_partition_dir(bad)


def test_retention_selection_never_takes_the_active_segment(open_log: OpenLog) -> None:
    plog = _filled(open_log, 4)
    segments, bases = plog.segments, [s.base_offset for s in plog.segments]
    assert bases == [0, 3, 6, 9]
    # Largest timestamps NOW, NOW+1000, NOW+2000, NOW+3000.
    assert expired_by_time(segments, NOW + 1500, 1000) == segments[:1]
    assert expired_by_time(segments, NOW + 10**9, 1000) == segments[:3]
    size = segments[0].size
    assert over_size(segments, 4 * size) == []
    assert over_size(segments, 3 * size - 1) == segments[:1]
    assert over_size(segments, 0) == segments[:3]
    assert below_log_start(segments, bases, 5) == segments[:1]
    assert below_log_start(segments, bases, 6) == segments[:2]
    assert below_log_start(segments, bases, 100) == segments[:3]


def test_graveyard_closes_after_the_deadline(open_log: OpenLog) -> None:
    plog = _filled(open_log, 3)
    first, second = plog.segments[:2]
    graveyard = Graveyard()
    graveyard.bury([first], 10.0, unlink=True)
    graveyard.bury([second], 20.0, unlink=False)
    assert not first.log_path.exists() and second.log_path.exists()
    assert first.read_bytes(0, 10)  # still open: in-flight reads finish
    graveyard.close_expired(10.0)
    assert first.closed and not second.closed
    graveyard.close_all()
    assert second.closed


def test_lookups_by_time(open_log: OpenLog) -> None:
    plog = _filled(open_log, 3)
    segments = plog.segments
    assert log_timestamps.offset_for_timestamp(segments, 0, NOW + 1) == (3, NOW + 1000, 0)
    assert log_timestamps.offset_for_timestamp(segments, 7, NOW) == (7, NOW + 2000, 0)
    assert log_timestamps.offset_for_timestamp(segments, 0, NOW + 5000) is None
    assert log_timestamps.max_timestamp(segments, 0) == (6, NOW + 2000, 0)
    assert log_timestamps.max_timestamp(segments, 9) is None
