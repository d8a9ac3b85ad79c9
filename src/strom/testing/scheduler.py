"""A manual twin of :class:`strom.common.timer.Scheduler` for deterministic tests.

Timers fire only inside :meth:`ManualScheduler.advance`, in due order (ties in the order they
were scheduled), with the :class:`~strom.common.clock.ManualClock` moved to each timer's due
time before its callback runs; a callback may schedule more timers, which fire in the same
``advance`` if they fall due within it. Single-threaded, like the loop it stands in for.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from strom.common.clock import ManualClock


class ManualTimerHandle:
    """A scheduled callback; :meth:`cancel` keeps it from ever running."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Timers that fire only when :meth:`advance` moves the clock past them."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._timers: list[tuple[int, int, Callable[[], None], ManualTimerHandle]] = []
        self._seq = itertools.count()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> ManualTimerHandle:
        handle = ManualTimerHandle()
        due = self.clock.now_ms() + max(0, delay_ms)
        heapq.heappush(self._timers, (due, next(self._seq), callback, handle))
        return handle

    def pending(self) -> int:
        """Timers scheduled and neither fired nor cancelled."""
        return sum(1 for *_, handle in self._timers if not handle.cancelled)

    def advance(self, ms: int) -> None:
        target = self.clock.now_ms() + ms
        while self._timers and self._timers[0][0] <= target:
            due, _, callback, handle = heapq.heappop(self._timers)
            self.clock.advance(max(0, due - self.clock.now_ms()))
            if not handle.cancelled:
                callback()
        self.clock.advance(target - self.clock.now_ms())
