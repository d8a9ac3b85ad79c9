"""Group commit: one fsync round serves every produce request waiting for durability.

A produce request that must be durable before it is acknowledged (``flush.messages`` reached,
e.g. 1 for the fsync-before-ack mode) calls :meth:`GroupCommitFlusher.flush_up_to`. Requests
that arrive while an fsync round is running join the next round, so N concurrent requests cost
one or two fsyncs instead of N. The fsyncs run in a worker thread; the event loop keeps
serving. Owned by the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

logger = logging.getLogger("strom.replication.flusher")


class Flushable(Protocol):
    recovery_point: int

    def flush(self, up_to: int | None = None) -> None: ...


class GroupCommitFlusher:
    def __init__(self) -> None:
        self._pending: dict[int, tuple[Flushable, list[tuple[int, asyncio.Future[None]]]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    async def flush_up_to(self, log: Flushable, offset: int) -> None:
        """Return once ``log`` is fsynced at least up to ``offset`` (exclusive end offset)."""
        await self.schedule(log, offset)

    def schedule(self, log: Flushable, offset: int) -> asyncio.Future[None]:
        """Queue a flush of ``log`` up to ``offset``; the future completes when it is durable.

        Callers that do not wait (acks=0) may drop the future: a failure is logged by the
        round, never left as an unretrieved exception.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_exception)
        if log.recovery_point >= offset:
            future.set_result(None)
            return future
        entry = self._pending.setdefault(id(log), (log, []))
        entry[1].append((offset, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="group-commit")
        return future

    async def _run(self) -> None:
        while self._pending:
            batch = self._pending
            self._pending = {}
            logs = [log for log, _ in batch.values()]
            try:
                await asyncio.to_thread(_flush_all, logs)
                error: BaseException | None = None
            except Exception as exc:  # fsync failure: fail the waiters, keep serving
                logger.error("fsync failed: %s", exc)
                error = exc
            self.rounds += 1
            for log, waiters in batch.values():
                for offset, future in waiters:
                    if future.done():
                        continue
                    if error is not None:
                        future.set_exception(error)
                    elif log.recovery_point >= offset:
                        future.set_result(None)
                    else:  # appended after the round began: next round
                        self._pending.setdefault(id(log), (log, []))[1].append((offset, future))

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


def _consume_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _flush_all(logs: list[Flushable]) -> None:
    for log in logs:
        log.flush()
