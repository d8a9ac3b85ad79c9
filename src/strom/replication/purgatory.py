"""Delayed operations: parked fetches wake the moment data is appended to a partition.

A parked Fetch registers one future for all partitions it reads; :meth:`DataWaiters.notify`
(called after every append) completes the futures watching that partition. Owned by the
event-loop thread; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from strom.common.types import TopicPartition


class DataWaiters:
    """Futures waiting for appends, keyed by partition."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    def notify_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(tp)

    async def wait(self, partitions: Iterable[TopicPartition], timeout: float) -> bool:
        """Wait until one of ``partitions`` gets data or ``timeout`` seconds pass.

        Returns True if woken by data.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        keys = list(partitions)
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in keys:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[tp]
