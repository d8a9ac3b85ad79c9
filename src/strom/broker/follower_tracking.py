"""A follower's incremental fetch session on the leader: read only what changed.

A follower's session names every partition it follows from this leader; each round of
replication (every acks=all produce waits for one, so a round follows each produce) would read
them all to find the few with something new, and a leader of a thousand partitions spent its
event loop on that (a 200/s acks=all producer on one partition fell behind by tens of seconds
on a 3-broker cluster with 1,000 idle partitions). :class:`SessionTracker` keeps, per follower
session, the partitions that may have something to answer (``dirty``), so a round reads those
and no others:

* a partition the request names (its fetch offset or other parameters moved) is dirty;
* a change the replica manager reports (:class:`~strom.replication.partition_watch.
  PartitionWatchers`: an append, a high-watermark move, a leadership change, a partition
  dropped or replaced) makes it dirty, and wakes the session's parked fetch if there is one
  (which then reads the dirty partitions: no purgatory keys, so parking costs nothing per
  partition either);
* a dirty partition leaves the set when a round finds it *settled*: led here at the epoch
  asked for, the follower holding the whole log, the high watermark, log start and last
  stable offset what the session last sent (the fetch handler's ``unchanged`` rule) — its
  follower state is noted then, as on every read;
* every ``sweep_s`` every partition of the session is dirty again: a log start moved by
  retention or DeleteRecords reaches the follower then, and each follower's fetch state of a
  quiet partition is noted again (the time it was last caught up, ISR expansion after a
  pending ISR change) — ``sweep_s`` is a tenth of ``replica.lag.time.max.ms`` (at most 1 s),
  so a follower's last caught-up time is never older than that by more than a tenth.

Invariant: a partition with something to answer (records past the follower's fetch offset, a
moved high watermark / log start / last stable offset, an error) is dirty, or becomes dirty by
the next sweep at the latest (log start moves only). A round therefore answers what a full
read would have, at the cost of the partitions that changed.

Subscriptions are by topic name and partition (the replica manager's key); a session key by
topic id whose id the metadata does not know is never settled (it is read, and answered with
its error, every round). :meth:`SessionTracker.close` (the session's eviction or removal)
unsubscribes everything. Event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.fetch_sessions import FetchSession, PartitionKey, topic_key
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.replication.partition_watch import PartitionWatchers

#: The longest interval between two full reads of a session (a tenth of
#: ``replica.lag.time.max.ms`` when that is shorter).
MAX_SWEEP_S = 1.0

#: Resolves a session's topic (name, id) to the name the metadata has now (None: unknown).
Resolve = Callable[[str | None, bytes | None], str | None]


def sweep_interval(max_lag_ms: int) -> float:
    """The full-read interval for ``replica.lag.time.max.ms`` = ``max_lag_ms``."""
    return max(min(MAX_SWEEP_S, max_lag_ms / 10_000), 0.01)


class SessionTracker:
    """The dirty partitions of one follower session; see the module doc."""

    __slots__ = ("_keys", "_next_sweep", "_subscribed", "_sweep_s", "_watchers", "dirty",
                 "sweeps", "waker")

    def __init__(self, watchers: PartitionWatchers, sweep_s: float) -> None:
        self._watchers = watchers
        self._sweep_s = sweep_s
        self._next_sweep = float("-inf")  # the first round reads everything
        #: Partitions to read next round, in the order they became dirty.
        self.dirty: dict[PartitionKey, None] = {}
        self._subscribed: dict[PartitionKey, TopicPartition] = {}
        self._keys: dict[TopicPartition, list[PartitionKey]] = {}
        #: Set while a fetch of the session is parked: tries to complete it.
        self.waker: Callable[[], None] | None = None
        self.sweeps = 0

    def begin_round(self, session: FetchSession, req: fast.FetchRequest, resolve: Resolve,
                    now: float) -> list[PartitionKey]:
        """Update the subscriptions for the request just applied to ``session`` (named and
        forgotten partitions) and return the partitions to read, in session order when the
        round is a sweep."""
        ids = session.uses_topic_ids
        parts = session.partitions
        for name, topic_id, numbers in req.forgotten:
            key = topic_key(name, topic_id, ids)
            for number in numbers:
                self._forget((key, number))
        for topic in req.topics:
            key = topic_key(topic.name, topic.topic_id, ids)
            for p in topic.partitions:
                self.dirty[(key, p.partition)] = None
        if now >= self._next_sweep:
            self._next_sweep = now + self._sweep_s
            self.sweeps += 1
            self.dirty = dict.fromkeys(parts)
        else:
            for k in [k for k in self.dirty if k not in parts]:
                del self.dirty[k]  # forgotten meanwhile
        for k in self.dirty:
            if k not in self._subscribed:
                self._subscribe(k, parts[k].topic, resolve)
        return list(self.dirty)

    def settled(self, key: PartitionKey) -> None:
        """A round found ``key`` with nothing to answer: not read again until it changes."""
        self.dirty.pop(key, None)

    def close(self) -> None:
        """The session is gone: stop watching its partitions."""
        for tp in self._keys:
            self._watchers.unwatch(tp, id(self))
        self._keys.clear()
        self._subscribed.clear()
        self.dirty.clear()
        self.waker = None

    def _subscribe(self, key: PartitionKey, topic: fast.FetchTopic, resolve: Resolve) -> None:
        name = resolve(topic.name, topic.topic_id)
        if name is None:
            return  # unknown: stays dirty (answered with its error each round)
        tp = TopicPartition(name, key[1])
        self._subscribed[key] = tp
        keys = self._keys.get(tp)
        if keys is None:
            self._keys[tp] = [key]
            self._watchers.watch(tp, id(self), self._changed)
        else:
            keys.append(key)

    def _forget(self, key: PartitionKey) -> None:
        self.dirty.pop(key, None)
        tp = self._subscribed.pop(key, None)
        if tp is None:
            return
        keys = self._keys.get(tp)
        if keys is not None and key in keys:
            keys.remove(key)
            if not keys:
                del self._keys[tp]
                self._watchers.unwatch(tp, id(self))

    def _changed(self, tp: TopicPartition) -> None:
        for key in self._keys.get(tp, ()):
            self.dirty[key] = None
        if self.waker is not None:
            self.waker()
