"""Clock seam: wall-clock milliseconds and a monotonic clock, swappable in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Source of time for everything that expires, rolls or timestamps."""

    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for timeouts and durations."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to; for unit tests of expiry logic."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._mono += ms / 1000.0


SYSTEM_CLOCK = SystemClock()
