"""Group commit: one fsync round serves every append waiting for durability.

An append that must be durable before it is acknowledged (``flush.messages`` reached, e.g. 1
for the fsync-before-ack mode) asks :meth:`GroupCommitFlusher.request` for its log to be
fsynced up to its end. Requests that arrive while a round runs join the next round, so N
concurrent requests cost one or two fsyncs instead of N. The fsyncs run in a worker thread;
the event loop keeps serving. After each round the flusher reports every log it flushed, with
the error if its fsync failed, to ``on_flushed`` — the replica manager, which completes the
delayed produces waiting on that log (:mod:`strom.replication.delayed`). The flusher itself
holds no waiters. Owned by the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger("strom.replication.flusher")


class Flushable(Protocol):
    topic: str
    partition: int
    recovery_point: int

    def flush(self, up_to: int | None = None) -> None: ...


FlushListener = Callable[[Flushable, BaseException | None], None]


class GroupCommitFlusher:
    def __init__(self, on_flushed: FlushListener | None = None) -> None:
        self._pending: dict[int, tuple[Flushable, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._on_flushed = on_flushed
        self.rounds = 0

    def request(self, log: Flushable, offset: int) -> None:
        """Ask for ``log`` to be fsynced at least up to ``offset`` (exclusive end offset)."""
        if log.recovery_point >= offset:
            return
        current = self._pending.get(id(log))
        if current is None or current[1] < offset:
            self._pending[id(log)] = (log, offset)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="group-commit")

    async def _run(self) -> None:
        while self._pending:
            batch = list(self._pending.values())
            self._pending = {}
            errors = await asyncio.to_thread(_flush_each, [log for log, _ in batch])
            self.rounds += 1
            for (log, offset), error in zip(batch, errors, strict=True):
                if error is not None:
                    logger.error("fsync failed: %s", error)
                elif log.recovery_point < offset:  # appended after the round began
                    self.request(log, offset)
                if self._on_flushed is not None:
                    try:
                        self._on_flushed(log, error)
                    except Exception:
                        logger.exception("flush listener failed")

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


def _flush_each(logs: list[Flushable]) -> list[BaseException | None]:
    errors: list[BaseException | None] = []
    for log in logs:
        try:
            log.flush()
            errors.append(None)
        except Exception as exc:  # one failing log does not fail the others
            errors.append(exc)
    return errors
