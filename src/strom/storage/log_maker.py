"""New log directories made by a helper process, so that a burst of topic creations does not
slow the broker's clients.

Making a new log is system calls only (a directory, ``partition.metadata``, the first
``.log``), about 100 us of kernel time each on a warm ext4 and several times that on a cold
one. Made on a worker thread of the broker, a burst of a thousand logs kept a core in the
kernel and the thread took the GIL between its system calls, while the event loop built the
logs' objects and served clients: a healthy producer's p99 during a 1,000-topic burst on one
broker was 5.7 ms against 4.6 ms with the files made here (``bench/admin_bench.py``,
medians of 5 interleaved runs; docs/benchmarks.md).
The helper shares no GIL with the broker and runs at a lower priority (``nice``
:data:`NICE`), so it takes what the clients leave.

The helper is a ``python -I -S -c`` child speaking over its stdin / stdout, one request at a
time (a lock): a request is a 4-byte little-endian length and a ``marshal``-ed list of
``(directory, metadata_name, metadata_bytes, log_name)`` (``metadata_name`` None: no
metadata file); the reply the same framing around one outcome per item: ``None`` (made),
``0`` (the directory existed: nothing was touched) or ``(errno, strerror)`` (nothing of that
log is left). ``marshal`` is safe here: both ends are this interpreter. The child exits when
its stdin closes (its broker stopped or died). Files are not fsynced (the caller syncs the
data directory once for the burst, as before).

:class:`LogMaker` raises :class:`LogMakerGone` when the helper cannot be started or does not
answer; the caller then makes the logs itself (a directory the helper made before it died is
found and opened as an existing one, as after a crash).
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Literal

log = logging.getLogger(__name__)

#: The helper's niceness: it yields the cores to the broker's clients (a topic burst only
#: needs what is left), without starving when the machine is busy as SCHED_IDLE would.
NICE = 10

#: One item of a request: (directory, metadata file name or None, its bytes, ``.log`` name).
Item = tuple[str, str | None, bytes, str]

#: One outcome: None (made), False (the directory existed, nothing touched) or the OSError.
Outcome = None | Literal[False] | OSError

_WORKER = r"""
import marshal, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C stops the broker, which closes stdin
os.nice(int(sys.argv[1]))
read, write = sys.stdin.buffer.read, sys.stdout.buffer.write
flush = sys.stdout.buffer.flush
def make(directory, meta_name, meta, log_name):
    try:
        os.mkdir(directory)
    except FileExistsError:
        return 0
    except OSError as exc:
        return (exc.errno or 0, exc.strerror or str(exc))
    made = []
    try:
        if meta_name is not None:
            path = directory + "/" + meta_name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            made.append(path)
            try:
                view = memoryview(meta)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        path = directory + "/" + log_name
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        return None
    except OSError as exc:
        for path in made:
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            os.rmdir(directory)
        except OSError:
            pass
        return (exc.errno or 0, exc.strerror or str(exc))
while True:
    head = read(4)
    if len(head) < 4:
        break
    items = marshal.loads(read(int.from_bytes(head, "little")))
    body = marshal.dumps([make(*item) for item in items])
    write(len(body).to_bytes(4, "little") + body)
    flush()
"""


class LogMakerGone(Exception):
    """The helper could not be started or stopped answering."""


class LogMaker:
    """The helper process, started on first use; thread-safe (one request at a time)."""

    def __init__(self, nice: int = NICE) -> None:
        self._nice = nice
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False

    def make(self, items: Sequence[Item]) -> list[Outcome]:
        """Make each item's directory and files; one outcome per item, in order."""
        body = marshal.dumps(list(items))
        with self._lock:
            if self._closed:
                raise LogMakerGone("the log maker is closed")
            process = self._process or self._start()
            stdin, stdout = _pipes(process)
            try:
                stdin.write(len(body).to_bytes(4, "little") + body)
                stdin.flush()
                head = stdout.read(4)
                reply = stdout.read(int.from_bytes(head, "little")) if len(head) == 4 else b""
                outcomes = marshal.loads(reply)
            except (OSError, EOFError, ValueError, TypeError) as exc:
                self._stop()
                raise LogMakerGone(f"the log maker did not answer: {exc}") from exc
        if not isinstance(outcomes, list) or len(outcomes) != len(items):
            raise LogMakerGone("the log maker answered out of step")
        return [None if outcome is None else False if outcome == 0
                else OSError(outcome[0], outcome[1]) for outcome in outcomes]

    def close(self) -> None:
        """Stop the helper (its stdin closes: it exits)."""
        with self._lock:
            self._closed = True
            self._stop()

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WORKER, str(self._nice)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True)
        except OSError as exc:
            raise LogMakerGone(f"cannot start the log maker: {exc}") from exc
        return self._process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        stdin, stdout = _pipes(process)
        for pipe in (stdin, stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _pipes(process: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    assert process.stdin is not None and process.stdout is not None
    return process.stdin, process.stdout


def available() -> bool:
    """Whether this platform can run the helper (``os.nice`` and a Python executable)."""
    return hasattr(os, "nice") and bool(sys.executable)
