"""RequestMemoryPool: exhaustion, the oldest incomplete frame may finish, hysteresis."""

from __future__ import annotations

from strom.broker.request_memory import RESUME_FRACTION, RequestMemoryPool


class User:
    def __init__(self, pool: RequestMemoryPool) -> None:
        self.pool = pool
        self.notified = 0
        pool.register(self)

    def memory_state_changed(self) -> None:
        self.notified += 1

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
