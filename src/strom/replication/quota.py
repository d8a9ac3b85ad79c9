"""Replication quotas (KIP-73; Kafka's ``ReplicationQuotaManager``): a byte rate for the
replicas an operator names, enforced on the leader and on the follower.

Configuration (Kafka's names; all dynamic):

* ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` — broker
  configs, bytes a second (per broker or as the cluster default; unset: no bound).
* ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` —
  topic configs: ``*`` (every partition of the topic) or ``partition:broker`` entries. A
  broker keeps the partitions of the entries that name *itself*: the leader list names the
  brokers that may serve the copy (a reassignment's current replicas), the follower list the
  brokers that receive it (the new replicas) — exactly as Kafka's ``TopicConfigHandler``
  filters both lists by its own broker id.

:class:`ReplicationQuota` is one side's quota: :meth:`~ReplicationQuota.is_throttled` (is the
partition in this broker's list), :meth:`~ReplicationQuota.is_quota_exceeded` (is the
measured rate above the bound) and :meth:`~ReplicationQuota.record` (bytes sent or received
for throttled partitions — recorded whatever the quota says). The rate is Kafka's
``SimpleRate`` (:class:`SimpleRate`): ``replication.quota.window.num`` windows of
``replication.quota.window.size.seconds``; it is the sum of the kept windows divided by the
time since the oldest one started, at least one window — so, unlike the client quotas'
``Rate``, a new meter allows about one window's worth before it is exceeded, and a rate holds
on average over the kept windows.

Where each side applies it (Kafka's rules):

* leader (:func:`should_leader_throttle`): a follower's fetch gets no records (no error) for a
  partition that is throttled while the quota is exceeded, unless that follower is in the ISR;
  the bytes of every throttled partition in a follower's response are recorded
  (:func:`throttled_size`) once the response is final;
* follower (:class:`strom.replication.fetcher.ReplicaFetcher`): a partition that is throttled
  is left out of the fetch request while the quota is exceeded, unless the follower has caught
  up with the leader's high watermark; the bytes received for throttled partitions are
  recorded.

So an in-sync replica, an unthrottled partition and acks=all never wait for a throttle; a
replica being copied (not in the ISR) can be held back.

:class:`ReplicationQuotas` holds both sides and takes their configuration from each metadata
image. Sans-IO: time comes from the ``now`` callable (seconds, monotonic). Owned by the event
loop thread; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from strom.common.config import MAX_LONG, BrokerConfig
from strom.common.types import TopicPartition
from strom.metadata.image import MetadataImage
from strom.protocol import fast
from strom.replication.partition import Partition

LEADER, FOLLOWER = "leader", "follower"
#: Every partition of the topic (``*``).
ALL_PARTITIONS: frozenset[int] = frozenset({-1})


class ReplicaQuota(Protocol):
    """What the fetch paths ask of a replication quota."""

    @property
    def throttles_any(self) -> bool: ...

    def is_throttled(self, tp: TopicPartition) -> bool: ...

    def is_quota_exceeded(self) -> bool: ...

    def record(self, size: int) -> None: ...


class SimpleRate:
    """Kafka's ``SimpleRate`` over a ``SampledStat``: up to ``samples`` windows of
    ``window_s`` each, created as values arrive; a value goes into the current window (a
    new one once it is ``window_s`` old), a window older than ``samples * window_s`` is
    reset, and the rate is the kept sum over the time since the oldest window started (at
    least ``window_s``)."""

    __slots__ = ("_current", "_samples", "_starts", "_values", "_window")

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        self._samples = max(1, samples)
        self._window = window_s
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now: float) -> None:
        if not self._starts:
            self._starts.append(now)
            self._values.append(0.0)
        i = self._current
        if now - self._starts[i] >= self._window:  # the current window is complete
            i = self._current = (i + 1) % self._samples
            if i == len(self._starts):
                self._starts.append(now)
                self._values.append(0.0)
            else:
                self._starts[i] = now
                self._values[i] = 0.0
        self._values[i] += value

    def rate(self, now: float) -> float:
        """Bytes (units) a second over the kept windows."""
        expire = self._samples * self._window
        for i, start in enumerate(self._starts):
            if now - start >= expire:
                self._starts[i] = now
                self._values[i] = 0.0
        if not self._starts:
            return 0.0
        return sum(self._values) / max(now - min(self._starts), self._window)


def throttled_partitions(value: str | None, node_id: int) -> frozenset[int]:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on broker
    ``node_id``: :data:`ALL_PARTITIONS` for ``*``, else the partitions of the
    ``partition:broker`` entries naming ``node_id`` (the value is validated when set)."""
    text = (value or "").strip()
    if text == "*":
        return ALL_PARTITIONS
    out = set()
    for entry in text.split(","):
        partition, _, broker = entry.strip().partition(":")
        if partition.strip().isdigit() and broker.strip().isdigit() and (
                int(broker) == node_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's quota (``kind``: leader or follower) on broker ``node_id``; see the
    module docstring. ``bound`` is bytes a second (``MAX_LONG``: none)."""

    def __init__(self, kind: str, node_id: int, now: Callable[[], float], *,
                 samples: int = 11, window_s: float = 1.0, bound: int = MAX_LONG) -> None:
        self.kind = kind
        self.node_id = node_id
        self.bound = bound
        self._now = now
        self._rate = SimpleRate(samples, window_s)
        self._throttled: dict[str, frozenset[int]] = {}

    def mark_throttled(self, topic: str, value: str | None) -> None:
        """Apply ``topic``'s throttled-replicas value (None or empty: nothing throttled)."""
        partitions = throttled_partitions(value, self.node_id)
        if partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def throttled_topics(self) -> dict[str, frozenset[int]]:
        return dict(self._throttled)

    @property
    def throttles_any(self) -> bool:
        """Some topic lists a partition of this broker (else nothing is ever held back)."""
        return bool(self._throttled)

    def is_throttled(self, tp: TopicPartition) -> bool:
        partitions = self._throttled.get(tp.topic)
        return partitions is not None and (
            partitions is ALL_PARTITIONS or tp.partition in partitions)

    def is_quota_exceeded(self) -> bool:
        """The measured rate is above the bound (a rate equal to it is within)."""
        return self.bound < MAX_LONG and self._rate.rate(self._now()) > self.bound

    def rate(self) -> float:
        return self._rate.rate(self._now())

    def record(self, size: int) -> None:
        if size > 0:
            self._rate.record(size, self._now())


class ReplicationQuotas:
    """The leader and follower quotas of broker ``node_id``, configured from the metadata
    (:meth:`configure` after every image; the effective broker config carries the rates)."""

    def __init__(self, node_id: int, now: Callable[[], float], *, samples: int = 11,
                 window_s: float = 1.0) -> None:
        self.leader = ReplicationQuota(LEADER, node_id, now, samples=samples,
                                       window_s=window_s)
        self.follower = ReplicationQuota(FOLLOWER, node_id, now, samples=samples,
                                         window_s=window_s)
        self._image: MetadataImage | None = None

    @classmethod
    def for_broker(cls, config: BrokerConfig, node_id: int, now: Callable[[], float]
                   ) -> ReplicationQuotas:
        return cls(node_id, now, samples=int(config.get("replication.quota.window.num")),
                   window_s=float(config.get("replication.quota.window.size.seconds")))

    def configure(self, image: MetadataImage, config: BrokerConfig) -> None:
        """Take the rates from ``config`` and the throttled replicas of every topic in
        ``image`` (a deleted topic's are dropped). Only the topics that differ from the
        previous image's (a changed topic is a new ``TopicInfo``) are looked at, so a
        metadata write costs what it changed, not the number of topics."""
        self.set_rates(int(config.get("leader.replication.throttled.rate")),
                       int(config.get("follower.replication.throttled.rate")))
        previous, self._image = self._image, image
        if previous is None:
            self.set_topics({name: topic.configs for name, topic in image.topics.items()})
            return
        old, new = previous.topics, image.topics
        for quota in (self.leader, self.follower):
            key = f"{quota.kind}.replication.throttled.replicas"
            for name in old:
                if name not in new:
                    quota.mark_throttled(name, None)
            for name, topic in new.items():
                if old.get(name) is not topic:
                    quota.mark_throttled(name, topic.configs.get(key))

    def set_rates(self, leader: int, follower: int) -> None:
        self.leader.bound = leader
        self.follower.bound = follower

    def set_topics(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        for quota in (self.leader, self.follower):
            key = f"{quota.kind}.replication.throttled.replicas"
            for name in [n for n in quota.throttled_topics() if n not in configs]:
                quota.mark_throttled(name, None)
            for name, topic_configs in configs.items():
                quota.mark_throttled(name, topic_configs.get(key))


def should_leader_throttle(quota: ReplicaQuota, partition: Partition, replica_id: int) -> bool:
    """Kafka's ``shouldLeaderThrottle``: leave ``partition``'s records out of follower
    ``replica_id``'s fetch — throttled, quota exceeded, and the follower not in the ISR."""
    return (replica_id not in partition.isr and quota.is_throttled(partition.tp)
            and quota.is_quota_exceeded())


def throttled_size(quota: ReplicaQuota, topics: Iterable[fast.FetchTopicResult],
                   name_of: Callable[[fast.FetchTopicResult], str | None]) -> int:
    """Record bytes of the throttled partitions in a follower's fetch response (Kafka
    records them all, the in-sync replicas' included); ``name_of`` names a topic (by name
    up to Fetch v12, by id from v13; None: unknown)."""
    size = 0
    for topic in topics:
        name = name_of(topic)
        if name is None:
            continue
        for p in topic.partitions:
            if p.records and quota.is_throttled(TopicPartition(name, p.partition)):
                size += sum(len(r) if isinstance(r, bytes | memoryview) else r.size
                            for r in p.records)
    return size
