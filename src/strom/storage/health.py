"""Whether a data directory is failing writes, and the one place such failures are reported.

Every write that fails with an ``OSError`` (a full disk: ENOSPC, EFBIG past RLIMIT_FSIZE, EIO,
EROFS) — partition appends and fsyncs, the cluster metadata file, checkpoints — goes through
:meth:`LogDirHealth.failure`, which turns it into the error clients see
(:class:`~strom.common.errors.KafkaStorageError`, KAFKA_STORAGE_ERROR on the wire; the
handlers of APIs where Kafka answers something else map it from there) and reports it to the
operator **once per failure episode**, at ERROR. Later failures of the same episode are
logged at DEBUG only, so a client retrying against a full disk cannot flood the log. A
successful write ends the episode (:meth:`LogDirHealth.succeeded`, reported at WARNING).
Episodes that start again and again (a nearly full disk where small writes still fit) are
reported at most once per ``REPORT_INTERVAL_S``.

Unlike Kafka, which takes a failed log directory offline until restart (and stops the
broker when it was the last one), strom keeps serving: reads go on, and writes succeed again
as soon as space is freed.

Owned by the event-loop thread (background threads report through it too: logging is
thread-safe and the counters are advisory).
"""

from __future__ import annotations

import logging
from pathlib import Path

from strom.common.errors import KafkaError, KafkaStorageError
from strom.common.rate_limited_log import RateLimitedLog

log = logging.getLogger("strom.storage")

REPORT_INTERVAL_S = 300.0


class LogDirHealth:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.failing = False
        self.failures = 0  # failed writes in the current episode
        self._failed = RateLimitedLog(log, logging.ERROR, burst=1, interval_s=REPORT_INTERVAL_S)
        self._recovered = RateLimitedLog(log, logging.WARNING, burst=1,
                                         interval_s=REPORT_INTERVAL_S)

    def failure(self, exc: OSError, doing: str) -> KafkaError:
        """Record a failed write (``doing``: what was being written); return the client error."""
        reason = exc.strerror or str(exc)
        self.failures += 1
        if not self.failing:
            self.failing = True
            self._failed.log(
                "log directory %s is failing: %s while %s; writes to it are refused with "
                "KAFKA_STORAGE_ERROR until space is freed (reported once; the next failures "
                "are logged at DEBUG)", self.directory, reason, doing)
        else:
            log.debug("log directory %s: %s while %s", self.directory, reason, doing)
        return KafkaStorageError(f"log directory error while {doing}: {reason}")

    def succeeded(self) -> None:
        """A write went through: end the failure episode, if one is under way."""
        if self.failing:
            self.failing = False
            self._recovered.log("log directory %s accepts writes again (%d failed writes)",
                                self.directory, self.failures)
            self.failures = 0
