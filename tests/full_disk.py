"""A real full disk for broker tests: a small tmpfs mounted for the test, filled on demand.

RLIMIT_FSIZE (used elsewhere) fails only writes past a size per file; a full file system
also fails the small files (cluster metadata, checkpoints, new partitions) with ENOSPC.
Mounting needs root (CI runs as root); elsewhere the tests using it are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size_mib: int = 8) -> Iterator[Path]:
    """Mount a ``size_mib`` MiB tmpfs at ``path`` (created) for the duration."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the file system is full; return it (delete it to free the space)."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        while True:  # the last partial page
            try:
                out.write(b"\0")
            except OSError:
                break
    return filler


def leftover_tmp_files(directory: Path) -> list[Path]:
    """The ``*.tmp`` files under ``directory``.

    The broker may be removing a partition directory it failed to create (a retried
    FindCoordinator creating ``__consumer_offsets``) while this walks: ``os.walk`` skips a
    directory that vanished between listing and opening, where ``Path.rglob`` raised.
    """
    return sorted(Path(root) / name for root, _dirs, files in os.walk(directory)
                  for name in files if name.endswith(".tmp"))
