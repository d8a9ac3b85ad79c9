"""A manual scheduler for the replication unit tests: timers fire only in :meth:`advance`."""

from __future__ import annotations

from collections.abc import Callable


class Timer:
    def __init__(self, due: int, callback: Callable[[], None]) -> None:
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    def __init__(self) -> None:
        self.now = 0
        self.timers: list[Timer] = []

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + max(0, delay_ms), callback)
        self.timers.append(timer)
        return timer

    def advance(self, ms: int) -> None:
        self.now += ms
        for timer in sorted(self.timers, key=lambda t: t.due):
            if timer.due <= self.now and not timer.cancelled:
                timer.cancelled = True
                timer.callback()
        self.timers = [t for t in self.timers if not t.cancelled]

    def armed(self) -> int:
        return sum(not t.cancelled for t in self.timers)
