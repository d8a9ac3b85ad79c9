"""``Prefetcher``: the consumer's background Fetch requests, at most one in flight per broker.

The Java consumer's rule, kept here: a Fetch names only the partitions that are assigned, not
paused and have no buffered records (a partition with buffered data is not fetched again until
the application has drained it), and a broker with a Fetch in flight gets no second one. The
consumer starts fetches as soon as :meth:`~strom.client.consumer.Consumer.poll` hands out
records, so the next answer arrives while the application processes the current ones.

Invariants:

- An answer is applied (records to the sink, positions moved) in one step, by
  :meth:`strom.client.fetcher.Fetcher.fetch_from`, which also drops the answer of a partition
  sought or reassigned while the request was in flight.
- A fetch's error (a non-retriable Kafka error, ``NoOffsetError``) is raised by the next
  :meth:`Prefetcher.reap`, i.e. from the next poll, as a fetch inside poll would raise it.
- :meth:`Prefetcher.close` cancels in-flight fetches and waits for them, so no task outlives
  the consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from strom.client.fetcher import Fetcher, RecordSink
from strom.common.types import TopicPartition


class Prefetcher:
    """Background fetches of one consumer; runs on the consumer's loop."""

    def __init__(self, fetcher: Fetcher, sink: RecordSink) -> None:
        self._fetcher = fetcher
        self._sink = sink
        #: node id → its in-flight Fetch, and the partitions that Fetch names.
        self._tasks: dict[int, asyncio.Task[object]] = {}
        self._partitions: dict[int, list[TopicPartition]] = {}

    def in_flight(self) -> set[TopicPartition]:
        """Partitions named by a Fetch not yet answered."""
        return {tp for node, tps in self._partitions.items()
                if not self._tasks[node].done() for tp in tps}

    async def start(self, partitions: Iterable[TopicPartition]) -> None:
        """Send a Fetch to the leader of each of ``partitions`` unless one is in flight there
        (those partitions wait for a later call). Positions missing are reset first."""
        self.reap()
        busy = self.in_flight()
        wanted = [tp for tp in partitions if tp not in busy]
        if not wanted:
            return
        await self._fetcher._reset_missing()
        for node, tps in (await self._fetcher.leaders(wanted)).items():
            if node in self._tasks:
                continue
            self._tasks[node] = asyncio.create_task(
                self._fetcher.fetch_from(node, tps, self._fetcher.max_wait_ms, self._sink),
                name=f"strom-prefetch-{node}")
            self._partitions[node] = tps

    def reap(self) -> None:
        """Forget answered fetches; raise the first error one of them ended with."""
        error: BaseException | None = None
        for node, task in list(self._tasks.items()):
            if not task.done():
                continue
            del self._tasks[node], self._partitions[node]
            if not task.cancelled() and (exc := task.exception()) is not None:
                error = error or exc
        if error is not None:
            raise error

    async def wait(self, timeout_s: float) -> None:
        """Until a Fetch in flight is answered or ``timeout_s`` passes."""
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(timeout_s)

    async def close(self) -> None:
        """Cancel the fetches in flight and wait until they are gone."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._partitions.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
