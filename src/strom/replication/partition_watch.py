"""Callbacks on a hosted partition's changes, for a reader that keeps state across requests.

:class:`PartitionWatchers` is the replica manager's registry: ``watch(tp, token, callback)``
until ``unwatch(tp, token)``; :meth:`PartitionWatchers.changed` calls every callback of a
partition. The replica manager calls it where it wakes the fetch purgatory — an append that
did not move the high watermark, a high-watermark move (which may move the last stable
offset), a partition led here or no more, dropped or replaced — so a watcher learns of every
change a follower must be answered for, except a log start moved by retention or
DeleteRecords (a follower learns of that from its leader's periodic full read, see
:mod:`strom.broker.follower_tracking`).

Unlike the purgatory's operations, watchers live across requests (a follower's fetch session
on the leader: it reads only the partitions that changed since its last round, instead of
every partition it follows). A callback runs on the event loop, inside whatever changed the
partition (an append, a follower's fetch): it must be quick and must not raise; it may be
called again from within itself (a read it starts may move a high watermark). Event-loop
thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.common.types import TopicPartition

Callback = Callable[[TopicPartition], None]


class PartitionWatchers:
    """See the module doc."""

    __slots__ = ("_by_tp",)

    def __init__(self) -> None:
        self._by_tp: dict[TopicPartition, dict[int, Callback]] = {}

    def watch(self, tp: TopicPartition, token: int, callback: Callback) -> None:
        """Call ``callback(tp)`` on each change of ``tp`` until unwatched (one callback per
        ``token`` and partition: watching again replaces it)."""
        self._by_tp.setdefault(tp, {})[token] = callback

    def unwatch(self, tp: TopicPartition, token: int) -> None:
        watching = self._by_tp.get(tp)
        if watching is not None:
            watching.pop(token, None)
            if not watching:
                del self._by_tp[tp]

    def changed(self, tp: TopicPartition) -> None:
        """``tp`` changed: call its callbacks (a copy of the list: they may unwatch)."""
        watching = self._by_tp.get(tp)
        if watching:
            for callback in list(watching.values()):
                callback(tp)

    def watched(self, tp: TopicPartition) -> int:
        """How many watch ``tp`` (for tests and gauges)."""
        return len(self._by_tp.get(tp, ()))

    def __len__(self) -> int:
        """How many partitions are watched."""
        return len(self._by_tp)
