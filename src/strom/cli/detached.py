"""Processes that outlive the command that started them, tracked by pid files.

A detached process runs in a session of its own (no terminal signals reach it), with stdin
from /dev/null and stdout + stderr appended to a log file. Its pid file holds the pid in
decimal and a newline. A pid counts as alive while ``/proc/<pid>`` exists and is not a
zombie, and its command line still contains the marker it was started with (so a pid reused
by an unrelated process is not mistaken for it); the starting process itself asks its
``Popen`` instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def spawn(args: Sequence[str], log: Path, pid_file: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``args`` detached, appending its output to ``log``; writes ``pid_file``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    write_pid(pid_file, process.pid)
    return process


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.write_text(f"{pid}\n")


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file``, or None when there is no (readable) pid file."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int | None, marker: str) -> bool:
    """Whether ``pid`` runs (not a zombie) with ``marker`` in its command line."""
    if pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    # an empty command line: the process is between fork and exec (or exiting); trust state
    return state(pid) not in (None, "Z", "X") and (
        not cmdline or marker in cmdline.decode(errors="replace"))


def state(pid: int) -> str | None:
    """The process state letter from ``/proc/<pid>/stat`` (``R``, ``S``, ``T`` stopped,
    ``Z`` zombie, …), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def stop(pids: dict[int, str], timeout: float) -> list[int]:
    """SIGTERM each live pid (pid → its marker; SIGCONT first, for a paused one), wait up to
    ``timeout`` for all to exit, then SIGKILL those left. Returns the pids that were killed."""
    for pid, marker in pids.items():
        if alive(pid, marker):
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(pid, marker) for pid, marker in pids.items()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    killed = [pid for pid, marker in pids.items() if alive(pid, marker)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    return killed


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
