"""A bounded pool of open segment files: opened lazily, the least recently used idle ones closed.

Kafka keeps every segment's ``.log`` (and its memory-mapped indexes) open for the life of the
broker, so a few hundred partitions exceed the common ``ulimit -n 1024`` and Kafka's docs tell
you to raise the limit. strom bounds what it holds instead: a segment's ``.log`` is a
:class:`PooledFile`, opened when first used and closed again when more than
:attr:`FilePool.capacity` pooled files are open and it is the least recently used one that
nobody is using (index files hold no descriptor at all: see
:class:`~strom.storage.index_base.FixedEntryIndex`). The capacity is the broker config
``log.max.open.files``; its default, :func:`default_capacity`, is half of the process's
``RLIMIT_NOFILE`` soft limit, leaving the other half for client connections and short-lived
files (checkpoints, snapshots, index writes).

The invariants, for every :class:`PooledFile`:

* **Who may close the descriptor.** Only the pool, and only while the file is *idle*: open
  and not pinned. A user pins the file for each use: :meth:`PooledFile.acquire` /
  :meth:`PooledFile.release` around a ``pread`` / ``pwrite`` / ``fsync``, or a
  :class:`FileLease` for as long as a :class:`~strom.storage.segment.FileRegion` lives (a
  fetch response's ``sendfile`` needs the descriptor until the bytes are sent, which may be
  several event-loop turns later). A pinned descriptor is never closed or reused under its
  user, so an in-flight read always completes on the file it started on.
* **When it reopens.** On the next :meth:`~PooledFile.acquire`, by path, in read-write mode
  (``r+b``; only :meth:`PooledFile.create` truncates). The first access after an eviction
  costs one ``open``; what a hot partition uses stays open because it is the most recently
  used. Linux ``fsync`` flushes a file's dirty pages whichever descriptor wrote them, so
  closing an idle file loses no durability.
* **Names that stop meaning the file.** Before a segment's files are unlinked or renamed
  over (retention, truncation, a cleaner swap) the owner calls :meth:`PooledFile.detach`:
  a detached file is never reopened by name. If it is open, it stays open (pinned) until
  :meth:`PooledFile.close`, so readers that picked the segment up before it left the log
  finish (Kafka's ``file.delete.delay.ms``); if it was not open, a later
  :meth:`~PooledFile.acquire` raises :class:`FileNotFoundError` and the reader looks the
  segment up again.
* **Closing.** :meth:`PooledFile.close` is final; if the file is pinned (a ``sendfile`` in
  flight) the descriptor is closed when the last pin is released.

Capacity is soft: pinned files are never closed to honour it, so the pool may briefly hold
more than ``capacity``. When an ``open`` fails with ``EMFILE`` / ``ENFILE`` (the process or the
system is out of descriptors, e.g. because connections used the rest), the pool closes its
idle files one at a time and retries; only when none is left does the open fail, with an
:class:`OpenFileLimitError` (an ``OSError``; the broker answers KAFKA_STORAGE_ERROR for that
partition and keeps serving the others) and an ERROR log line naming the limit and the config
to change (:func:`report_exhausted`, at most once a minute).

Thread-safety: every method may be called from any thread (event loop, flusher, cleaner);
one re-entrant lock per pool guards the bookkeeping (re-entrant because a lease's
``__del__`` may run inside the pool's own code when the garbage collector fires there).
``open`` and ``close`` of pooled files run under it; reads, writes and fsyncs do not.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("strom.storage.files")

T = TypeVar("T")

CAPACITY_CONFIG = "log.max.open.files"
MIN_CAPACITY = 4
_EXHAUSTED = (errno.EMFILE, errno.ENFILE)
_REPORT_INTERVAL_S = 60.0


def nofile_limits() -> tuple[int, int]:
    """The process's RLIMIT_NOFILE (soft, hard); ``-1`` for unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinity = resource.RLIM_INFINITY
    return (-1 if soft == infinity else soft), (-1 if hard == infinity else hard)


def default_capacity() -> int:
    """Half of the RLIMIT_NOFILE soft limit (at least :data:`MIN_CAPACITY`; 65536 when the
    limit is unlimited)."""
    soft, _ = nofile_limits()
    if soft < 0:
        return 65536
    return max(MIN_CAPACITY, soft // 2)


def raise_soft_limit() -> tuple[int, int]:
    """Raise the RLIMIT_NOFILE soft limit to the hard limit, as the JVM does for Kafka at
    start (capped at 2**20, the usual kernel ``nr_open``); returns (old soft, new soft).
    Leaves the limit alone if the kernel refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 2**20
    target = min(target, 2**20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def configure_default_pool(capacity: int) -> FilePool:
    """Set the process pool's capacity (``log.max.open.files``; -1: :func:`default_capacity`)."""
    pool = default_pool()
    pool.capacity = capacity if capacity > 0 else default_capacity()
    return pool


class OpenFileLimitError(OSError):
    """No descriptor could be had for a storage file, even after closing every idle one."""


_last_report = 0.0
_suppressed = 0
_report_lock = threading.Lock()


def report_exhausted(path: str | Path, exc: OSError, capacity: int | None) -> OpenFileLimitError:
    """Log (ERROR, at most once a minute) that descriptors ran out, and return the error to
    raise: it names the limit, the number of pooled files and the config to change."""
    global _last_report, _suppressed
    soft, hard = nofile_limits()
    pooled = "" if capacity is None else f"; strom keeps up to {capacity} segment files open"
    message = (
        f"too many open files ({os.strerror(exc.errno or errno.EMFILE)}) opening {path}: the "
        f"process's open-file limit is {soft} (RLIMIT_NOFILE soft, hard {hard}){pooled}. "
        f"Raise the limit (ulimit -n) or lower {CAPACITY_CONFIG}")
    now = time.monotonic()
    with _report_lock:
        if now - _last_report >= _REPORT_INTERVAL_S:
            more = f" ({_suppressed} more since the last report)" if _suppressed else ""
            log.error("%s%s", message, more)
            _last_report = now
            _suppressed = 0
        else:
            _suppressed += 1
    return OpenFileLimitError(exc.errno or errno.EMFILE, message)


class FilePool:
    """The open :class:`PooledFile` objects of one process, at most ``capacity`` of them idle
    or pinned (soft: see the module docstring). Idle files are kept in least-recently-used
    order; opening a file past the capacity closes the oldest idle ones."""

    def __init__(self, capacity: int | None = None) -> None:
        self._lock = threading.RLock()
        self._idle: OrderedDict[PooledFile, None] = OrderedDict()  # oldest first
        self._capacity = default_capacity() if capacity is None else capacity
        self.open_files = 0  # pooled descriptors open now (idle + pinned)
        self.opens = 0  # descriptors opened since start (first opens and reopens)
        self.evictions = 0  # idle descriptors closed to make room

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        """Change the bound (at least 1); idle files over it are closed at once."""
        if value < 1:
            raise ValueError(f"a file pool holds at least one file, not {value}")
        with self._lock:
            self._capacity = value
            while self.open_files > self._capacity and self._idle:
                self._evict_one()

    @property
    def idle_files(self) -> int:
        return len(self._idle)

    @property
    def pinned_files(self) -> int:
        """Open files in use right now (an unlocked snapshot: for decisions that tolerate
        being a little off, such as copying a read instead of pinning its file)."""
        return self.open_files - len(self._idle)

    def close_idle(self) -> int:
        """Close every idle file (they reopen on demand); returns how many."""
        with self._lock:
            count = len(self._idle)
            while self._idle:
                self._evict_one()
            return count

    def open_fd(self, path: str | Path, flags: int, mode: int = 0o644) -> int:
        """``os.open`` for a short-lived descriptor the caller closes itself (index writes,
        checkpoints): on EMFILE / ENFILE, idle pooled files are closed one at a time and the
        open retried; :class:`OpenFileLimitError` once none is left."""
        while True:
            try:
                return os.open(path, flags, mode)
            except OSError as exc:
                if exc.errno not in _EXHAUSTED:
                    raise
                with self._lock:
                    if not self._idle:
                        raise report_exhausted(path, exc, self._capacity) from None
                    self._evict_one()

    def with_descriptors(self, action: Callable[[], T], what: str | Path) -> T:
        """Run ``action`` (which opens files of its own, e.g. a directory listing); on EMFILE /
        ENFILE close an idle pooled file and run it again, as :meth:`open_fd` does, and raise
        :class:`OpenFileLimitError` (reported) once none is left. ``action`` must leave
        nothing behind when it fails."""
        while True:
            try:
                return action()
            except OSError as exc:
                if exc.errno not in _EXHAUSTED or isinstance(exc, OpenFileLimitError):
                    raise
                with self._lock:
                    if not self._idle:
                        raise report_exhausted(what, exc, self._capacity) from None
                    self._evict_one()

    def new_file(self, path: Path) -> io.FileIO:
        """A new empty file at ``path`` (an existing one is truncated), open read-write and
        not in the pool (:meth:`PooledFile.adopt` puts it there); the open retries as
        :meth:`with_descriptors` does. Takes the lock only to evict."""
        return self.with_descriptors(partial(io.FileIO, path, "w+b"), path)

    # -- called by PooledFile, under the lock ---------------------------------------------
    def _open(self, pooled: PooledFile, mode: str) -> io.FileIO:
        while self.open_files >= self._capacity and self._idle:
            self._evict_one()
        while True:
            try:
                file = io.FileIO(pooled.path, mode)
                break
            except OSError as exc:
                if exc.errno not in _EXHAUSTED:
                    raise
                if not self._idle:
                    raise report_exhausted(pooled.path, exc, self._capacity) from None
                self._evict_one()
        self.open_files += 1
        self.opens += 1
        return file

    def _evict_one(self) -> None:
        pooled, _ = self._idle.popitem(last=False)
        pooled._drop()
        self.evictions += 1

    def _closed_one(self) -> None:
        self.open_files -= 1


class PooledFile:
    """One file whose descriptor the pool opens and closes (see the module docstring for
    the rules); the unbuffered ``io.FileIO`` handed out by :meth:`acquire` serves
    ``os.pread`` / ``os.pwrite`` / ``fsync`` through its ``fileno()`` and ``sendfile``.

    States: *closed-idle* (no descriptor; reopens on use), *open* (idle in the LRU, or pinned
    ``pins`` times), *detached* (never reopened by name), *closed* (final)."""

    __slots__ = ("_closed", "_detached", "_file", "_kept", "_pins", "_pool", "path")

    def __init__(self, pool: FilePool, path: Path) -> None:
        self._pool = pool
        self.path = path
        self._file: io.FileIO | None = None
        self._pins = 0
        self._kept = False  # the pin detach() holds until close()
        self._detached = False
        self._closed = False

    @classmethod
    def create(cls, pool: FilePool, path: Path) -> PooledFile:
        """A new empty file at ``path`` (an existing one is truncated), left open and idle.

        The file is opened before the pool's lock is taken (creating a file can wait on the
        filesystem's journal, and every append takes that lock to pin its segment); it then
        joins the pool as the most recently used idle file, evicting the least recently used
        ones while the pool is over its capacity."""
        return cls.adopt(pool, path, pool.new_file(path))

    @classmethod
    def adopt(cls, pool: FilePool, path: Path, file: io.FileIO) -> PooledFile:
        """``file``, opened read-write at ``path`` by the caller (in any thread), joins the
        pool as :meth:`create` leaves a new file."""
        pooled = cls(pool, path)
        with pool._lock:
            pooled._file = file
            pool.open_files += 1
            pool.opens += 1
            idle = pool._idle
            idle[pooled] = None
            while pool.open_files > pool._capacity and idle:
                pool._evict_one()
        return pooled

    @property
    def pool(self) -> FilePool:
        return self._pool

    @property
    def closed(self) -> bool:
        """:meth:`close` was called (an evicted file is not closed: it reopens on use)."""
        return self._closed

    @property
    def detached(self) -> bool:
        return self._detached

    @property
    def is_open(self) -> bool:
        """A descriptor is open right now (for tests and metrics)."""
        return self._file is not None

    def acquire(self) -> io.FileIO:
        """Pin the file and return its open file object (opened now if it was evicted).

        Raises ``OSError(EBADF)`` after :meth:`close`, :class:`FileNotFoundError` for a
        detached file that is no longer open, :class:`OpenFileLimitError` when no descriptor
        can be had."""
        pool = self._pool
        lock = pool._lock
        lock.acquire()  # (explicit calls: a third cheaper than `with` on an RLock)
        try:
            file = self._file
            if file is None or self._closed:
                file = self._reopen()
            elif not self._pins:
                del pool._idle[self]
            self._pins += 1
            return file
        finally:
            lock.release()

    def _reopen(self) -> io.FileIO:
        if self._closed:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        if self._detached:
            raise FileNotFoundError(errno.ENOENT, f"{self.path} left the log")
        file = self._file = self._pool._open(self, "r+b")
        return file

    def release(self) -> None:
        """Unpin (once per :meth:`acquire`); the file becomes the most recently used idle one,
        or is closed if :meth:`close` was called meanwhile."""
        pool = self._pool
        lock = pool._lock
        lock.acquire()
        try:
            pins = self._pins = self._pins - 1
            if pins:
                return
            if self._closed:
                self._drop()
            elif self._file is not None:
                idle = pool._idle
                idle[self] = None
                if pool.open_files > pool._capacity:
                    while pool.open_files > pool._capacity and idle:
                        pool._evict_one()  # back under the bound once a burst of pins ends
        finally:
            lock.release()

    def lease(self) -> FileLease:
        """A pin that lasts as long as the returned object (see :class:`FileLease`)."""
        return FileLease(self)

    def detach(self) -> None:
        """The file's name will stop referring to this file (unlink or rename-over): never
        reopen it by name; an open descriptor stays open until :meth:`close`."""
        pool = self._pool
        with pool._lock:
            if self._detached or self._closed:
                return
            self._detached = True
            if self._file is not None:
                if self._pins == 0:
                    del pool._idle[self]
                self._pins += 1
                self._kept = True

    def close(self) -> None:
        """Close for good (idempotent); a pinned descriptor closes at its last release."""
        pool = self._pool
        with pool._lock:
            if self._closed:
                return
            self._closed = True
            if self._kept:
                self._kept = False
                self._pins -= 1
            if self._file is None or self._pins:
                return
            pool._idle.pop(self, None)
            self._drop()

    def _drop(self) -> None:
        """Close the descriptor (under the pool's lock; the file is not pinned)."""
        file = self._file
        if file is None:
            return
        self._file = None
        self._pool._closed_one()
        file.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._file is not None else "idle-closed"
        return f"PooledFile({self.path.name}, {state}, pins={self._pins})"


class FileLease:
    """A pin on a :class:`PooledFile` held by an object rather than a code block.

    ``file`` is the pinned file object. The pin is released by :meth:`release` or, failing
    that, when the lease is garbage (CPython frees it as soon as the last reference goes, e.g.
    when the network layer drops a sent :class:`~strom.storage.segment.FileRegion`)."""

    __slots__ = ("_pooled", "file")

    def __init__(self, pooled: PooledFile, file: io.FileIO | None = None) -> None:
        """Pin ``pooled`` — or, given the ``file`` an :meth:`PooledFile.acquire` returned,
        take over that pin."""
        self.file = pooled.acquire() if file is None else file
        self._pooled: PooledFile | None = pooled

    def release(self) -> None:
        pooled = self._pooled
        if pooled is not None:
            self._pooled = None
            pooled.release()

    def __del__(self) -> None:
        pooled = self._pooled
        if pooled is not None:
            self._pooled = None
            try:  # noqa: SIM105 - cheaper than contextlib.suppress on this path
                pooled.release()
            except Exception:  # a finaliser never raises (interpreter shutdown)
                pass


_default_pool: FilePool | None = None
_default_lock = threading.Lock()


def default_pool() -> FilePool:
    """The process's pool (RLIMIT_NOFILE is per process), created on first use with
    :func:`default_capacity`; the broker sets its capacity from ``log.max.open.files``."""
    global _default_pool
    pool = _default_pool
    if pool is None:
        with _default_lock:
            if _default_pool is None:
                _default_pool = FilePool()
            pool = _default_pool
    return pool
