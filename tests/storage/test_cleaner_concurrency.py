"""The cleaner thread against the event-loop side: appends, reads, retention, close."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.protocol.records.reader import decode_batches
from strom.storage.segment import FileRegion
from tests.storage.cleaner_helpers import log_records, one_log_cleaner, produce
from tests.storage.conftest import OpenLog

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01",
           "segment_bytes": 2048, "index_interval_bytes": 256}


def _region_bytes(region: FileRegion) -> bytes:
    return os.pread(region.file.fileno(), region.size, region.position)


@pytest.mark.parametrize("delete_delay_ms", [0, 60_000])
def test_appends_and_reads_while_the_cleaner_runs(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, delete_delay_ms: int
) -> None:
    plog = open_log(file_delete_delay_ms=delete_delay_ms, **COMPACT)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    rng = random.Random(7)
    produced: dict[int, tuple[bytes, bytes | None]] = {}
    latest: dict[bytes, int] = {}
    held: list[tuple[FileRegion, bytes]] = []  # "in-flight sendfiles" of earlier fetches
    reads = 0

    def check(data: bytes, start: int) -> None:
        batches = list(decode_batches(data))  # CRC-checked
        assert batches, "a read below the HW returned no whole batch"
        assert batches[0][0].last_offset >= start
        previous = -1
        for header, records in batches:
            assert header.base_offset > previous
            previous = header.last_offset
            for record in records:
                assert produced[record.offset] == (record.key, record.value)

    cleaner.start()
    deadline = time.monotonic() + 30
    try:
        i = 0
        while (cleaner.stats().passes < 8 or i < 3000) and time.monotonic() < deadline:
            n = rng.randint(1, 4)
            pairs = [(b"key-%02d" % rng.randrange(40), b"v%d-" % (i + j) + b"x" * rng.randrange(60))
                     for j in range(n)]
            base, _ = produce(plog, pairs, codec=rng.choice((0, 0, 3, 4)))
            for j, (key, value) in enumerate(pairs):
                produced[base + j] = (key, value)
                latest[key] = base + j
            i += 1
            if i % 3 == 0:
                start = rng.randrange(plog.log_start_offset, plog.log_end_offset)
                result = plog.read(start, rng.choice((200, 1000, 5000)),
                                   upper_bound=plog.log_end_offset, inline_below=0)
                assert result.regions
                data = _region_bytes(result.regions[0])
                check(data, start)
                reads += 1
                if delete_delay_ms and rng.random() < 0.05:
                    held.append((result.regions[0], data))
            if i % 50 == 0:
                plog.apply_retention(clock.now_ms())  # empties the graveyard (delay 0)
            if i >= 3000:
                # The cleaner runs in a worker process, so nothing slows this loop down:
                # pace it, or it outruns the passes (and, with the 60 s delete delay under a
                # manual clock, the graveyard's descriptors pile up).
                time.sleep(0.001)
    finally:
        cleaner.stop()
    stats = cleaner.stats()
    assert stats.passes >= 3 and not stats.errors, stats
    assert stats.records_removed > 0
    # Regions handed out before swaps are still readable, byte for byte.
    for region, data in held:
        assert _region_bytes(region) == data
    # Nothing lost: every key's latest record is there, everything read is what was written.
    records = log_records(plog)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    assert set(latest.values()) <= set(offsets)
    for record in records:
        assert produced[record.offset] == (record.key, record.value)
    assert len(records) < len(produced)
    assert reads > 500
    assert not list(plog.directory.glob("*.cleaned")) and not list(plog.directory.glob("*.swap"))


def test_close_and_delete_stop_an_inflight_pass(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    for action in ("close", "delete"):
        directory = tmp_path / f"{action}-0"
        plog = open_log(directory=directory, **{**COMPACT, "segment_bytes": 64 * 1024})
        for i in range(3000):
            produce(plog, [(b"k%d" % (i % 500), b"x" * 100), (b"j%d" % i, b"y" * 50)])
        plog.roll()
        cleaner = one_log_cleaner(tmp_path, plog, clock)
        cleaner.start()
        time.sleep(0.05)  # let the pass start
        getattr(plog, action)()
        cleaner.stop()
        assert not cleaner.stats().errors
        if action == "close":
            assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
            reopened = open_log(directory=directory, **COMPACT)
            values = {r.key: r.value for r in log_records(reopened)}
            assert len(values) == 500 + 3000
            reopened.close()
        else:
            assert not directory.exists()
