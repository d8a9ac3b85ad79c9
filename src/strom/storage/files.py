"""Small file-system helpers shared by the storage modules: names, atomic writes, fsync.

Every file that must never be seen half-written (checkpoints, snapshots) is written to
``<name>.tmp``, fsynced, renamed over the target and the directory fsynced, so a crash leaves
either the old or the new content. Descriptors are opened through the process's file pool
(:meth:`~strom.storage.file_pool.FilePool.open_fd`), so a process out of descriptors closes
idle segment files before it fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from strom.common.errors import StromError
from strom.storage.file_pool import default_pool

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
TMP_SUFFIX = ".tmp"
DELETED_DIR_SUFFIX = "-delete"


class CorruptIndexError(StromError):
    """An index file failed its sanity check; the caller rebuilds it from the log."""


class CorruptFileError(StromError):
    """A checkpoint or snapshot file cannot be parsed (or fails its CRC)."""


def parse_partition_dir(name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` -> (topic, partition); ValueError if the name is not one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def file_name(offset: int, suffix: str) -> str:
    """Kafka's file naming: the offset zero-padded to 20 digits, then the suffix."""
    return f"{offset:020d}{suffix}"


def offset_from_name(name: str, suffix: str) -> int | None:
    """The offset encoded in a ``<20 digits><suffix>`` file name, or None if it is not one."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def fsync_dir(directory: Path) -> None:
    """Make renames / creations / unlinks in ``directory`` durable."""
    fd = default_pool().open_fd(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fully(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """``os.pwrite`` until every byte is written (short writes are legal for regular files)."""
    view = memoryview(data)
    written = 0
    total = len(view)
    while written < total:
        written += os.pwrite(fd, view[written:], position + written)


def read_fully(fd: int, size: int, position: int) -> bytes:
    """``os.pread`` up to ``size`` bytes; fewer only at end of file."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def atomic_write(path: Path, data: bytes | Sequence[bytes], *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` (bytes, or chunks written one after another) via tmp +
    fsync + rename (+ directory fsync).

    If writing the tmp file fails (a full disk), it is removed and ``path`` is untouched."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = default_pool().open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            position = 0
            for chunk in ((data,) if isinstance(data, bytes) else data):
                write_fully(fd, chunk, position)
                position += len(chunk)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    if sync:
        fsync_dir(path.parent)


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
