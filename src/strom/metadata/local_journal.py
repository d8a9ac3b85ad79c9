"""The journal beside the single-node store's file: one line per metadata write since the
file (the snapshot) was last rewritten, so that a write costs what it changes, not the size
of all the metadata.

File ``<data-dir>/strom-metadata.journal``, UTF-8, one JSON object per line::

    {"seq": N, "epoch": E, "next_producer_id": M,
     "topics": {"<name>": <the topic's entry as in the snapshot> | null},   (null: removed)
     "broker_configs": {…}, "scram_credentials": {…}, "acls": […], "client_quotas": […]}

``seq`` numbers lines from 1 up, across snapshots (the snapshot records the last one folded
into it as ``journal_seq``; lines at or below it are skipped on replay). ``topics`` lists only
the topics the write changed; each of the other sections appears, whole, only when the write
changed it. Each line is appended with one ``write`` and made durable with ``fsync`` before the
write it records returns. A last line without its newline or that does not parse is a write
that never returned (a crash during the append): it is dropped at open, and the file cut back
to the lines before it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.storage.file_pool import default_pool
from strom.storage.files import fsync_dir

log = logging.getLogger("strom.metadata.local")

JOURNAL_NAME = "strom-metadata.journal"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    seq: int
    state: dict[str, Any]


def read_journal(path: Path, after_seq: int) -> tuple[list[JournalEntry], int, int]:
    """The entries with ``seq > after_seq`` (in order), the highest seq seen and the length
    of the sound prefix of the file (what :func:`cut_journal` keeps). A line that does not
    parse ends the journal there (reported, with what follows it, when it is not the last)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], after_seq, 0
    entries: list[JournalEntry] = []
    last_seq = after_seq
    sound = 0
    for line in raw.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # torn: the append never returned
        try:
            state = json.loads(line)
            seq = int(state["seq"])
        except (ValueError, KeyError, TypeError):
            rest = len(raw) - sound
            log.warning("%s: unreadable line at byte %d; the %d bytes from there on are "
                        "dropped", path, sound, rest)
            break
        sound += len(line)
        last_seq = max(last_seq, seq)
        if seq > after_seq:
            entries.append(JournalEntry(seq, state))
    return entries, last_seq, sound


def cut_journal(path: Path, length: int) -> None:
    """Truncate the journal to ``length`` bytes (durably); nothing when it is absent."""
    try:
        fd = default_pool().open_fd(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        if os.fstat(fd).st_size != length:
            os.ftruncate(fd, length)
            os.fsync(fd)
    finally:
        os.close(fd)


def append_journal(path: Path, line: Sequence[bytes]) -> int:
    """Append one encoded line (its chunks, the last ending with its newline) durably;
    returns the bytes written. System calls only (runs on a worker thread). Raises
    ``OSError`` (a line that was partly written is cut away again when possible)."""
    new = not path.exists()
    fd = default_pool().open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            for chunk in line:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):  # else a torn last line, dropped at open
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
    if new:
        fsync_dir(path.parent)
    return sum(len(chunk) for chunk in line)
