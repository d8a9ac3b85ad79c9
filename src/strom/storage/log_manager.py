"""All partition logs of one data directory: loading, creation, deletion, checkpoints."""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

from strom.common.clock import Clock
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.errors import KafkaStorageError
from strom.common.types import TopicPartition
from strom.storage import log_maker
from strom.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_offsets,
    write_offsets,
)
from strom.storage.cleaner import DEFAULT_BACKOFF_MS, LogCleaner
from strom.storage.file_pool import (
    CAPACITY_CONFIG,
    configure_default_pool,
    default_pool,
    nofile_limits,
)
from strom.storage.files import (
    DELETED_DIR_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptFileError,
    atomic_write,
    file_name,
    fsync_dir,
    unlink_quietly,
)
from strom.storage.log import (
    Log,
    make_new_log_files,
    new_log_files_item,
    open_made_log_file,
    parse_partition_dir,
)
from strom.storage.partition_metadata import read_topic_id

log = logging.getLogger("strom.storage.log_manager")

CLEAN_SHUTDOWN_FILE = ".strom_cleanshutdown"
_PARTITION_DIR = re.compile(r"^.+-\d+$")


def cleaner_settings(config: BrokerConfig) -> tuple[int, float | None]:
    """``log.cleaner.backoff.ms`` and ``log.cleaner.io.max.bytes.per.second`` (None: its
    default, no cap) as :meth:`LogManager.start_cleaner` takes them."""
    io_cap = float(config.get("log.cleaner.io.max.bytes.per.second"))
    return int(config.get("log.cleaner.backoff.ms")), io_cap if io_cap < 1e300 else None


class DeletedLog(NamedTuple):
    """A log :meth:`LogManager.delete_logs` deleted: its partition and topic id (None: the
    log had none)."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None


def _stray(directory: Path, topic_id: uuid.UUID) -> bool:
    """Whether ``directory`` belongs to a topic id other than ``topic_id``."""
    try:
        stored = read_topic_id(directory)
    except (CorruptFileError, OSError):
        return False  # unreadable: adopted like a log without an id (Log.open says so)
    return stored is not None and stored != topic_id


def _remove_dir(directory: Path) -> None:
    """Remove a partition directory as :meth:`Log.delete` does (renamed to ``-delete``
    first); KAFKA_STORAGE_ERROR when it cannot be moved away."""
    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
    try:
        os.rename(directory, doomed)
    except OSError as exc:
        raise KafkaStorageError(f"cannot remove {directory}: {exc.strerror or exc}") from exc
    shutil.rmtree(doomed, ignore_errors=True)


def remove_new_log_dir(directory: Path) -> None:
    """Remove the directory of a log whose creation failed. ``rmtree`` needs descriptors, which
    may be what ran out: the files an empty new log can have are then removed by name."""
    shutil.rmtree(directory, ignore_errors=True)
    if os.path.lexists(directory):
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            unlink_quietly(directory / file_name(0, suffix))
        try:
            directory.rmdir()
        except OSError as exc:
            log.warning("cannot remove %s after its log failed to open: %s", directory, exc)


@dataclass(frozen=True, slots=True)
class LogToOpen:
    """Everything opening (or, ``new``, creating) one partition's log needs, decided on the
    log manager's thread so that :meth:`open` may run in another (it touches no manager
    state; the file pool is thread-safe)."""

    tp: TopicPartition
    directory: Path
    config: TopicConfig
    clock: Clock
    new: bool
    recovery_point: int = 0
    log_start_offset: int = 0
    clean_shutdown: bool = True
    topic_id: uuid.UUID | None = None

    def open(self) -> Log:
        """Open the log (recovering it as its directory needs), labelled with ``topic_id``
        when given. A directory of another topic id is removed first and the log created
        afresh (KAFKA_STORAGE_ERROR if it cannot be removed). All or nothing for a new one:
        a directory this call created is removed again if the open or the label fails."""
        directory = self.directory
        created = not os.path.lexists(directory)
        fresh = False
        if not created and self.topic_id is not None and _stray(directory, self.topic_id):
            log.warning("removing %s, left by another topic than id %s", directory,
                        self.topic_id)
            _remove_dir(directory)
            created = fresh = True
        if created:
            start = 0 if fresh else self.log_start_offset
            made = self._make_files(start)
            if made is not None:
                return self._build(made, start)
            created = False  # made meanwhile by another: opened as found
        try:
            plog = default_pool().with_descriptors(partial(
                Log.open, directory, self.config, clock=self.clock,
                recovery_point=0 if fresh else self.recovery_point,
                log_start_offset=0 if fresh else self.log_start_offset,
                clean_shutdown=True if fresh else self.clean_shutdown), directory)
            return _label(plog, self.topic_id)
        except BaseException:
            if created:
                remove_new_log_dir(directory)
            raise

    def make_files(self) -> io.FileIO | None:
        """The first half of creating a new log, system calls only (any thread): its
        directory and files (:func:`~strom.storage.log.make_new_log_files`), the first
        ``.log`` returned open for :meth:`build`; None if the directory exists (then
        :meth:`open` it)."""
        return self._make_files(self.log_start_offset)

    def files_to_make(self) -> log_maker.Item:
        """What :class:`~strom.storage.log_maker.LogMaker` makes for :meth:`make_files`."""
        return new_log_files_item(self.directory, self.topic_id, self.log_start_offset)

    def open_made(self) -> io.FileIO:
        """The ``.log`` the log maker made, open for :meth:`build` (its directory is removed
        again if that fails)."""
        try:
            return open_made_log_file(self.directory, self.log_start_offset)
        except BaseException:
            remove_new_log_dir(self.directory)
            raise

    def build(self, log_file: io.FileIO) -> Log:
        """The second half: the :class:`Log` over what :meth:`make_files` made (the
        directory is removed again if this fails)."""
        return self._build(log_file, self.log_start_offset)

    def _make_files(self, start: int) -> io.FileIO | None:
        try:
            os.mkdir(self.directory)
        except FileExistsError:
            return None
        try:  # (each open retries on a full descriptor table itself)
            return make_new_log_files(self.directory, self.topic_id, start)
        except BaseException:
            remove_new_log_dir(self.directory)
            raise

    def _build(self, log_file: io.FileIO, start: int) -> Log:
        try:
            return Log.create_new(self.directory, self.config, clock=self.clock,
                                  topic_id=self.topic_id, log_start_offset=start,
                                  log_file=log_file)
        except BaseException:
            remove_new_log_dir(self.directory)
            raise


def _label(plog: Log, topic_id: uuid.UUID | None) -> Log:
    """``plog`` labelled with ``topic_id`` (closed if that fails)."""
    if topic_id is not None:
        try:
            plog.assign_topic_id(topic_id)
        except BaseException:
            plog.close()
            raise
    return plog


class LogManager:
    """Owns every :class:`Log` under ``data_dir`` (one ``<topic>-<partition>`` directory each).

    Data-directory files: ``recovery-point-offset-checkpoint`` and
    ``log-start-offset-checkpoint`` (Kafka's offset checkpoint format, rewritten atomically by
    :meth:`checkpoint`), and ``.strom_cleanshutdown``, an empty marker written last by
    :meth:`shutdown` and removed by :meth:`load`: when it is missing at load the previous run
    crashed, and each log recovers the segments after its checkpointed recovery point.

    Compaction: :meth:`start_cleaner` runs a :class:`LogCleaner` thread (or call
    :meth:`clean_once` from a worker thread instead), whose passes do their CPU-heavy work in
    a worker process (:mod:`strom.storage.cleaner_worker`); :meth:`shutdown` stops both first.

    Thread-safety: owned by the event-loop thread. :meth:`flush_due` and :meth:`checkpoint`
    only read the log map and may run in a worker thread (``Log.flush`` is thread-safe), as
    does the cleaner (it copies the log map; see :class:`Log` for the per-log rules).
    Lifecycle: construct, :meth:`load` once, use, :meth:`shutdown`.
    """

    def __init__(self, data_dir: Path, broker_config: BrokerConfig, clock: Clock) -> None:
        self.data_dir = Path(data_dir)
        self.broker_config = broker_config
        self.clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        #: Partition directories found by :meth:`scan` and not opened yet.
        self._unloaded: dict[TopicPartition, Path] = {}
        self._recovery_points: dict[TopicPartition, int] = {}
        self._log_starts: dict[TopicPartition, int] = {}
        self.loaded_cleanly: bool | None = None
        self._cleaner: LogCleaner | None = None

    # -- loading --------------------------------------------------------------------------
    def load(self, topic_configs: Callable[[str], TopicConfig]) -> None:
        """:meth:`scan`, then open every log found (recovering after a crash)."""
        self.scan()
        for tp in list(self._unloaded):
            self._open_unloaded(tp, topic_configs(tp.topic))
        self.checkpoint()

    def scan(self) -> None:
        """Find the partition directories without opening them (a few system calls each,
        however many there are) and remove the clean-shutdown marker; each log is opened
        later, on first use (:meth:`create`), with the recovery its directory needs.

        Sets the process's file-pool capacity from ``log.max.open.files`` first."""
        pool = configure_default_pool(int(self.broker_config.get(CAPACITY_CONFIG)))
        soft, hard = nofile_limits()
        log.info("open-file limit %s (hard %s): at most %d segment files open (%s)", soft, hard,
                 pool.capacity, CAPACITY_CONFIG)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self.loaded_cleanly = clean
        self._recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        self._log_starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        if clean:
            marker.unlink()
            fsync_dir(self.data_dir)
        else:
            log.info("no clean-shutdown marker in %s: recovering logs", self.data_dir)
        for entry in sorted(os.scandir(self.data_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETED_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)  # a deletion the crash cut short
                continue
            if not _PARTITION_DIR.match(entry.name):
                continue
            topic, partition = parse_partition_dir(entry.name)
            tp = TopicPartition(topic, partition)
            if tp not in self._logs:
                self._unloaded[tp] = Path(entry.path)

    def _open_unloaded(self, tp: TopicPartition, config: TopicConfig) -> Log:
        spec = self.to_open(tp, config)
        return self.register(spec, spec.open())

    # -- opening in two steps: the file work anywhere, the bookkeeping on the owner ----------
    def to_open(self, tp: TopicPartition, config: TopicConfig,
                topic_id: uuid.UUID | None = None) -> LogToOpen:
        """How the log of ``tp`` is opened (found by :meth:`scan`: with the recovery its
        directory needs) or created, labelled with ``topic_id`` when given;
        :meth:`LogToOpen.open` does the file work (in any thread), :meth:`register` makes the
        result this manager's (owner thread)."""
        path = self._unloaded.get(tp)
        if path is not None:
            return LogToOpen(tp, path, config, self.clock, False,
                             self._recovery_points.get(tp, 0), self._log_starts.get(tp, 0),
                             bool(self.loaded_cleanly), topic_id)
        return LogToOpen(tp, self.data_dir / str(tp), config, self.clock, True,
                         topic_id=topic_id)

    def register(self, spec: LogToOpen, plog: Log) -> Log:
        """Make ``plog`` (opened from ``spec``) the log of its partition; when another was
        registered meanwhile, ``plog`` is closed and that one returned."""
        existing = self._logs.get(spec.tp)
        if existing is not None:
            plog.close()
            return existing
        self._unloaded.pop(spec.tp, None)
        self._logs[spec.tp] = plog
        return plog

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offsets(self.data_dir / name)
        except (CorruptFileError, OSError) as exc:
            # Losing it only costs time (full recovery) or a later log start; never data.
            log.warning("ignoring unreadable %s: %s", name, exc)
            return {}

    # -- the log map ----------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get(TopicPartition(topic, partition))

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def create(self, topic: str, partition: int, config: TopicConfig,
               topic_id: uuid.UUID | None = None, *, sync_dir: bool = True) -> Log:
        """The log of a partition: opened if :meth:`scan` found it, else created empty;
        labelled with ``topic_id`` (``partition.metadata``) when given. An open log is
        returned as it is: its topic id is for the caller to check. A directory that no open
        log owns (found by :meth:`scan`, or one whose deletion failed) is taken over only if it
        belongs to ``topic_id`` or to no topic id; another topic's is removed first
        (KAFKA_STORAGE_ERROR if it cannot be).

        All or nothing: if the log cannot be opened or labelled, a directory this call
        created is removed again before the error propagates. Without ``sync_dir`` the new
        directory entry is made durable by a later :meth:`sync_dir` (one fsync for many
        logs)."""
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        spec = self.to_open(tp, config, topic_id)
        created = not os.path.lexists(spec.directory) or (
            topic_id is not None and _stray(spec.directory, topic_id))
        plog = self.register(spec, spec.open())
        if created and sync_dir:
            try:
                fsync_dir(self.data_dir)
            except BaseException:
                self.delete_logs([tp])
                raise
        return plog

    def sync_dir(self) -> None:
        """fsync the data directory (new log directories created with ``sync_dir=False``)."""
        fsync_dir(self.data_dir)

    def delete_topic(self, topic: str) -> None:
        """Delete every partition log of ``topic`` (directories removed)."""
        self.delete_logs([tp for tp in self.partitions() if tp.topic == topic])

    def delete_logs(self, partitions: Iterable[TopicPartition]) -> list[DeletedLog]:
        """Delete the logs of ``partitions`` that exist, opened or not (directories removed);
        returns what was deleted: each log's partition and topic id."""
        deleted: list[DeletedLog] = []
        for tp in partitions:
            path = self._unloaded.pop(tp, None)
            if path is not None:  # never opened: its directory goes as Log.delete does it
                try:
                    topic_id = read_topic_id(path)
                except (CorruptFileError, OSError):
                    topic_id = None
                _remove_dir(path)
                deleted.append(DeletedLog(tp.topic, tp.partition, topic_id))
            plog = self._logs.pop(tp, None)
            if plog is None:
                continue
            plog.delete()  # waits for an in-flight cleaning pass to stop
            deleted.append(DeletedLog(plog.topic, plog.partition, plog.topic_id))
            if self._cleaner is not None:
                self._cleaner.forget(tp)
        if deleted:
            fsync_dir(self.data_dir)
        return deleted

    def partitions(self) -> list[TopicPartition]:
        """The partitions that have a log here (opened or not)."""
        return [*self._logs, *self._unloaded]

    def unloaded(self) -> int:
        """How many logs found at start are not opened yet."""
        return len(self._unloaded)

    # -- periodic work --------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write every log's recovery point and log start offset (those not opened yet keep
        the values read at :meth:`scan`)."""
        logs = list(self._logs.items())
        unloaded = list(self._unloaded)
        points = {tp: self._recovery_points[tp] for tp in unloaded
                  if tp in self._recovery_points}
        points.update((tp, plog.recovery_point) for tp, plog in logs)
        starts = {tp: self._log_starts[tp] for tp in unloaded if tp in self._log_starts}
        starts.update((tp, plog.log_start_offset) for tp, plog in logs)
        write_offsets(self.data_dir / RECOVERY_POINT_CHECKPOINT, points)
        write_offsets(self.data_dir / LOG_START_OFFSET_CHECKPOINT, starts)

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log and expire idle producers; returns bytes deleted.

        A failing log does not stop the others; the first error is raised at the end."""
        deleted = 0
        error: BaseException | None = None
        for plog in list(self._logs.values()):
            try:
                deleted += plog.apply_retention(now_ms)
                plog.remove_expired_producers(now_ms)
            except OSError as exc:
                log.error("retention failed for %r: %s", plog, exc)
                error = error or exc
        if error is not None:
            raise error
        return deleted

    def flush_due(self, now_ms: int) -> int:
        """fsync logs whose ``flush.ms`` elapsed, and segments that rolled since the last
        flush (so crash recovery only has the active segment to scan); returns logs flushed."""
        flushed = 0
        for plog in list(self._logs.values()):
            if plog.closed or plog.unflushed_messages <= 0:
                continue
            rolled = plog.recovery_point < plog.active_segment.base_offset
            if now_ms - plog.last_flush_ms >= plog.flush_ms:
                plog.flush()
            elif rolled:
                plog.flush(plog.active_segment.base_offset)
            else:
                continue
            flushed += 1
        return flushed

    # -- compaction -----------------------------------------------------------------------
    @property
    def cleaner(self) -> LogCleaner:
        """The log cleaner (created on first use, after :meth:`load`)."""
        if self._cleaner is None:
            self._cleaner = LogCleaner(self.data_dir, lambda: list(self._logs.items()),
                                       self.clock)
        return self._cleaner

    def start_cleaner(
        self, backoff_ms: int = DEFAULT_BACKOFF_MS, max_io_bytes_per_second: float | None = None
    ) -> None:
        """Start the cleaner thread: it compacts the dirtiest ``compact`` log, sleeping
        ``backoff_ms`` whenever none is eligible; ``max_io_bytes_per_second`` caps its reads.
        Never blocks produce or fetch on a lock for more than a segment swap, and the
        decoding / re-encoding runs in the cleaner's worker process, off the event loop's GIL."""
        cleaner = self.cleaner
        cleaner.backoff_ms = backoff_ms
        cleaner.max_io_bytes_per_second = max_io_bytes_per_second
        cleaner.start()

    def reconfigure(self, broker_config: BrokerConfig) -> None:
        """A changed broker config (dynamic broker configs): the cleaner takes its backoff and
        I/O cap at its next pass. Logs get their new topic configs from their owner."""
        self.broker_config = broker_config
        if self._cleaner is not None:
            backoff_ms, io_cap = cleaner_settings(broker_config)
            self._cleaner.backoff_ms = backoff_ms
            self._cleaner.max_io_bytes_per_second = io_cap

    def stop_cleaner(self) -> None:
        """Stop the cleaner thread (an in-flight pass is aborted at its next batch) and its
        worker process."""
        if self._cleaner is not None:
            self._cleaner.stop()

    def clean_once(self, now_ms: int | None = None) -> bool:
        """One cleaner cycle in the calling thread (an alternative to :meth:`start_cleaner`
        for a broker that schedules its own worker threads); True if a log was cleaned."""
        return self.cleaner.clean_once(now_ms)

    # -- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the cleaner, flush and close every log, write the checkpoints, then the
        clean-shutdown marker — unless a log that needed recovery at start was never opened
        (it still needs it)."""
        self.stop_cleaner()
        for plog in self._logs.values():
            plog.flush()
        for plog in self._logs.values():
            plog.close()
        self.checkpoint()
        if self.loaded_cleanly or not self._unloaded:
            atomic_write(self.data_dir / CLEAN_SHUTDOWN_FILE, b"")
        self._logs = {}
        self._unloaded = {}
