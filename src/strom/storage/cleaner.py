"""The log cleaner: picks the dirtiest compacted log and compacts it, in its own thread,
with the CPU-heavy work in a worker process (:mod:`strom.storage.cleaner_worker`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.clock import Clock
from strom.common.types import TopicPartition
from strom.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offsets, write_offsets
from strom.storage.cleaner_worker import CleanerProcess, ProcessRunner
from strom.storage.compaction import (
    CleaningAborted,
    DirtyRange,
    InThreadRunner,
    Pacer,
    PassResult,
    PassRunner,
    clean_log,
    measure,
)
from strom.storage.files import CorruptFileError
from strom.storage.log import Log

log = logging.getLogger("strom.storage.cleaner")

DEFAULT_BACKOFF_MS = 15_000  # Kafka's log.cleaner.backoff.ms
#: Keys per offset map. A Python dict entry with a short key costs ~100-150 bytes, so this
#: is ~150 MB at worst — Kafka's default dedupe buffer is 128 MB.
DEFAULT_MAX_MAP_ENTRIES = 1_000_000


@dataclass(slots=True)
class LogCleanerState:
    """Per-log cleaner state, for tests and metrics."""

    last_cleaned_offset: int = 0  # the checkpoint: first dirty offset of the next pass
    dirty_ratio: float = 0.0
    dirty_bytes: int = 0
    clean_bytes: int = 0
    passes: int = 0
    last_pass_ms: int = -1
    uncleanable: bool = False


@dataclass(slots=True)
class CleanerStats:
    """Totals since the cleaner was created."""

    passes: int = 0
    passes_aborted: int = 0
    bytes_read: int = 0
    input_bytes: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_replaced: int = 0
    seconds_cleaning: float = 0.0
    last_pass: PassResult | None = None
    errors: list[str] = field(default_factory=list)


class LogCleaner:
    """Compacts logs whose ``cleanup.policy`` holds ``compact`` (Kafka's LogCleaner).

    Each :meth:`clean_once` measures every compacted log (dirty ratio, cleanable range,
    see :mod:`strom.storage.compaction`), picks the eligible log with the highest ratio — a
    log is eligible when its dirty ratio reaches ``min.cleanable.dirty.ratio`` or its oldest
    dirty record is older than ``max.compaction.lag.ms`` — and runs one pass over it.
    :meth:`start` runs that in a daemon thread, sleeping ``backoff_ms`` whenever nothing
    was eligible. The CPU-bound part of a pass (reading, decoding, the offset map, filtering,
    writing the ``.cleaned`` files) runs in a worker process
    (:mod:`strom.storage.cleaner_worker`, started on the first pass, stopped by :meth:`stop`)
    so it never holds the event loop's GIL; this thread only measures, snapshots, waits and
    swaps. ``max_io_bytes_per_second`` optionally caps the pass's reads
    (:class:`~strom.storage.compaction.Pacer`). With ``use_process=False``, or if the worker
    process cannot start (a warning is logged), passes run in this thread instead, sleeping
    briefly every ``yield_interval_ms`` (0: never) so the loop's syscalls do not wait out
    whole GIL switch intervals.

    On disk: ``<data-dir>/cleaner-offset-checkpoint`` (Kafka's offset checkpoint format,
    ``topic partition offset`` lines, see :mod:`strom.storage.checkpoint`) holds each log's
    first dirty offset; rewritten atomically after every completed pass. A log whose pass
    fails with an unexpected error is marked uncleanable until restart (Kafka does the same).

    Thread-safety: :meth:`clean_once` may be called from any one thread at a time (the
    cleaner's own, or a caller's when the thread is not started); passes never overlap
    (``_pass_lock``). :meth:`stats`, :meth:`state`, :meth:`forget` and :meth:`stop` are safe
    from any thread. The rules between a pass and the event loop are in :class:`Log`'s
    docstring. Lifecycle: construct (loads the checkpoint), optionally :meth:`start`,
    :meth:`stop` before the logs are closed (it also stops the worker process).
    """

    def __init__(
        self,
        data_dir: Path,
        logs: Callable[[], list[tuple[TopicPartition, Log]]],
        clock: Clock,
        *,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        max_io_bytes_per_second: float | None = None,
        yield_interval_ms: float = 0.5,
        use_process: bool = True,
        start_method: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._logs = logs
        self.clock = clock
        self.backoff_ms = backoff_ms
        self.max_map_entries = max_map_entries
        self.max_io_bytes_per_second = max_io_bytes_per_second
        self.yield_interval_ms = yield_interval_ms
        self._state_lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one writer of the checkpoint's .tmp file
        self._states: dict[TopicPartition, LogCleanerState] = {}
        self._stats = CleanerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = CleanerProcess(start_method) if use_process else None
        self._checkpoint: dict[TopicPartition, int] = self._read_checkpoint()
        for tp, offset in self._checkpoint.items():
            self._states[tp] = LogCleanerState(last_cleaned_offset=offset)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Run :meth:`clean_once` in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread (an in-flight pass of the thread is aborted at its next batch;
        groups already swapped stay) and the worker process."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            self._thread = None
        if self._process is not None:
            self._process.shutdown()

    @property
    def uses_process(self) -> bool:
        """Whether passes run in the worker process (False: in the calling thread)."""
        return self._process is not None and not self._process.failed

    @property
    def worker_pid(self) -> int | None:
        """The worker process's pid while it runs (started by the first pass)."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self._clean_cycle(None, self._stop.is_set)
            except Exception:  # never let the thread die silently
                log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.backoff_ms / 1000.0)

    # -- one cycle ------------------------------------------------------------------------
    def clean_once(self, now_ms: int | None = None) -> bool:
        """Clean the dirtiest eligible log once; True if a pass ran to completion."""
        return self._clean_cycle(now_ms, lambda: False)

    def _clean_cycle(self, now_ms: int | None, stopping: Callable[[], bool]) -> bool:
        with self._pass_lock:
            now = self.clock.now_ms() if now_ms is None else now_ms
            best: tuple[float, bool, TopicPartition, Log] | None = None
            for tp, plog in self._logs():
                dirty = self._measure(tp, plog, now)
                if dirty is None or not dirty.eligible(plog.settings.min_cleanable_ratio):
                    continue
                key = (dirty.forced, dirty.ratio)
                if best is None or key > (best[1], best[0]):
                    best = (dirty.ratio, dirty.forced, tp, plog)
            if best is None:
                return False
            return self._clean(best[2], best[3], now, stopping)

    def _measure(self, tp: TopicPartition, plog: Log, now_ms: int) -> DirtyRange | None:
        settings = plog.settings
        if plog.closed or not settings.compact_policy:
            return None
        with self._state_lock:
            state = self._states.get(tp)
            if state is not None and state.uncleanable:
                return None
        view = plog.begin_cleaning()
        if view is None:
            return None
        try:
            checkpoint = self._note_truncation(tp, view.truncated_to)
            dirty = measure(view, checkpoint, settings, now_ms)
        finally:
            plog.end_cleaning()
        with self._state_lock:
            state = self._states.setdefault(tp, LogCleanerState())
            state.dirty_ratio = dirty.ratio
            state.dirty_bytes = dirty.dirty_bytes
            state.clean_bytes = dirty.clean_bytes
        return dirty

    def _note_truncation(self, tp: TopicPartition, truncated_to: int | None) -> int | None:
        """The checkpoint of ``tp``, moved back to a truncation point below it."""
        with self._state_lock:
            checkpoint = self._checkpoint.get(tp)
            if truncated_to is not None and checkpoint is not None and truncated_to < checkpoint:
                checkpoint = self._checkpoint[tp] = truncated_to
                self._states.setdefault(tp, LogCleanerState()).last_cleaned_offset = checkpoint
        return checkpoint

    def _clean(
        self, tp: TopicPartition, plog: Log, now_ms: int, stopping: Callable[[], bool]
    ) -> bool:
        # Start the worker before taking the log: close() must not wait for a process start.
        worker = self._process.executor() if self._process is not None else None
        view = plog.begin_cleaning()
        if view is None:
            return False
        started = time.monotonic()
        result: PassResult | None = None
        try:
            checkpoint = self._note_truncation(tp, view.truncated_to)
            dirty = measure(view, checkpoint, plog.settings, now_ms)
            if not dirty.dirty_bytes:
                return False
            runner: PassRunner
            if worker is not None and self._process is not None:
                runner = ProcessRunner(self._process, *worker, plog, view, stopping=stopping,
                                       io_bytes_per_second=self.max_io_bytes_per_second)
            else:
                runner = InThreadRunner(plog, view, Pacer(
                    self.max_io_bytes_per_second,
                    yield_interval_s=self.yield_interval_ms / 1000.0))
            result = clean_log(plog, view, dirty, now_ms, max_map_entries=self.max_map_entries,
                               runner=runner)
        except CleaningAborted as exc:
            log.info("%s", exc)
            with self._state_lock:
                self._stats.passes_aborted += 1
            return False
        except Exception as exc:
            if plog.cleaning_invalidated(view.generation):
                log.info("cleaning of %r stopped by a concurrent change: %s", plog, exc)
                with self._state_lock:
                    self._stats.passes_aborted += 1
                return False
            log.exception("cleaning %r failed; marking it uncleanable", plog)
            with self._state_lock:
                self._states.setdefault(tp, LogCleanerState()).uncleanable = True
                self._stats.errors.append(f"{tp}: {exc!r}")
            return False
        finally:
            plog.end_cleaning()
        assert result is not None
        elapsed = time.monotonic() - started
        with self._state_lock:
            self._checkpoint[tp] = result.end_offset
            state = self._states.setdefault(tp, LogCleanerState())
            state.last_cleaned_offset = result.end_offset
            state.passes += 1
            state.last_pass_ms = now_ms
            stats = self._stats
            stats.passes += 1
            stats.bytes_read += result.bytes_read
            stats.input_bytes += result.input_bytes
            stats.bytes_written += result.bytes_written
            stats.records_removed += result.records_removed
            stats.tombstones_removed += result.tombstones_removed
            stats.segments_replaced += result.segments_replaced
            stats.seconds_cleaning += elapsed
            stats.last_pass = result
        self._write_checkpoint()
        log.info("cleaned %r: offsets %d-%d, %d records removed, %d segments replaced, "
                 "%.1f MB read in %.2fs", plog, result.first_dirty, result.end_offset,
                 result.records_removed, result.segments_replaced, result.bytes_read / 1e6,
                 elapsed)
        return True

    # -- state ----------------------------------------------------------------------------
    def forget(self, tp: TopicPartition) -> None:
        """Drop a deleted partition's checkpoint and state."""
        with self._state_lock:
            self._states.pop(tp, None)
            known = self._checkpoint.pop(tp, None) is not None
        if known:
            self._write_checkpoint()

    def state(self, tp: TopicPartition) -> LogCleanerState | None:
        with self._state_lock:
            state = self._states.get(tp)
            return None if state is None else LogCleanerState(
                state.last_cleaned_offset, state.dirty_ratio, state.dirty_bytes,
                state.clean_bytes, state.passes, state.last_pass_ms, state.uncleanable)

    def stats(self) -> CleanerStats:
        with self._state_lock:
            s = self._stats
            return CleanerStats(s.passes, s.passes_aborted, s.bytes_read, s.input_bytes,
                                s.bytes_written, s.records_removed, s.tombstones_removed,
                                s.segments_replaced, s.seconds_cleaning, s.last_pass,
                                list(s.errors))

    def checkpoint_offsets(self) -> dict[TopicPartition, int]:
        with self._state_lock:
            return dict(self._checkpoint)

    def _read_checkpoint(self) -> dict[TopicPartition, int]:
        try:
            return read_offsets(self.data_dir / CLEANER_OFFSET_CHECKPOINT)
        except (CorruptFileError, OSError) as exc:
            # Losing it only means cleaning the whole log again.
            log.warning("ignoring unreadable %s: %s", CLEANER_OFFSET_CHECKPOINT, exc)
            return {}

    def _write_checkpoint(self) -> None:
        with self._write_lock:
            with self._state_lock:
                offsets = dict(self._checkpoint)
            write_offsets(self.data_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
