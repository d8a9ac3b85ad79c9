"""The memory of requests being read and processed, across all connections of a broker.

Kafka bounds it with ``queued.max.request.bytes`` (a memory pool every incoming frame
allocates from; when it is empty, the broker stops reading sockets until memory frees). strom
accounts the bytes connections actually hold — the buffer of a frame being read (which grows
with the bytes that arrive, see :class:`strom.protocol.frame.FrameDecoder`) and every complete
frame until its request has been processed — so announcing a large frame costs nothing.

When the total reaches the capacity the pool is *exhausted*: every connection stops reading
except the one whose incomplete frame started first, which may finish its frame (so a frame
larger than the whole capacity still gets through). Reading resumes everywhere once the total
falls below ``RESUME_FRACTION`` of the capacity. Memory is therefore bounded by the capacity
plus one frame (``socket.request.max.bytes``) plus one socket read per connection.

Reclaiming (beyond Kafka, whose pool stays empty until its idle timeout closes the senders):
memory held by incomplete frames that stopped arriving would stop reading on every
connection until ``connections.max.idle.ms``. So while the pool is exhausted it is checked
every ``RECLAIM_INTERVAL_S``: the connections whose incomplete frame has received no byte for
``STALL_S`` or more are closed, stalest first, until the total is back under the resume mark
— and none is closed when closing every such connection would not get it there (the memory
is then held by requests being processed, which free it themselves). A frame still arriving
is never closed, and the staleness of a frame paused for memory counts from its last byte,
so of the frames paused together the ones that had stopped sending before are closed first.
Measured (``bench/hostile_clients_bench.py memory``, docs/benchmarks.md): 12 connections
refilling a 32 MiB pool with partial frames held a producer's records for 30.9 s before
(until the 30 s idle timeout), at most about a second after.

Owned by the event-loop thread; connections report their usage with :meth:`update`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from strom.common.rate_limited_log import RateLimitedLog
from strom.common.timer import TimerHandle

log = logging.getLogger("strom.broker.network")

RESUME_FRACTION = 0.9
#: An incomplete frame without a new byte for this long may be reclaimed while exhausted.
STALL_S = 0.5
RECLAIM_INTERVAL_S = 0.1

CallLater = Callable[[float, Callable[[], None]], TimerHandle]


class MemoryUser(Protocol):
    """A connection: told when it may have to stop or may resume reading.

    ``frame_progress``: when the last byte of its incomplete frame arrived (the pool's clock);
    :meth:`reclaim` closes it, giving its memory back (through :meth:`RequestMemoryPool.update`
    or :meth:`RequestMemoryPool.unregister`) before it returns."""

    @property
    def frame_progress(self) -> float: ...

    def memory_state_changed(self) -> None: ...

    def reclaim(self, reason: str) -> None: ...


class RequestMemoryPool:
    """Accounts request bytes per connection; ``capacity`` None means unbounded (Kafka's -1).

    With ``call_later`` (the event loop's, in seconds) the pool reclaims memory from stalled
    incomplete frames by itself while exhausted; without it, :meth:`reclaim` is called by the
    owner (unit tests)."""

    def __init__(self, capacity: int | None, clock: Callable[[], float] = time.monotonic,
                 call_later: CallLater | None = None) -> None:
        self.capacity = capacity
        self.used = 0
        self._clock = clock
        self._call_later = call_later
        self._timer: TimerHandle | None = None
        self._users: dict[MemoryUser, None] = {}
        self._usage: dict[MemoryUser, int] = {}
        # The incomplete frame of each user reading one, by a number the user gives each of its
        # frames; insertion order is the order the frames started, oldest first.
        self._mid_frame: dict[MemoryUser, int] = {}
        self._exhausted = False
        self._privileged: MemoryUser | None = None
        self._report = RateLimitedLog(log, logging.WARNING)
        self._reclaimed = RateLimitedLog(log, logging.WARNING)
        #: Connections closed to reclaim memory since start (for tests and operators).
        self.reclaimed_connections = 0

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def register(self, user: MemoryUser) -> None:
        self._users[user] = None

    def unregister(self, user: MemoryUser) -> None:
        self.update(user, 0, frame=None)
        self._users.pop(user, None)

    def update(self, user: MemoryUser, usage: int, *, frame: int | None) -> None:
        """``user`` now holds ``usage`` bytes and is reading its frame number ``frame`` (None:
        between frames). A new frame number queues the user behind frames started earlier."""
        previous = self._usage.get(user, 0)
        if usage != previous:
            if usage:
                self._usage[user] = usage
            else:
                del self._usage[user]
            self.used += usage - previous
        current = self._mid_frame.get(user)
        if frame != current:
            if current is not None:
                del self._mid_frame[user]
            if frame is not None:
                self._mid_frame[user] = frame
        if self.capacity is not None:
            self._check(self.capacity)

    def may_read(self, user: MemoryUser) -> bool:
        return not self._exhausted or user is self._privileged

    def reclaim(self, now: float | None = None) -> int:
        """While exhausted: close the connections whose incomplete frames got no byte for
        :data:`STALL_S`, stalest first, until the total is under the resume mark (none when
        that cannot get it there). Returns how many were closed."""
        capacity = self.capacity
        if not self._exhausted or capacity is None:
            return 0
        now = self._clock() if now is None else now
        mark = capacity * RESUME_FRACTION
        stalled = sorted((u for u in self._mid_frame if now - u.frame_progress >= STALL_S),
                         key=lambda u: u.frame_progress)
        if self.used - sum(self._usage.get(u, 0) for u in stalled) > mark:
            return 0
        closed = freed = 0
        for user in stalled:
            if self.used <= mark:
                break
            held = self._usage.get(user, 0)
            user.reclaim(f"its incomplete request held {held} bytes of request memory "
                         f"without progress for {now - user.frame_progress:.1f} s while "
                         "queued.max.request.bytes was exhausted")
            if user in self._users:  # it did not give its memory back: never close it twice
                self.unregister(user)
            closed += 1
            freed += held
        if closed:
            self.reclaimed_connections += closed
            self._reclaimed.log(
                "request memory exhausted (queued.max.request.bytes=%d): closed %d connections "
                "whose incomplete requests (%d bytes) had stalled for %.1f s or more",
                capacity, closed, freed, STALL_S)
        return closed

    def _tick(self) -> None:
        self._timer = None
        self.reclaim()
        self._schedule()

    def _schedule(self) -> None:
        if self._exhausted and self._timer is None and self._call_later is not None:
            self._timer = self._call_later(RECLAIM_INTERVAL_S, self._tick)

    def _check(self, capacity: int) -> None:
        if self._exhausted:
            exhausted = self.used > capacity * RESUME_FRACTION
        else:
            exhausted = self.used >= capacity
        privileged = next(iter(self._mid_frame), None) if exhausted else None
        if exhausted == self._exhausted and privileged is self._privileged:
            return
        if exhausted and not self._exhausted:
            self._report.log(
                "requests hold %d bytes (queued.max.request.bytes=%d): reading from clients "
                "pauses until memory frees", self.used, capacity)
        self._exhausted = exhausted
        self._privileged = privileged
        if exhausted:
            self._schedule()
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for user in list(self._users):
            user.memory_state_changed()
