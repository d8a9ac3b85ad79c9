"""Crash-safe replacement of log segments by cleaned ones (the cleaner's file protocol).

A cleaning pass replaces a run of segments ``S1 … Sk`` (base offsets ``b1 < … < bk``, the
run ending where ``S(k+1)`` begins, at ``end``) by one cleaned segment with base ``b1``::

    1. write   <b1>.log.cleaned, <b1>.index.cleaned, <b1>.timeindex.cleaned, the
               <b1>.txnindex.cleaned (see below) and <b1>.range.cleaned
               (text: "<b1> <end>\n"), each fsynced
    2. rename  indexes, range, then the log from ``.cleaned`` to ``.swap``; fsync the dir
               — the ``.log.swap`` rename is the commit point
    3. unlink  the files of S2 … Sk (their descriptors stay open for in-flight reads)
    4. rename  indexes, then the log, from ``.swap`` over ``<b1>.log/.index/.timeindex``
               (and ``.txnindex``), replacing S1's files; fsync the dir; unlink
               ``<b1>.range.swap``

The transaction index exists only for segments with aborted transactions, so the cleaned
group writes ``<b1>.txnindex.cleaned`` whenever it keeps an entry *or* S1 has a
``.txnindex``: the rename then always replaces S1's index, never leaving a stale one under
the new segment (a stale entry would hide committed records from read_committed readers).

:func:`recover_interrupted_swaps` runs at load, before the segments are opened:

* ``*.cleaned`` — a pass that never committed: deleted (the old segments are intact);
* ``<b>.log.swap`` — committed: every segment with a base in ``[b, end)`` is deleted and the
  ``.swap`` files are renamed into place (``end`` from the range file; without one, the end
  of the swap file's last batch — Kafka's rule, which may leave superseded segments);
* ``<b>.range.swap`` without ``<b>.log.swap`` — step 4 renamed the log but its unlinks may
  not be durable: the segments with a base in ``(b, end)`` are deleted;
* an index ``.swap`` without its ``.log.swap`` is deleted (missing indexes are rebuilt).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from strom.common.errors import CorruptMessageError
from strom.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
    fsync_dir,
    offset_from_name,
    unlink_quietly,
)
from strom.storage.segment import iter_headers

log = logging.getLogger("strom.storage.swap")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
RANGE_SUFFIX = ".range"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: Rename order: the log last, so its ``.swap`` proves the other files moved.
RENAME_ORDER = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)


def segment_file(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    """``<directory>/<base, 20 digits><suffix><extra>`` (extra: "", .cleaned or .swap)."""
    return directory / (file_name(base_offset, suffix) + extra)


def rename_segment_files(directory: Path, base_offset: int, src: str, dst: str) -> None:
    """Rename a segment's files from suffix ``src`` to ``dst`` (indexes first, log last).

    Missing index files are skipped (the segment rebuilds them); a missing log raises.
    """
    for suffix in RENAME_ORDER:
        source = segment_file(directory, base_offset, suffix, src)
        if suffix != LOG_SUFFIX and not source.exists():
            continue
        os.replace(source, segment_file(directory, base_offset, suffix, dst))


def write_range_file(directory: Path, base_offset: int, end_offset: int) -> None:
    """Step 1's ``<base>.range.cleaned``: the offsets ``[base, end)`` the swap replaces."""
    path = segment_file(directory, base_offset, RANGE_SUFFIX, CLEANED_SUFFIX)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{base_offset} {end_offset}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_swap(directory: Path, base_offset: int) -> None:
    """Step 2: ``.cleaned`` → ``.swap`` (range before the log), then fsync the directory."""
    os.replace(segment_file(directory, base_offset, RANGE_SUFFIX, CLEANED_SUFFIX),
               segment_file(directory, base_offset, RANGE_SUFFIX, SWAP_SUFFIX))
    rename_segment_files(directory, base_offset, CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_dir(directory)


def finish_swap(directory: Path, base_offset: int) -> None:
    """End of step 4, after the log took the new segment: fsync, drop the range file."""
    fsync_dir(directory)
    unlink_quietly(segment_file(directory, base_offset, RANGE_SUFFIX, SWAP_SUFFIX))


def discard_swap(directory: Path, base_offset: int) -> None:
    """Remove the files of a pass that will not be swapped in (``.cleaned`` or ``.swap``)."""
    for extra in (CLEANED_SUFFIX, SWAP_SUFFIX):
        remove_segment_files(directory, base_offset, extra)
        unlink_quietly(segment_file(directory, base_offset, RANGE_SUFFIX, extra))


def _read_range(path: Path) -> int | None:
    """The end offset in a range file, or None if it is missing or unreadable."""
    try:
        _, end = path.read_text().split()
        return int(end)
    except (OSError, ValueError):
        return None


def remove_segment_files(directory: Path, base_offset: int, extra: str = "") -> None:
    for suffix in SEGMENT_SUFFIXES:
        unlink_quietly(segment_file(directory, base_offset, suffix, extra))


def _swap_end_offset(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a ``.log.swap`` file."""
    end = base_offset
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        try:
            for header in iter_headers(fd, 0, size):
                end = header.next_offset
        except CorruptMessageError:
            pass  # fsynced before the rename, so this is unexpected; keep the valid prefix
    finally:
        os.close(fd)
    return end


def recover_interrupted_swaps(directory: Path) -> int:
    """Finish or undo the segment replacements a crash interrupted (rules in the module
    docstring); returns the number of swaps completed."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            unlink_quietly(directory / name)
    log_swaps: set[int] = set()
    ranges: dict[int, int | None] = {}
    index_swaps: list[tuple[int, str]] = []
    for name in names:
        if not name.endswith(SWAP_SUFFIX):
            continue
        stem = name[: -len(SWAP_SUFFIX)]
        for suffix in (LOG_SUFFIX, RANGE_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                       TXN_INDEX_SUFFIX):
            base = offset_from_name(stem, suffix)
            if base is None:
                continue
            if suffix == LOG_SUFFIX:
                log_swaps.add(base)
            elif suffix == RANGE_SUFFIX:
                ranges[base] = _read_range(directory / name)
            else:
                index_swaps.append((base, name))
            break
        else:
            unlink_quietly(directory / name)
    for base, name in index_swaps:
        if base not in log_swaps:
            unlink_quietly(directory / name)
    if not log_swaps and not ranges:
        return 0
    segments = sorted(b for b in (offset_from_name(n, LOG_SUFFIX) for n in names)
                      if b is not None)
    for base in sorted(log_swaps):
        scanned = _swap_end_offset(segment_file(directory, base, LOG_SUFFIX, SWAP_SUFFIX), base)
        end = max(scanned, ranges.get(base) or base, base + 1)
        log.warning("%s: completing the interrupted swap of segments %d-%d", directory, base,
                    end - 1)
        for other in segments:
            if base <= other < end:
                remove_segment_files(directory, other)
        rename_segment_files(directory, base, SWAP_SUFFIX, "")
    for base, range_end in ranges.items():
        if base not in log_swaps and range_end is not None:
            log.warning("%s: removing segments %d-%d replaced by a completed swap", directory,
                        base + 1, range_end - 1)
            for other in segments:
                if base < other < range_end:
                    remove_segment_files(directory, other)
        unlink_quietly(segment_file(directory, base, RANGE_SUFFIX, SWAP_SUFFIX))
    fsync_dir(directory)
    return len(log_swaps)
