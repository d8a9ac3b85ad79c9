"""A leader's ISR changes, written through the metadata store (Kafka's ZooKeeper-mode leader
writing ``/brokers/topics/<t>/partitions/<p>/state`` conditionally).

:class:`StoreIsrWriter` queues the proposals of the partitions this broker leads and writes
them in batches — all queued proposals in one conditional ``SetPartitions`` write — in a
worker thread, so the event loop never waits for ZooKeeper. Each proposal keeps the leader and
leader epoch it was made at and only replaces the ISR. Before each attempt the current image is
read: a proposal whose partition no longer has this broker as leader at that epoch, or whose
ISR is no longer the one the proposal replaces (the controller changed it), is dropped
(reported as failed); one whose ISR is already in the image is done. A write that loses a
race (``StaleMetadataError``: any other metadata change came first) is retried against the
new image, up to ``attempts`` times, ``retry_backoff_s`` apart. A write that raises anything
else (ZooKeeper unreachable, a connection lost mid-write) has an unknown outcome — it may have
been applied — so it is never reported as failed: it is attempted again (``retry_backoff_s``
later, doubling up to ``MAX_RETRY_BACKOFF_S`` while the store stays unreachable), planned
against the image then (already written: done; refused: failed). Reporting it would let the
leader drop a pending expansion the store may already hold, and then advance the high
watermark without a replica in the store's ISR (Kafka likewise rolls a pending ISR back only
on a definite refusal). A store with ``commit`` (the
ZooKeeper store: a write from a thread other than its owner's, whose image is installed by
the owner's refresh on the event loop) is written with it, any other with ``write``. Failures
are reported on the event loop through ``on_failed`` (the partition leaves its pending state
and may propose again), writes through ``on_written`` with the first metadata epoch whose
image holds them (the write's base epoch plus one; the image's own epoch for a proposal found
already written): the new image reaches every broker through the store's listeners, but a
broker's refresh may skip it (the controller changed the ISR again before the broker read
it), and the partition must then still learn that its proposal is settled.

Lifecycle: created by the broker server, :meth:`StoreIsrWriter.submit` from the event loop,
:meth:`StoreIsrWriter.close` at shutdown. The queue and the task belong to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from strom.metadata.changes import MetadataChange, SetPartitions
from strom.metadata.image import MetadataImage, PartitionInfo
from strom.metadata.store import MetadataStore, StaleMetadataError
from strom.replication.partition import IsrChange

log = logging.getLogger("strom.replication.isr_writer")

#: The longest wait between attempts of a write whose outcome is unknown (seconds).
MAX_RETRY_BACKOFF_S = 1.0


class StoreIsrWriter:
    """See the module docstring."""

    def __init__(self, store: MetadataStore, node_id: int,
                 on_failed: Callable[[IsrChange], None],
                 on_written: Callable[[IsrChange, int], None] | None = None, *,
                 attempts: int = 10, retry_backoff_s: float = 0.05) -> None:
        self._store = store
        commit = getattr(store, "commit", None)
        self._commit: Callable[[int, Sequence[MetadataChange]], object] = (
            commit if commit is not None else store.write)
        self._backoff_s = retry_backoff_s
        self._node_id = node_id
        self._on_failed = on_failed
        self._on_written = on_written
        self._attempts = attempts
        self._queue: list[IsrChange] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, change: IsrChange) -> None:
        self._queue.append(change)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="isr-writer")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        delay = self._backoff_s
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._queue = self._queue, []
            written: list[tuple[IsrChange, int]] = []
            try:
                failed = await asyncio.to_thread(self._write, batch, written)
            except Exception:  # outcome unknown: the write may have been applied
                log.warning("cannot write the ISR changes of %s; retrying",
                            [c.tp for c in batch], exc_info=True)
                self._queue[:0] = batch  # re-planned against the image of the next attempt
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_BACKOFF_S)
                self._wakeup.set()
                continue
            delay = self._backoff_s
            for change in failed:
                self._on_failed(change)
            if self._on_written is not None:
                for change, epoch in written:
                    self._on_written(change, epoch)

    def _write(self, changes: Sequence[IsrChange], written: list[tuple[IsrChange, int]]
               ) -> list[IsrChange]:
        """Runs in a worker thread; returns the changes that were not written and adds those
        written (or found written) to ``written`` with their first metadata epoch."""
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff_s)  # the owner's refresh brings the newer image
            image = self._store.image
            failed, by_topic = self._plan(image, changes)
            done = [c for c in changes if c not in failed]
            if not by_topic:
                written.extend((c, image.epoch) for c in done)
                return failed
            try:
                self._commit(image.epoch, [SetPartitions(topic, tuple(parts))
                                           for topic, parts in by_topic.items()])
            except StaleMetadataError:
                continue
            planned = {(t, p.partition) for t, parts in by_topic.items() for p in parts}
            written.extend((c, image.epoch + 1 if (c.tp.topic, c.tp.partition) in planned
                            else image.epoch) for c in done)
            for topic, parts in by_topic.items():
                log.info("%s: ISR now %s", [f"{topic}-{p.partition}" for p in parts],
                         [list(p.isr) for p in parts])
            return failed
        log.warning("ISR changes of %s lost %d write races; dropped for now",
                    [c.tp for c in changes], self._attempts)
        return list(changes)

    def _plan(self, image: MetadataImage, changes: Sequence[IsrChange]
              ) -> tuple[list[IsrChange], dict[str, list[PartitionInfo]]]:
        failed: list[IsrChange] = []
        by_topic: dict[str, list[PartitionInfo]] = {}
        for change in changes:
            topic = image.topics.get(change.tp.topic)
            partitions = topic.partitions if topic is not None else ()
            current = next((p for p in partitions if p.partition == change.tp.partition), None)
            if current is None or current.leader != self._node_id or (
                    current.leader_epoch != change.leader_epoch):
                failed.append(change)  # no longer ours at that epoch
                continue
            if frozenset(current.isr) == change.isr:
                continue
            if frozenset(current.isr) != change.from_isr:
                failed.append(change)  # the controller changed the ISR meanwhile
                continue
            isr = tuple(r for r in current.replicas if r in change.isr)
            by_topic.setdefault(change.tp.topic, []).append(
                dataclasses.replace(current, isr=isr))
        return failed, by_topic
