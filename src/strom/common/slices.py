"""Long CPU work on the event loop, a slice at a time.

Work that would hold the event loop for many milliseconds (planning a thousand topics,
applying them to the metadata image, encoding the metadata file) is written as a generator
that yields ``None`` between small steps and returns its result. :func:`run_in_slices`
drives it on the loop a slice of at most :data:`SLICE_S` at a time, so a request that
arrives meanwhile waits at most about one slice. :func:`run_at_once` drives the same
generator without yielding (synchronous callers, start-up, tests).

**Background work goes last** (the loop's *lane*). Between two slices, and before the first,
:func:`take_turn` yields the loop and keeps yielding while

* callbacks other than background tasks' are ready (a request's next steps: a task woken,
  an answer written), for at most :data:`FOREGROUND_FIRST_S`, so a busy loop still gives
  background work a slice that often;
* a background slice already ran since the loop last polled for I/O (one slice per turn of
  the loop, whichever task it is);
* background tasks that asked before wait (first come, first served).

A plain ``asyncio.sleep(0)`` put a slice's continuation ahead of the I/O the loop polls
next, and every sliced task took its slice in the same turn: a request waited for one slice
of each at every step it took through the ready queue, and a healthy producer's requests
during a topic burst on one broker took 6-8 ms on an idle p99 of 0.7 ms (docs/benchmarks.md).
:func:`take_turn` reads the ready queue of CPython's ``BaseEventLoop`` (``_ready``); on a
loop without one it is ``asyncio.sleep(0)``. Any loop of background work that takes turns of
its own (opening partitions, building new logs) calls it between its slices too.

Why not a worker thread: Python work on another thread holds the GIL, which the loop waits
for after each of its own system calls — up to the interpreter's switch interval (5 ms)
each time; measured on one broker, that made a healthy producer's requests tens of
milliseconds late (docs/benchmarks.md). Worker threads are for system calls (which release
the GIL); CPU work stays on the loop, sliced.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from collections.abc import Generator
from typing import TypeVar

R = TypeVar("R")

#: A slice's length: a healthy client's request arriving meanwhile waits about this much.
SLICE_S = 0.001

#: The longest :func:`take_turn` keeps yielding to other ready callbacks: under a constant
#: load of requests, background work still gets a slice at least this often.
FOREGROUND_FIRST_S = 0.004

#: What a sliced computation is: steps separated by ``yield``, its result returned.
Steps = Generator[None, None, R]


async def run_in_slices(steps: Steps[R], slice_s: float | None = None) -> R:
    """Run ``steps`` on the event loop, taking a turn of the loop after each ``slice_s``
    (default :data:`SLICE_S`; and at the end, unless the last slice was short)."""
    if slice_s is None:
        slice_s = SLICE_S
    await take_turn()  # the caller may come from a wait of its own: the lane first
    began = time.perf_counter()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            if time.perf_counter() - began > slice_s / 4:
                await take_turn()  # else the caller's next work extends this slice
            return done.value  # type: ignore[no-any-return]
        if time.perf_counter() - began >= slice_s:
            await take_turn()
            began = time.perf_counter()


async def take_turn() -> None:
    """Between two slices of background work: yield the event loop, and keep yielding while
    callbacks other than background tasks' are ready, while another background slice ran
    since the loop last polled for I/O, and while background tasks that asked before this
    one wait (first come, first served); after :data:`FOREGROUND_FIRST_S`, go regardless."""
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    lane = _lanes.get(loop)
    if lane is None:
        lane = _lanes[loop] = _Lane()
    lane.sliced()
    ticket = object()
    lane.waiting.append(ticket)
    give_up = 0.0
    try:
        while True:
            lane.queued += 1
            try:
                await asyncio.sleep(0)
            finally:
                lane.queued -= 1
            # Out of the ready queue now: what is left in it but the lane's own callbacks
            # is foreground work.
            if ready is None or (not lane.busy and len(ready) <= lane.queued
                                 and lane.waiting[0] is ticket):
                return
            now = time.perf_counter()
            if not give_up:
                give_up = now + FOREGROUND_FIRST_S
            elif now >= give_up:
                return
    finally:
        lane.waiting.remove(ticket)


class _Lane:
    """The background work of one event loop: how many of its callbacks are in the ready
    queue (a task's turn, or :meth:`_polled`), whether a slice ran since the loop last
    polled for I/O (then the next waits for the poll: one slice per turn of the loop), and
    the tasks waiting for their turn, in order."""

    __slots__ = ("busy", "queued", "waiting")

    def __init__(self) -> None:
        self.busy = False
        self.queued = 0
        self.waiting: collections.deque[object] = collections.deque()

    def sliced(self) -> None:
        if not self.busy:
            self.busy = True
            self.queued += 1
            # Scheduled now, it runs in the loop's next turn: after its poll for I/O.
            asyncio.get_running_loop().call_soon(self._polled)

    def _polled(self) -> None:
        self.queued -= 1
        self.busy = False


#: Per event loop, its background lane.
_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane] = (
    weakref.WeakKeyDictionary())


def run_at_once(steps: Steps[R]) -> R:
    """Run ``steps`` to the end without yielding; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
