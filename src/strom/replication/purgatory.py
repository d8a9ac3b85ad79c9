"""Delayed operations and the purgatory that watches them (Kafka's DelayedOperationPurgatory).

A :class:`DelayedOperation` is a request that cannot be answered yet: an acks=-1 produce
waiting for the high watermark, a produce waiting for its fsync round, a parked fetch waiting
for data, a coordinator write waiting to commit. Its contract:

* :meth:`~DelayedOperation.try_complete` checks whether the operation can finish now and, if
  so, calls :meth:`~DelayedOperation.force_complete` and returns its result;
* :meth:`~DelayedOperation.force_complete` returns True exactly once in the operation's life
  (whoever calls it first: a completing check, the expiry timer or shutdown), cancels the
  timer, unwatches the operation and runs :meth:`~DelayedOperation.on_complete`;
* on expiry, ``force_complete`` runs and then :meth:`~DelayedOperation.on_expiration`.

States: *created* → *watched* (parked under one or more keys, timer armed) → *completed*.
An operation that completes during :meth:`Purgatory.try_complete_else_watch` is never watched.

:class:`Purgatory` keeps the watched operations by key (a partition, say) and
:meth:`Purgatory.check_and_complete` re-checks those under one key when the event that can
complete them happens (an append, a high-watermark move, an fsync round). Completed operations
are removed from every key at once, so watch lists hold only live operations.

Owned by the broker's event-loop thread; not thread-safe (worker threads hand their results
back to the loop before anything here is called).
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from strom.common.timer import Scheduler, TimerHandle

K = TypeVar("K", bound=Hashable)


class DelayedOperation(abc.ABC):
    """One parked request; see the module docstring for the contract."""

    __slots__ = ("_completed", "_keys", "_purgatory", "_timer", "timeout_ms")

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self._completed = False
        self._timer: TimerHandle | None = None
        self._purgatory: Purgatory[Hashable] | None = None
        self._keys: list[Hashable] = []

    @property
    def is_completed(self) -> bool:
        return self._completed

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Complete (through :meth:`force_complete`) if possible; True if this call did."""

    @abc.abstractmethod
    def on_complete(self) -> None:
        """Produce the operation's outcome; runs exactly once."""

    def try_complete_for(self, key: Hashable) -> bool:
        """:meth:`try_complete` after an event on ``key``: an operation that can tell
        cheaply that this event cannot have completed it answers False without the full
        check (a parked fetch of many partitions need not read them all per append)."""
        return self.try_complete()

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """Runs after :meth:`on_complete` when the timeout completed the operation."""

    def force_complete(self) -> bool:
        """Complete now; True only for the one call that actually completed the operation."""
        if self._completed:
            return False
        self._completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        self.on_complete()
        return True

    def _expire(self) -> None:
        self._timer = None
        if self.force_complete():
            self.on_expiration()


class Purgatory(Generic[K]):
    """Operations parked under keys until an event completes them or their timeout expires."""

    def __init__(self, name: str, scheduler: Scheduler) -> None:
        self.name = name
        self._scheduler = scheduler
        self._watchers: dict[K, dict[int, DelayedOperation]] = {}
        self._live: dict[int, DelayedOperation] = {}
        self.expired = 0

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[K]) -> bool:
        """Complete ``op`` now if it can; otherwise watch it under ``keys`` and arm its timer.

        Returns True if it completed here. With no keys it can only expire."""
        if op.try_complete():
            return True
        self.watch(op, keys)
        return False

    def watch(self, op: DelayedOperation, keys: Iterable[K]) -> None:
        """Watch ``op`` under ``keys`` and arm its timer without checking it first (for a
        caller that has just found it cannot complete)."""
        keys = list(keys)
        op._purgatory = self  # type: ignore[assignment]
        op._keys = list(keys)
        for key in keys:
            self._watchers.setdefault(key, {})[id(op)] = op
        self._live[id(op)] = op
        op._timer = self._scheduler.call_later(op.timeout_ms, lambda: self._on_timer(op))

    def _on_timer(self, op: DelayedOperation) -> None:
        if not op.is_completed:
            self.expired += 1
        op._expire()

    def check_and_complete(self, key: K) -> int:
        """Re-check the operations watching ``key``; returns how many completed."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        for op in list(watching.values()):  # completions unwatch themselves
            if not op.is_completed and op.try_complete_for(key):
                completed += 1
        return completed

    def watching(self, key: K) -> list[DelayedOperation]:
        """The live operations watching ``key`` (a copy)."""
        return list(self._watchers.get(key, {}).values())

    def watched(self, key: K) -> int:
        return len(self._watchers.get(key, ()))

    def __len__(self) -> int:
        return len(self._live)

    def _unwatch(self, op: DelayedOperation) -> None:
        self._live.pop(id(op), None)
        for key in op._keys:
            watching = self._watchers.get(key)  # type: ignore[arg-type]
            if watching is not None:
                watching.pop(id(op), None)
                if not watching:
                    del self._watchers[key]  # type: ignore[arg-type]
        op._keys = []

    def shutdown(self) -> None:
        """Complete every live operation (their outcome is whatever ``on_complete`` makes of an
        unfinished state, e.g. a timeout error); used when the broker stops."""
        for op in list(self._live.values()):
            op.force_complete()
