import asyncio
import threading

from strom.common.types import TopicPartition
from strom.replication.flusher import GroupCommitFlusher
from strom.replication.purgatory import DataWaiters


class FakeLog:
    """Counts fsync rounds; LEO advances as 'appends' happen."""

    def __init__(self) -> None:
        self.recovery_point = 0
        self.leo = 0
        self.flushes = 0
        self.lock = threading.Lock()

    def flush(self, up_to: int | None = None) -> None:
        with self.lock:
            target = self.leo
        self.flushes += 1
        threading.Event().wait(0.01)  # an fsync takes time
        self.recovery_point = target


def test_concurrent_requests_share_fsync_rounds() -> None:
    async def scenario() -> tuple[int, int]:
        log = FakeLog()
        flusher = GroupCommitFlusher()

        async def request(i: int) -> None:
            log.leo += 1
            await flusher.flush_up_to(log, log.leo)
            assert log.recovery_point >= i + 1

        await asyncio.gather(*(request(i) for i in range(200)))
        await flusher.close()
        return log.flushes, log.recovery_point

    flushes, recovery_point = asyncio.run(scenario())
    assert recovery_point == 200
    assert flushes <= 3  # 200 requests, not 200 fsyncs


def test_waiters_wake_on_notify_and_time_out() -> None:
    async def scenario() -> tuple[bool, bool]:
        waiters = DataWaiters()
        tp = TopicPartition("t", 0)
        task = asyncio.create_task(waiters.wait([tp, TopicPartition("t", 1)], 5.0))
        await asyncio.sleep(0.01)
        waiters.notify(tp)
        woke = await task
        timed_out = await waiters.wait([tp], 0.01)
        assert not waiters._waiters
        return woke, timed_out

    assert asyncio.run(scenario()) == (True, False)
