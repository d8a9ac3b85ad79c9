"""The cleaner's worker process: same results as in-thread, aborts, fallback, worker death."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log
from tests.storage.cleaner_helpers import TP, all_stable, as_tuples, log_records, produce
from tests.storage.conftest import OpenLog

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01"}


def _cleaner(directory: Path, plog: Log, clock: ManualClock, **kwargs: object) -> LogCleaner:
    return LogCleaner(directory, lambda: [(TP, all_stable(plog))], clock, backoff_ms=1,
                      **kwargs)  # type: ignore[arg-type]


def _fill(plog: Log, rounds: int, *, keys: int = 50, tombstones: bool = True) -> None:
    for i in range(rounds):
        value = None if tombstones and i % 7 == 3 else b"value-%d-" % i + b"x" * (i % 40)
        produce(plog, [(b"k%d" % (i % keys), value), (b"u%d" % i, b"unique")],
                codec=(0, 1, 3, 4)[i % 4])
    plog.roll()


def _no_leftovers(directory: Path) -> bool:
    return not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))


def _segment_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def test_worker_process_writes_what_the_thread_writes(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    logs = {}
    for mode in ("process", "thread"):
        plog = open_log(directory=tmp_path / f"{mode}-0", segment_bytes=2000, **COMPACT)
        _fill(plog, 400)
        cleaner = _cleaner(tmp_path / mode, plog, clock, use_process=mode == "process")
        (tmp_path / mode).mkdir()
        for _ in range(2):  # the second pass meets the first one's delete horizons
            assert cleaner.clean_once()
            _fill(plog, 50)
        if mode == "process":
            assert cleaner.uses_process
            assert cleaner.worker_pid not in (None, os.getpid())
        else:
            assert not cleaner.uses_process and cleaner.worker_pid is None
        stats = cleaner.stats()
        cleaner.stop()
        assert cleaner.worker_pid is None
        logs[mode] = (plog, stats)
    (proc, proc_stats), (thread, thread_stats) = logs["process"], logs["thread"]
    assert as_tuples(log_records(proc)) == as_tuples(log_records(thread))
    assert _segment_files(proc.directory) == _segment_files(thread.directory)
    for name in ("passes", "bytes_read", "input_bytes", "bytes_written", "records_removed",
                 "tombstones_removed", "segments_replaced"):
        assert getattr(proc_stats, name) == getattr(thread_stats, name), name
    assert proc_stats.records_removed > 0
    assert _no_leftovers(proc.directory)


def test_fallback_to_the_thread_when_no_process_can_start(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log(segment_bytes=1000, **COMPACT)
    _fill(plog, 100)
    cleaner = _cleaner(tmp_path, plog, clock, start_method="no-such-start-method")
    with caplog.at_level(logging.WARNING, logger="strom.storage.cleaner_worker"):
        assert cleaner.clean_once()
    assert "cannot start the log cleaner's worker process" in caplog.text
    assert not cleaner.uses_process
    assert cleaner.stats().records_removed > 0
    cleaner.stop()


Rows = list[tuple[int, int, bytes | None, bytes | None]]


def _slow_pass(tmp_path: Path, open_log: OpenLog, clock: ManualClock,
               **log_config: object) -> tuple[Log, LogCleaner, Rows]:
    """A log whose pass takes seconds (I/O cap), the cleaner thread compacting it."""
    plog = open_log(**{"segment_bytes": 8000, **COMPACT, **log_config})
    _fill(plog, 600, tombstones=False)
    before = as_tuples(log_records(plog))
    cleaner = _cleaner(tmp_path, plog, clock, max_io_bytes_per_second=50_000)
    cleaner.start()
    deadline = time.monotonic() + 30
    while cleaner.worker_pid is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the worker is reading
    return plog, cleaner, before


@pytest.mark.parametrize("action", ["close", "delete", "truncate", "stop"])
def test_changes_abort_a_pass_running_in_the_worker(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, action: str
) -> None:
    plog, cleaner, before = _slow_pass(tmp_path, open_log, clock)
    directory = plog.directory
    t0 = time.monotonic()
    if action == "stop":
        cleaner.stop()
    elif action == "truncate":
        plog.truncate_to(plog.log_end_offset - 10)
    else:
        getattr(plog, action)()
    elapsed = time.monotonic() - t0
    if action == "truncate":
        deadline = time.monotonic() + 10
        while cleaner.stats().passes_aborted == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    cleaner.stop()
    stats = cleaner.stats()
    assert elapsed < 2.0, elapsed  # close / delete / stop wait for the worker to stop
    # After a truncation the thread starts a new pass, which the final stop() aborts.
    assert stats.passes_aborted >= 1 and stats.passes == 0 and not stats.errors, stats
    if action == "delete":
        assert not directory.exists()
        return
    assert _no_leftovers(directory)
    if action == "close":
        plog = open_log(directory=directory, **COMPACT)
    expected = before[:-10] if action == "truncate" else before
    assert as_tuples(log_records(plog)) == expected


def test_segments_removed_under_the_worker_abort_the_pass(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog, cleaner, before = _slow_pass(tmp_path, open_log, clock)
    cut = plog.segments[len(plog.segments) // 2].base_offset
    plog.delete_records_before(cut)  # the worker has yet to open those segment files
    deadline = time.monotonic() + 10
    while cleaner.stats().passes_aborted == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    cleaner.stop()
    stats = cleaner.stats()
    assert stats.passes_aborted >= 1 and not stats.errors, stats  # stop() aborts a 2nd
    state = cleaner.state(TP)
    assert state is not None and not state.uncleanable
    assert _no_leftovers(plog.directory)
    assert as_tuples(log_records(plog)) == [r for r in before if r[0] >= cut]
    cleaner.max_io_bytes_per_second = None
    assert cleaner.clean_once()  # the next pass works
    cleaner.stop()


def test_a_dead_worker_fails_the_pass_and_is_replaced(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog, cleaner, before = _slow_pass(tmp_path, open_log, clock)
    pid = cleaner.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not cleaner.stats().errors and time.monotonic() < deadline:
        time.sleep(0.01)
    cleaner.stop()
    assert cleaner.stats().errors and cleaner.stats().passes == 0
    assert _no_leftovers(plog.directory)
    assert as_tuples(log_records(plog)) == before
    other = open_log(directory=tmp_path / "other-0", segment_bytes=1000, **COMPACT)
    _fill(other, 100)
    fresh = _cleaner(tmp_path / "other-0", other, clock)
    assert fresh.clean_once()
    assert fresh.worker_pid not in (None, pid)
    fresh.stop()


_KILLED_BROKER = """
import time
from strom.storage.cleaner_worker import CleanerProcess

process = CleanerProcess()
assert process.executor() is not None
print(process.pid, flush=True)
time.sleep(60)
"""


def test_the_worker_exits_when_the_broker_is_killed(tmp_path: Path) -> None:
    broker = subprocess.Popen([sys.executable, "-c", _KILLED_BROKER], stdout=subprocess.PIPE,
                              cwd=tmp_path)
    try:
        assert broker.stdout is not None
        pid = int(broker.stdout.readline())
        os.kill(pid, 0)  # running
    finally:
        broker.kill()
        broker.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the worker outlived the broker")
