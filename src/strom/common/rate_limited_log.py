"""Logging for events an outsider can cause at will (rejected connections, malformed requests).

:class:`RateLimitedLog` writes at most ``burst`` records per ``interval_s`` window; the others
are only counted, and the next record that gets through says how many were suppressed. An
attack can therefore add at most ``burst`` lines per window to the log, and an operator still
learns that it happened and how often.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_BURST = 10
DEFAULT_INTERVAL_S = 60.0


class RateLimitedLog:
    """A rate-limited view of one logger at one level. Not thread-safe: one owner thread
    (the event loop for the network layer)."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        *,
        burst: int = DEFAULT_BURST,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._burst = burst
        self._interval_s = interval_s
        self._clock = clock
        self._window_start = float("-inf")
        self._in_window = 0
        self._suppressed = 0

    @property
    def suppressed(self) -> int:
        """Records counted but not written since the last one that was written."""
        return self._suppressed

    def log(self, message: str, *args: object, exc_info: BaseException | None = None) -> bool:
        """Write the record unless this window's budget is spent; True if it was written."""
        now = self._clock()
        if now - self._window_start >= self._interval_s:
            self._window_start = now
            self._in_window = 0
        if self._in_window >= self._burst:
            self._suppressed += 1
            return False
        self._in_window += 1
        if self._suppressed:
            message += " (%d similar messages suppressed)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self._logger.log(self._level, message, *args, exc_info=exc_info)
        return True
