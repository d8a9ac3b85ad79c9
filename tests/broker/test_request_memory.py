"""RequestMemoryPool: exhaustion, the oldest incomplete frame may finish, hysteresis, and
memory reclaimed from stalled incomplete frames."""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.request_memory import (
    RECLAIM_INTERVAL_S,
    RESUME_FRACTION,
    STALL_S,
    RequestMemoryPool,
)


class User:
    def __init__(self, pool: RequestMemoryPool, progress: float = 0.0) -> None:
        self.pool = pool
        self.notified = 0
        self.frame_progress = progress
        self.closed = False
        pool.register(self)

    def memory_state_changed(self) -> None:
        self.notified += 1

    def reclaim(self, reason: str) -> None:
        assert "queued.max.request.bytes" in reason
        self.closed = True
        self.pool.unregister(self)

    @property
    def reads(self) -> bool:
        return self.pool.may_read(self)


def test_exhausted_pool_lets_only_the_oldest_incomplete_frame_finish() -> None:
    pool = RequestMemoryPool(1000)
    a, b, c = User(pool), User(pool), User(pool)
    pool.update(b, 300, frame=0)  # b started a frame first
    pool.update(a, 300, frame=0)
    assert not pool.exhausted and a.reads and b.reads and c.reads
    pool.update(c, 400, frame=None)  # complete frames waiting to be processed
    assert pool.exhausted and pool.used == 1000
    assert (a.reads, b.reads, c.reads) == (False, True, False)
    assert a.notified == b.notified == c.notified == 1
    pool.update(b, 2000, frame=0)  # the privileged frame grows past the capacity
    assert b.reads and not a.reads
    pool.update(b, 2000, frame=None)  # ... and completes: the next-oldest frame goes on
    assert (a.reads, b.reads, c.reads) == (True, False, False)
    pool.update(b, 0, frame=None)  # processed
    pool.update(c, 0, frame=None)
    assert pool.used == 300 and not pool.exhausted and a.reads and b.reads and c.reads


def test_a_new_frame_waits_behind_frames_started_earlier() -> None:
    pool = RequestMemoryPool(100)
    a, b = User(pool), User(pool)
    pool.update(a, 60, frame=0)
    pool.update(b, 50, frame=0)
    assert pool.exhausted and a.reads and not b.reads
    pool.update(a, 60, frame=1)  # a completed frame 0 and started frame 1 in the same read
    assert b.reads and not a.reads


def test_resumes_below_the_resume_fraction_and_unbounded_never_pauses() -> None:
    pool = RequestMemoryPool(1000)
    a, b = User(pool), User(pool)
    pool.update(a, 1000, frame=None)
    assert pool.exhausted and not b.reads
    pool.update(a, int(1000 * RESUME_FRACTION) + 1, frame=None)
    assert pool.exhausted
    pool.update(a, int(1000 * RESUME_FRACTION), frame=None)
    assert not pool.exhausted and b.reads
    pool.unregister(a)
    assert pool.used == 0
    unbounded = RequestMemoryPool(None)
    c = User(unbounded)
    unbounded.update(c, 10**12, frame=None)
    assert c.reads and not unbounded.exhausted and c.notified == 0


def test_stalled_incomplete_frames_are_closed_stalest_first_until_under_the_mark() -> None:
    pool = RequestMemoryPool(1000)
    old = User(pool, progress=1.0)  # stopped sending first
    older = User(pool, progress=0.5)
    recent = User(pool, progress=9.8)  # still arriving
    busy = User(pool)
    pool.update(recent, 300, frame=0)
    pool.update(old, 300, frame=0)
    pool.update(older, 300, frame=0)
    assert pool.reclaim(10.0) == 0  # not exhausted: nothing is touched
    pool.update(busy, 200, frame=None)  # a complete request being processed
    assert pool.exhausted and pool.used == 1100
    # 1100 - 900 (the mark) = 200 to free: the stalest alone (300 bytes) is enough.
    assert pool.reclaim(10.0) == 1
    assert older.closed and not old.closed and not recent.closed and not busy.closed
    assert pool.used == 800 and not pool.exhausted
    assert pool.reclaimed_connections == 1


def test_nothing_is_closed_when_stalled_frames_hold_too_little_or_are_fresh() -> None:
    pool = RequestMemoryPool(1000)
    stalled, processing, fresh = User(pool, 0.0), User(pool), User(pool, 10.0 - STALL_S / 2)
    pool.update(stalled, 50, frame=0)
    pool.update(fresh, 300, frame=0)
    pool.update(processing, 700, frame=None)
    assert pool.exhausted
    # Requests being processed hold the memory: closing the stalled frame would not help.
    assert pool.reclaim(10.0) == 0 and not stalled.closed
    pool.update(processing, 600, frame=None)  # 950: still exhausted (resumes at 900)
    assert pool.exhausted
    assert pool.reclaim(10.0) == 1 and stalled.closed and not fresh.closed
    assert not pool.exhausted


def test_an_exhausted_pool_reclaims_by_itself_on_its_timer() -> None:
    timers: list[tuple[float, Callable[[], None]]] = []

    class Handle:
        def cancel(self) -> None:
            timers.clear()

    def call_later(delay: float, callback: Callable[[], None]) -> Handle:
        timers.append((delay, callback))
        return Handle()

    now = [100.0]
    pool = RequestMemoryPool(1000, clock=lambda: now[0], call_later=call_later)
    attackers = [User(pool, progress=100.0) for _ in range(4)]
    for user in attackers:
        pool.update(user, 250, frame=0)
    assert pool.exhausted and [d for d, _ in timers] == [RECLAIM_INTERVAL_S]
    delay, tick = timers.pop()
    now[0] += delay
    tick()  # not stalled long enough yet: checked again later
    assert not any(u.closed for u in attackers) and len(timers) == 1
    now[0] += STALL_S
    timers.pop()[1]()
    assert sum(u.closed for u in attackers) == 1 and not pool.exhausted
    assert timers == []  # no timer while the pool is not exhausted
