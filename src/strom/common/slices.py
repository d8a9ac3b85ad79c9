"""Long CPU work on the event loop, a slice at a time.

Work that would hold the event loop for many milliseconds (planning a thousand topics,
applying them to the metadata image, encoding the metadata file) is written as a generator
that yields ``None`` between small steps and returns its result. :func:`run_in_slices`
drives it on the loop, taking a turn of the loop (``asyncio.sleep(0)``: ready callbacks run,
sockets are polled) whenever a slice has run for :data:`SLICE_S`, so a request that arrives
meanwhile waits at most about one slice. :func:`run_at_once` drives the same generator
without yielding (synchronous callers, start-up, tests).

Why not a worker thread: Python work on another thread holds the GIL, which the loop waits
for after each of its own system calls — up to the interpreter's switch interval (5 ms)
each time; measured on one broker, that made a healthy producer's requests tens of
milliseconds late (docs/benchmarks.md). Worker threads are for system calls (which release
the GIL); CPU work stays on the loop, sliced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

R = TypeVar("R")

#: A slice's length: a healthy client's request arriving meanwhile waits about this much.
SLICE_S = 0.001

#: What a sliced computation is: steps separated by ``yield``, its result returned.
Steps = Generator[None, None, R]


async def run_in_slices(steps: Steps[R], slice_s: float | None = None) -> R:
    """Run ``steps`` on the event loop, taking a turn of the loop after each ``slice_s``
    (default :data:`SLICE_S`; and at the end, unless the last slice was short)."""
    if slice_s is None:
        slice_s = SLICE_S
    began = time.perf_counter()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            if time.perf_counter() - began > slice_s / 4:
                await asyncio.sleep(0)  # else the caller's next work extends this slice
            return done.value  # type: ignore[no-any-return]
        if time.perf_counter() - began >= slice_s:
            await asyncio.sleep(0)
            began = time.perf_counter()


def run_at_once(steps: Steps[R]) -> R:
    """Run ``steps`` to the end without yielding; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
