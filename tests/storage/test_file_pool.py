"""The file pool: lazy opening, LRU closing of idle files, pins, detach, running out of fds;
and logs with many segments and partitions served through a pool far smaller than them."""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.storage.file_pool import FilePool, PooledFile, default_pool
from strom.storage.log import FileRegion, Log
from strom.storage.segment import LogSegment
from tests.storage.helpers import (
    NOW,
    batch_offsets,
    make_batch,
    payload,
    read_all,
    topic_config,
    values,
)


def files(tmp_path: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = tmp_path / f"f{i}"
        path.write_bytes(f"content-{i}".encode())
        paths.append(path)
    return paths


def read(pooled: PooledFile) -> bytes:
    file = pooled.acquire()
    try:
        return os.pread(file.fileno(), 100, 0)
    finally:
        pooled.release()


def test_files_open_lazily_and_the_least_recently_used_idle_one_closes(tmp_path: Path) -> None:
    pool = FilePool(capacity=4)
    pooled = [PooledFile(pool, p) for p in files(tmp_path, 6)]
    assert pool.open_files == 0 and not any(p.is_open for p in pooled)  # nothing opened yet
    for p in pooled[:4]:
        read(p)
    assert pool.open_files == 4 and pool.idle_files == 4
    read(pooled[0])  # f0 becomes the most recently used: f1 is now the oldest
    read(pooled[4])
    assert [p.is_open for p in pooled] == [True, False, True, True, True, False]
    read(pooled[5])
    assert [p.is_open for p in pooled] == [True, False, False, True, True, True]
    assert pool.open_files == 4 and pool.evictions == 2
    # An evicted file reopens on use, by path, with its content.
    assert read(pooled[1]) == b"content-1" and pooled[1].is_open
    assert pool.opens == 7
    pool.capacity = 2  # shrinking closes idle files at once
    assert pool.open_files == 2


def test_creating_a_file_opens_it_without_the_pools_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every append pins its segment through the pool's lock: a file creation waiting on the
    filesystem must not hold it. The new file still joins the pool's bound."""
    from strom.storage import file_pool

    pool = FilePool(capacity=2)
    taken: list[bool] = []
    real = file_pool.io.FileIO

    def take_lock() -> None:
        got = pool._lock.acquire(timeout=2)
        if got:
            pool._lock.release()
        taken.append(got)

    def opening(path: Path, mode: str) -> object:
        other = threading.Thread(target=take_lock)
        other.start()
        other.join()
        return real(path, mode)

    monkeypatch.setattr(file_pool.io, "FileIO", opening)
    made = [PooledFile.create(pool, tmp_path / f"new{i}") for i in range(3)]
    monkeypatch.undo()
    assert taken == [True, True, True]
    assert pool.open_files == 2 and pool.evictions == 1 and not made[0].is_open
    assert all(p.exists() for p in (tmp_path / f"new{i}" for i in range(3)))
    made[0].acquire().write(b"x")  # an evicted new file reopens by path
    made[0].release()
    assert (tmp_path / "new0").read_bytes() == b"x"


def test_pinned_files_are_never_closed_and_the_capacity_is_soft(tmp_path: Path) -> None:
    pool = FilePool(capacity=4)
    pooled = [PooledFile(pool, p) for p in files(tmp_path, 6)]
    held = [p.acquire() for p in pooled]  # six pins over a capacity of four
    assert pool.open_files == 6 and pool.idle_files == 0 and pool.evictions == 0
    for p, file in zip(pooled, held, strict=True):
        assert os.pread(file.fileno(), 100, 0) == read(p)
    for p in pooled:
        p.release()  # once the burst of pins ends, the pool is back under its bound
    assert pool.open_files == pool.idle_files == 4 and pool.evictions == 2
    assert [p.is_open for p in pooled] == [False, False, True, True, True, True]


def test_a_lease_keeps_its_descriptor_past_close_until_it_is_dropped(tmp_path: Path) -> None:
    pool = FilePool(capacity=4)
    pooled = PooledFile(pool, files(tmp_path, 1)[0])
    lease = pooled.lease()
    file = lease.file
    pooled.close()
    assert pooled.closed and not file.closed  # an in-flight sendfile keeps working
    assert os.pread(file.fileno(), 100, 0) == b"content-0"
    with pytest.raises(OSError) as info:
        pooled.acquire()
    assert info.value.errno == errno.EBADF
    del lease  # the region holding it was sent and dropped
    assert file.closed and pool.open_files == 0


def test_a_detached_file_is_never_reopened_by_name(tmp_path: Path) -> None:
    pool = FilePool(capacity=4)
    paths = files(tmp_path, 2)
    open_one, closed_one = PooledFile(pool, paths[0]), PooledFile(pool, paths[1])
    read(open_one)
    for pooled in (open_one, closed_one):
        pooled.detach()
        pooled.path.unlink()
        pooled.path.write_bytes(b"a new file under the old name")  # as a cleaner swap does
    # Open when detached: kept open (pinned, not evictable) with the old content.
    assert read(open_one) == b"content-0"
    pool.capacity = 1
    assert open_one.is_open
    # Not open when detached: readers get FileNotFoundError, never the new file's bytes.
    with pytest.raises(FileNotFoundError):
        closed_one.acquire()
    open_one.close()
    assert not open_one.is_open and pool.open_files == 0


def test_concurrent_users_always_read_their_own_file(tmp_path: Path) -> None:
    pool = FilePool(capacity=4)
    pooled = [PooledFile(pool, p) for p in files(tmp_path, 16)]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(1500):
                i = rng.randrange(len(pooled))
                if rng.random() < 0.2:
                    lease = pooled[i].lease()
                    data = os.pread(lease.file.fileno(), 100, 0)
                    del lease
                else:
                    data = read(pooled[i])
                assert data == f"content-{i}".encode()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert pool.open_files <= 4 and pool.evictions > 0


_CHILD = """
import json, logging, os, sys
from pathlib import Path
from strom.storage.file_pool import FilePool, OpenFileLimitError, PooledFile
logging.basicConfig(level=logging.ERROR, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
tmp = Path(sys.argv[1])
pool = FilePool(capacity=1000)  # far above the limit: only the kernel says no
pooled = []
for i in range(40):
    (tmp / f"f{i}").write_bytes(b"x%d" % i)
    pooled.append(PooledFile(pool, tmp / f"f{i}"))
held, error = [], None
for p in pooled:  # pin them all: the process runs out
    try:
        held.append(p.acquire())
    except OpenFileLimitError as exc:
        error = exc
        break
for p in pooled[:len(held)]:
    p.release()
ok = 0
for _ in range(3):  # no pins: every open past the limit closes an idle file instead of failing
    for i, p in enumerate(pooled):
        f = p.acquire()
        ok += os.pread(f.fileno(), 10, 0) == b"x%d" % i
        p.release()
fd = pool.open_fd(tmp / "f0", os.O_RDONLY)  # short-lived opens evict too
os.close(fd)
print("RESULT " + json.dumps({"pinned": len(held), "errno": error.errno, "message": str(error),
                              "ok": ok, "evictions": pool.evictions}))
"""


def test_running_out_of_descriptors_closes_idle_files_then_says_so(tmp_path: Path) -> None:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))

    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True,
                          text=True, preexec_fn=limit, timeout=60, check=True)
    lines = done.stdout.splitlines()
    result = json.loads(next(line for line in lines if line.startswith("RESULT "))[7:])
    assert 10 < result["pinned"] < 32
    assert result["errno"] == errno.EMFILE
    assert "open-file limit is 32 (RLIMIT_NOFILE soft, hard 32)" in result["message"]
    assert "log.max.open.files" in result["message"] and "ulimit -n" in result["message"]
    assert result["ok"] == 120 and result["evictions"] > 0
    # One ERROR line names the limit and the config to change (and is not repeated).
    logged = [line for line in lines if line.startswith("LOG ERROR")]
    assert len(logged) == 1 and "log.max.open.files" in logged[0]


# -- logs through a small pool ------------------------------------------------------------
@pytest.fixture
def small_pool() -> Iterator[FilePool]:
    pool = default_pool()
    before = pool.capacity
    pool.close_idle()
    pool.capacity = 4
    yield pool
    pool.capacity = before


def test_many_partitions_share_a_few_descriptors(tmp_path: Path, small_pool: FilePool) -> None:
    clock = ManualClock(NOW)
    config = topic_config(segment_bytes=600)
    logs = [Log.open(tmp_path / f"t-{p}", config, clock=clock) for p in range(20)]
    for round_ in range(12):
        for p, plog in enumerate(logs):
            plog.append(payload(make_batch(values(3, size=40, prefix=f"p{p}r{round_}-"))),
                        leader_epoch=0)
            assert small_pool.open_files <= 4
    assert all(len(plog.segments) > 3 for plog in logs)
    for p, plog in enumerate(logs):
        data = read_all(plog)
        assert [base for base, _ in batch_offsets(data)] == list(range(0, 36, 3))
        assert f"p{p}r11-".encode() in data
        plog.flush()
        assert small_pool.open_files <= 4
    for plog in logs:
        plog.close()
    # Reopened without a clean shutdown: recovery reads every segment through the pool.
    again = [Log.open(tmp_path / f"t-{p}", config, clock=clock, clean_shutdown=False)
             for p in range(20)]
    for p, plog in enumerate(again):
        assert plog.log_end_offset == 36 and f"p{p}r11-".encode() in read_all(plog)
        plog.close()
    assert small_pool.open_files <= 4


def part_bytes(part: FileRegion | bytes) -> bytes:
    if isinstance(part, bytes):
        return part
    return os.pread(part.file.fileno(), part.size, part.position)


def test_regions_in_flight_survive_retention_and_deletion_and_never_exceed_the_pool(
    tmp_path: Path, small_pool: FilePool
) -> None:
    clock = ManualClock(NOW)
    plog = Log.open(tmp_path / "t-0", topic_config(segment_bytes=600, retention_ms=1,
                                                   file_delete_delay_ms=0), clock=clock)
    for i in range(20):
        plog.append(payload(make_batch(values(3, size=40, prefix=f"r{i}-"))), leader_epoch=0)
    expected = bytes(read_all(plog))
    parts: list[FileRegion | bytes] = []
    offset = 0
    while offset < plog.log_end_offset:  # one read per segment, all held at once
        part = plog.read(offset, 1 << 20, upper_bound=plog.log_end_offset,
                         inline_below=0).regions[0]
        parts.append(part)
        offset = batch_offsets(part_bytes(part))[-1][1] + 1
    # Regions pin their files up to the pool's capacity; past it, reads are copied instead.
    assert [isinstance(p, FileRegion) for p in parts] == [True] * 4 + [False] * (len(parts) - 4)
    assert small_pool.pinned_files == small_pool.open_files == 4
    assert plog.apply_retention(NOW + 10**9) > 0  # old segments leave: unlinked, closed
    plog.apply_retention(NOW + 10**9)  # ... and closed by the graveyard (no delay)
    plog.delete()
    assert not (tmp_path / "t-0").exists()
    # Every in-flight read completes on the file it started on.
    assert b"".join(part_bytes(p) for p in parts) == expected
    files_held = [p.file for p in parts if isinstance(p, FileRegion)]
    del part
    parts.clear()  # the responses were sent and dropped
    assert all(f.closed for f in files_held) and small_pool.open_files == 0


def test_a_read_that_loses_its_segment_to_a_swap_looks_it_up_again(
    tmp_path: Path, small_pool: FilePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(NOW)
    plog = Log.open(tmp_path / "t-0", topic_config(segment_bytes=600), clock=clock)
    for i in range(20):
        plog.append(payload(make_batch(values(3, size=40, prefix=f"r{i}-"))), leader_epoch=0)
    first = plog.read(0, 1 << 20, upper_bound=plog.log_end_offset).to_bytes()
    small_pool.close_idle()  # the first segment's descriptor is not open
    victim = plog.segments[0]
    original = LogSegment.read

    def swap_then_read(self: LogSegment, *args: object, **kwargs: object) -> object:
        if self is victim and not victim.detached:
            # A cleaner swap lands after the reader picked up the segment list: the files
            # are renamed over (detached), and a new segment object takes the old one's place.
            victim.detach()
            new, _ = LogSegment.open(plog.directory, victim.base_offset,
                                     index_interval_bytes=4096, max_index_bytes=1 << 20,
                                     now_ms=NOW)
            plog._segments = [new, *plog._segments[1:]]
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "read", swap_then_read)
    again = plog.read(0, 1 << 20, upper_bound=plog.log_end_offset)
    assert victim.detached and again.to_bytes() == first  # served from the new segment
    with pytest.raises(FileNotFoundError):
        victim.read_bytes(0, 10)  # the detached one is never reopened by name
    victim.close()
    plog.close()
