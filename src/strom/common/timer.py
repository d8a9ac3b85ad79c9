"""The scheduler seam for timers (coordinator sessions and rebalances, delayed-operation expiry).

:class:`LoopScheduler` runs callbacks on the broker's asyncio loop (``loop.call_later``), so
every timer is owned by the event-loop thread that owns the objects it touches; the manual twin
in :mod:`strom.testing.scheduler` drives the same code in unit tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Runs ``callback`` once after ``delay_ms``; the handle cancels it."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopScheduler:
    """Timers on the running asyncio loop (created in the broker's loop thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_later(max(0, delay_ms) / 1000.0, callback)
