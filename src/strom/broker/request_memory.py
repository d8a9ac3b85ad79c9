"""The memory of requests being read and processed, across all connections of a broker.

Kafka bounds it with ``queued.max.request.bytes`` (a memory pool every incoming frame
allocates from; when it is empty, the broker stops reading sockets until memory frees). strom
accounts the bytes connections actually hold — the buffer of a frame being read (which grows
with the bytes that arrive, see :class:`strom.protocol.frame.FrameDecoder`) and every complete
frame until its request has been processed — so announcing a large frame costs nothing.

When the total reaches the capacity the pool is *exhausted*: every connection stops reading
except the one whose incomplete frame started first, which may finish its frame (so a frame
larger than the whole capacity still gets through, and memory held only by incomplete frames
cannot wedge the broker). Reading resumes everywhere once the total falls below
``RESUME_FRACTION`` of the capacity. Memory is therefore bounded by the capacity plus one
frame (``socket.request.max.bytes``) plus one socket read per connection.

Owned by the event-loop thread; connections report their usage with :meth:`update`.
"""

from __future__ import annotations

import logging
from typing import Protocol

from strom.common.rate_limited_log import RateLimitedLog

log = logging.getLogger("strom.broker.network")

RESUME_FRACTION = 0.9


class MemoryUser(Protocol):
    """A connection: told when it may have to stop or may resume reading."""

    def memory_state_changed(self) -> None: ...


class RequestMemoryPool:
    """Accounts request bytes per connection; ``capacity`` None means unbounded (Kafka's -1)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.used = 0
        self._users: dict[MemoryUser, None] = {}
        self._usage: dict[MemoryUser, int] = {}
        # The incomplete frame of each user reading one, by a number the user gives each of its
        # frames; insertion order is the order the frames started, oldest first.
        self._mid_frame: dict[MemoryUser, int] = {}
        self._exhausted = False
        self._privileged: MemoryUser | None = None
        self._report = RateLimitedLog(log, logging.WARNING)

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
        for user in list(self._users):
            user.memory_state_changed()
