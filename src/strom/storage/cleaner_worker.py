"""The log cleaner's worker process: the CPU-heavy half of a pass, off the broker's GIL.

A pass's steps 1 and 2 (:mod:`strom.storage.compaction`: reading the segments, decoding
records, the offset map, filtering and re-encoding batches, writing ``<base>.*.cleaned``
and the range file) are pure Python and would hold the GIL for seconds, starving the event
loop. They run here, in one child process (a ``ProcessPoolExecutor`` with one worker,
started with ``forkserver`` — never ``fork``: the broker runs threads and asyncio — or
``spawn`` where forkserver is missing). The broker process keeps the cheap parts: choosing
the log, the snapshot (:class:`~strom.storage.compaction.MapTask` /
:class:`~strom.storage.compaction.GroupTask`: paths, base offsets, sizes, settings, now,
producer last offsets) and the swaps, under the log's lock.

Protocol, one pass at a time (the cleaner's ``_pass_lock``): :func:`run_build_map` builds
the offset map and keeps it (with the filter) in this process's memory under a pass id;
:func:`run_clean_groups` rewrites a batch of groups with it, leaving the ``.cleaned`` files for the
parent to swap in; :func:`run_end_pass` drops the map. The worker reads inactive segments
by path (they only change through the cleaner, retention or truncation, and the parent
validates the swap against those); a segment file that vanished or shrank raises
:class:`~strom.storage.compaction.SegmentChangedError`.

The worker exits when the broker process dies, even by SIGKILL (it watches the broker's
process sentinel). Aborts: the parent polls its future and, when the log is truncated,
closed or deleted (or the cleaner stops), sets a shared flag the worker checks before every
batch; the task then raises :class:`WorkerAborted` after removing its ``.cleaned`` files,
and the parent releases the log only after that, so ``Log.close`` / ``Log.delete`` never
race a writing worker.

Parent side: :class:`CleanerProcess` (lazy start, fallback, shutdown) and
:class:`ProcessRunner` (a :class:`~strom.storage.compaction.PassRunner`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from strom.common.errors import CorruptMessageError
from strom.storage.compaction import (
    CleaningAborted,
    Filter,
    GroupResult,
    GroupTask,
    MapResult,
    MapTask,
    Pacer,
    SegmentChangedError,
    SegmentFile,
    build_offset_map,
    discard_written,
    open_each,
    write_group,
)
from strom.storage.log import CleanerView, Log
from strom.storage.segment import LogSegment
from strom.storage.swap import discard_swap

log = logging.getLogger("strom.storage.cleaner_worker")

#: How long the parent waits for a new worker process to answer before falling back.
START_TIMEOUT_S = 60.0
#: How often the parent checks, while a task runs, whether the pass must stop.
POLL_INTERVAL_S = 0.01

T = TypeVar("T")


class AbortFlag(Protocol):
    """A ``multiprocessing`` shared byte: non-zero asks the running task to stop."""

    value: int


class WorkerAborted(Exception):
    """The parent asked the running task to stop; its files are removed."""


# -- in the worker process --------------------------------------------------------------
@dataclass(slots=True)
class _PassState:
    pass_id: int
    filter: Filter
    pacer: Pacer | None


_abort_flag: AbortFlag | None = None
_state: _PassState | None = None
_pass_ids = itertools.count(1)


def init_worker(flag: AbortFlag) -> None:
    """The executor's initializer: keep the shared abort flag; exit with the broker."""
    global _abort_flag
    _abort_flag = flag
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), name="exit-with-broker",
                         daemon=True).start()


def _exit_with(parent: multiprocessing.process.BaseProcess) -> None:
    """A pool worker waits for tasks on a pipe it also holds the write end of, so it would
    outlive a broker killed with SIGKILL: exit as soon as the broker's sentinel closes."""
    parent.join()
    os._exit(1)


def ping() -> int:
    return os.getpid()


def _make_check(pacer: Pacer | None) -> Callable[[int], None]:
    flag = _abort_flag

    def check(nbytes: int) -> None:
        if flag is not None and flag.value:
            raise WorkerAborted("aborted by the broker")
        if pacer is not None:
            pacer.account(nbytes)

    return check


def run_build_map(task: MapTask, io_bytes_per_second: float | None) -> tuple[int, MapResult]:
    """Step 1; the map stays here for the pass's groups. Returns (pass id, result)."""
    global _state
    _state = None
    pacer = Pacer(io_bytes_per_second, yield_interval_s=0.0) if io_bytes_per_second else None
    offset_map, end, bytes_read = build_offset_map(
        open_each(task.dirty), task.first_dirty, task.max_entries, _make_check(pacer),
        task.aborted)
    pass_id = next(_pass_ids)
    _state = _PassState(pass_id, Filter.for_pass(task, offset_map), pacer)
    return pass_id, MapResult(end, len(offset_map), bytes_read)


def run_clean_groups(pass_id: int, tasks: list[GroupTask]) -> list[GroupResult]:
    """Step 2 for consecutive groups, with the map of pass ``pass_id``; on an error the
    ``.cleaned`` files written so far are removed."""
    state = _state
    if state is None or state.pass_id != pass_id:
        raise RuntimeError(f"the cleaner worker has no offset map for pass {pass_id}")
    check = _make_check(state.pacer)
    results: list[GroupResult] = []
    try:
        for task in tasks:
            segments: list[SegmentFile] = []
            try:
                for spec in task.segments:
                    segments.append(SegmentFile(spec))
                results.append(write_group(task, segments, state.filter, check))
            finally:
                for segment in segments:
                    segment.close()
    except BaseException:
        discard_written(tasks, results)
        raise
    return results


def run_end_pass(pass_id: int) -> None:
    global _state
    if _state is not None and _state.pass_id == pass_id:
        _state = None


# -- in the broker process --------------------------------------------------------------
class CleanerProcess:
    """The worker process of one :class:`~strom.storage.cleaner.LogCleaner`: started on first
    use; if it cannot start, a warning is logged and :meth:`executor` returns None from then
    on (the cleaner then cleans in its own thread). Thread-safe."""

    def __init__(self, start_method: str | None = None) -> None:
        self.start_method = start_method
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._flag: AbortFlag | None = None
        self.failed = False
        self.pid: int | None = None  # of the running worker process

    def executor(self) -> tuple[ProcessPoolExecutor, AbortFlag] | None:
        """The running worker (started now if needed), or None when it cannot run."""
        with self._lock:
            if self.failed:
                return None
            if self._executor is None or self._flag is None:
                try:
                    self._executor, self._flag, self.pid = self._start()
                except Exception as exc:
                    log.warning("cannot start the log cleaner's worker process (%r): "
                                "compacting in a thread of the broker process instead", exc)
                    self.failed = True
                    return None
            return self._executor, self._flag

    def _start(self) -> tuple[ProcessPoolExecutor, AbortFlag, int]:
        method = self.start_method
        if method is None:
            available = multiprocessing.get_all_start_methods()
            method = "forkserver" if "forkserver" in available else "spawn"
        context = multiprocessing.get_context(method)
        flag: AbortFlag = context.RawValue("b", 0)
        executor = ProcessPoolExecutor(max_workers=1, mp_context=context,
                                       initializer=init_worker, initargs=(flag,))
        try:
            pid = executor.submit(ping).result(timeout=START_TIMEOUT_S)
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        log.info("log cleaner worker process %d started (%s)", pid, method)
        return executor, flag, pid

    def discard(self, executor: ProcessPoolExecutor) -> None:
        """Forget a broken executor (the next pass starts a new process)."""
        with self._lock:
            if self._executor is executor:
                self._executor = self._flag = self.pid = None
        executor.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Stop the worker process (waits for its current task); a later pass restarts it."""
        with self._lock:
            executor, self._executor, self._flag, self.pid = self._executor, None, None, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


class ProcessRunner:
    """Runs a pass's steps 1 and 2 in the worker process (see the module docstring)."""

    def __init__(
        self, process: CleanerProcess, executor: ProcessPoolExecutor, flag: AbortFlag,
        plog: Log, view: CleanerView, *, io_bytes_per_second: float | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.process = process
        self.executor = executor
        self.flag = flag
        self.plog = plog
        self.view = view
        self.io_bytes_per_second = io_bytes_per_second
        self.stopping = stopping
        self._pass_id: int | None = None

    def build_map(self, task: MapTask, segments: Sequence[LogSegment]) -> MapResult:
        self._pass_id, result = self._call(segments, run_build_map, task,
                                           self.io_bytes_per_second)
        return result

    def clean_groups(
        self, tasks: Sequence[GroupTask], groups: Sequence[Sequence[LogSegment]]
    ) -> list[GroupResult]:
        assert self._pass_id is not None, "build_map first"
        segments = [segment for group in groups for segment in group]
        try:
            return self._call(segments, run_clean_groups, self._pass_id, list(tasks))
        except BaseException:
            # The worker removes its files on errors, but not if it died (idempotent).
            for task in tasks:
                discard_swap(Path(task.directory), task.base_offset)
            raise

    def end_pass(self) -> None:
        if self._pass_id is None:
            return
        # Fire and forget: the next pass replaces the map anyway.
        with contextlib.suppress(BrokenProcessPool, RuntimeError):
            self.executor.submit(run_end_pass, self._pass_id)
        self._pass_id = None

    def _must_stop(self) -> bool:
        return self.plog.cleaning_invalidated(self.view.generation) or self.stopping()

    def _call(self, segments: Sequence[LogSegment], fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` in the worker; while it runs, ask it to stop if the pass must."""
        self.flag.value = 0
        try:
            future: Future[T] = self.executor.submit(fn, *args)
        except (BrokenProcessPool, RuntimeError):
            self.process.discard(self.executor)
            raise
        aborted = False
        while True:
            done, _ = concurrent.futures.wait([future], timeout=POLL_INTERVAL_S)
            if done:
                break
            if not aborted and self._must_stop():
                self.flag.value = 1
                aborted = True
        try:
            return future.result()
        except WorkerAborted:
            raise CleaningAborted(f"cleaning of {self.plog!r} aborted") from None
        except BrokenProcessPool:
            self.process.discard(self.executor)
            raise
        except (SegmentChangedError, CorruptMessageError, OSError) as exc:
            # Read by path: retention or truncation may have removed or cut a segment.
            live = {id(segment) for segment in self.plog.segments}
            if self._must_stop() or any(id(segment) not in live for segment in segments):
                raise CleaningAborted(f"cleaning of {self.plog!r} aborted: segments changed "
                                      f"under the pass ({exc})") from None
            raise
