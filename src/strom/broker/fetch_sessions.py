"""Incremental fetch sessions (KIP-227): the broker's cache of what each session last sent.

A client that fetches many partitions names them all once, in a *full* request (session id 0,
epoch 0); the broker answers with a new session id, remembers each partition's request
parameters and the high watermark / log start / last stable offset it sent, and afterwards the
client sends *incremental* requests (the session id and the next epoch) that list only the
partitions it adds or changes (``forgotten_topics_data`` drops some), while the broker answers
only the partitions with something new: records, a moved high watermark, log start offset or
last stable offset, a preferred read replica, a diverging epoch or an error. An idle consumer
of a hundred partitions then sends and receives a few dozen bytes per poll.

Request metadata (session id, epoch), as Kafka's ``FetchMetadata``:

* id 0, epoch -1 (:data:`FINAL_EPOCH`): sessionless, every pre-v7 fetch and librdkafka's.
* any id, epoch 0 (:data:`INITIAL_EPOCH`): full request; closes the named session (if any)
  and asks for a new one. The cache may refuse (full, nothing evictable): the answer then
  carries session id 0, a full sessionless response; "cache full" is never an error.
* id n != 0, epoch -1: full request that closes session n and asks for none.
* id n != 0, epoch e > 0: incremental; FETCH_SESSION_ID_NOT_FOUND (70) when n is not cached,
  INVALID_FETCH_SESSION_EPOCH (71) when e is not the session's next epoch,
  FETCH_SESSION_TOPIC_ID_ERROR (106) when the session was opened with topic names (v7-12) and
  continued with ids (v13+) or the reverse. Errors are top-level, with no partitions.

A session's first incremental epoch is 1; each accepted incremental request moves it on by one
(wrapping from 2^31-1 to 1). Session ids are random in [1, 2^31-1] (kafka-python reads -1 as
"throttled"). Sessions are not tied to a connection; they live until closed, evicted for a new
session or emptied by ``forgotten_topics_data``.

Eviction (Kafka's ``FetchSessionCache.tryEvict``), tried only when a new session finds all
``max.incremental.fetch.session.cache.slots`` taken: first the least recently used session if
it has been idle longer than ``min.incremental.fetch.session.eviction.ms``; otherwise the least
valuable evictable session — ordered by (follower's, partition count, id) — if the new one is
worth more. Sessions younger than the eviction time are evictable only by a follower's new
session, and only when they are consumers'. The scans are linear; they run only when the cache
is full.

Owned by the Fetch handler, on the broker's event loop (no locks). An incremental request is
checked and its epoch advanced when it arrives; its response is filtered when it is sent
(after parking), and dropped to INVALID_FETCH_SESSION_EPOCH if another request of the session
was accepted in between.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from strom.common.errors import error_class
from strom.protocol import fast

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF
_TOPIC_IDS_VERSION = 13  # Fetch v13+ names topics by id (KIP-516)
SESSION_ID_NOT_FOUND: int = error_class("FETCH_SESSION_ID_NOT_FOUND").code  # 70
INVALID_EPOCH: int = error_class("INVALID_FETCH_SESSION_EPOCH").code  # 71
TOPIC_ID_ERROR: int = error_class("FETCH_SESSION_TOPIC_ID_ERROR").code  # 106

# A session's partitions: by (topic name, partition) in v7-12, (topic id, partition) in v13+.
PartitionKey = tuple[str | bytes | None, int]


class Closeable(Protocol):
    def close(self) -> None: ...


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


def topic_key(name: str | None, topic_id: bytes | None, uses_ids: bool) -> str | bytes | None:
    return (bytes(topic_id) if topic_id is not None else None) if uses_ids else name


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the client's last request for it and what we last sent.

    ``high_watermark`` -1 forces the partition into the next response (new partitions, and
    partitions whose last answer was an error, so that the error's end is reported too).
    """

    topic: fast.FetchTopic  # name / id only; ``partitions`` is unused
    request: fast.FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1

    def must_respond(self, out: fast.FetchPartitionResult) -> bool:
        """Whether ``out`` goes into an incremental response; records what is sent."""
        changed = bool(out.records) or out.preferred_read_replica >= 0 or (
            out.diverging_epoch is not None)
        if out.high_watermark != self.high_watermark:
            self.high_watermark = out.high_watermark
            changed = True
        if out.log_start_offset != self.log_start_offset:
            self.log_start_offset = out.log_start_offset
            changed = True
        if out.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = out.last_stable_offset
            changed = True
        if out.error_code:
            self.high_watermark = -1
            changed = True
        return changed


@dataclass(slots=True, eq=False)
class FetchSession:
    """A cached session. ``epoch`` is the epoch its next incremental request must carry."""

    id: int
    follower: bool
    uses_topic_ids: bool
    partitions: dict[PartitionKey, CachedPartition]
    created: float
    last_used: float
    epoch: int = 1
    #: What the fetch handler keeps across the session's requests (a follower session's
    #: :class:`~strom.broker.follower_tracking.SessionTracker`); closed with the session.
    tracker: Closeable | None = None

    def close(self) -> None:
        """The session left the cache (removed, evicted or emptied)."""
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None

    def update(self, req: fast.FetchRequest) -> None:
        """Apply an incremental request: add / update its partitions, drop the forgotten."""
        ids = self.uses_topic_ids
        parts = self.partitions
        for topic in req.topics:
            key = topic_key(topic.name, topic.topic_id, ids)
            shared = fast.FetchTopic(topic.name, topic.topic_id, [])
            for p in topic.partitions:
                cached = parts.get((key, p.partition))
                if cached is None:
                    parts[(key, p.partition)] = CachedPartition(shared, p)
                else:
                    cached.request = p
        for name, topic_id, numbers in req.forgotten:
            key = topic_key(name, topic_id, ids)
            for number in numbers:
                parts.pop((key, number), None)

    def requested(self) -> Iterator[tuple[fast.FetchTopic, fast.FetchPartition]]:
        """The partitions to read, in session order (those that last returned data last)."""
        for cached in self.partitions.values():
            yield cached.topic, cached.request

    def filter(self, topics: list[fast.FetchTopicResult]) -> list[fast.FetchTopicResult]:
        """Keep the partitions that changed (updating the cache); rotate those with records
        to the end, so a response capped by ``max_bytes`` serves the others first next time."""
        ids = self.uses_topic_ids
        parts = self.partitions
        kept: list[fast.FetchTopicResult] = []
        for topic in topics:
            key = topic_key(topic.name, topic.topic_id, ids)
            changed: list[fast.FetchPartitionResult] = []
            for out in topic.partitions:
                cached = parts.get((key, out.partition))
                if cached is None or cached.must_respond(out):
                    changed.append(out)
                    if cached is not None and out.records:
                        parts[(key, out.partition)] = parts.pop((key, out.partition))
            if changed:
                kept.append(fast.FetchTopicResult(topic.name, topic.topic_id, changed))
        return kept


@dataclass(slots=True)
class FetchSessionCache:
    """The broker's sessions, at most ``max_entries`` (Kafka's default 1000).

    Times are the broker clock's monotonic seconds.
    """

    max_entries: int
    eviction_s: float
    sessions: dict[int, FetchSession] = field(default_factory=dict)
    evictions: int = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def create(self, now: float, follower: bool, uses_topic_ids: bool,
               partitions: dict[PartitionKey, CachedPartition]) -> int:
        """Cache a new session and return its id, or :data:`INVALID_SESSION_ID` if there is
        no room and nothing may be evicted for it."""
        if len(self.sessions) >= self.max_entries and not self._evict(
                follower, len(partitions), now):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = random.getrandbits(31)
        self.sessions[session_id] = FetchSession(session_id, follower, uses_topic_ids,
                                                 partitions, now, now)
        return session_id

    def _evict(self, follower: bool, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - stalest.last_used > self.eviction_s:
            return self._drop(stalest)
        candidates = [s for s in self.sessions.values()
                      if now - s.created > self.eviction_s or (follower and not s.follower)]
        if not candidates:
            return False
        weakest = min(candidates, key=lambda s: (s.follower, len(s.partitions), s.id))
        # The new session's key carries id 0, below every cached id: it must be worth more.
        if (follower, size) > (weakest.follower, len(weakest.partitions)):
            return self._drop(weakest)
        return False

    def _drop(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        session.close()
        self.evictions += 1
        return True


@dataclass(slots=True)
class Answer:
    """What a session context turns a read into: the topics to send, the response's session id
    and its top-level error code."""

    topics: list[fast.FetchTopicResult]
    session_id: int
    error_code: int = 0


@dataclass(slots=True)
class NewSession:
    """A full request with epoch 0: a session is created when it is answered."""

    cache: FetchSessionCache
    follower: bool
    uses_topic_ids: bool

    def finish(self, req: fast.FetchRequest, topics: list[fast.FetchTopicResult],
               now: float) -> Answer:
        ids = self.uses_topic_ids
        partitions: dict[PartitionKey, CachedPartition] = {}
        results = (out for topic in topics for out in topic.partitions)
        for topic in req.topics:
            key = topic_key(topic.name, topic.topic_id, ids)
            shared = fast.FetchTopic(topic.name, topic.topic_id, [])
            for p, out in zip(topic.partitions, results, strict=False):
                cached = CachedPartition(shared, p)
                cached.must_respond(out)
                partitions[(key, p.partition)] = cached
        return Answer(topics, self.cache.create(now, self.follower, ids, partitions))


@dataclass(slots=True)
class Incremental:
    """An accepted incremental request; ``epoch`` is the session's epoch after it."""

    cache: FetchSessionCache
    session: FetchSession
    epoch: int

    def finish(self, req: fast.FetchRequest, topics: list[fast.FetchTopicResult],
               now: float) -> Answer:
        session = self.session
        if session.epoch != self.epoch:  # another request of the session got in first
            return Answer([], session.id, INVALID_EPOCH)
        session.last_used = now
        return Answer(session.filter(topics), session.id)


SessionContext = NewSession | Incremental


def open_context(cache: FetchSessionCache, req: fast.FetchRequest, version: int,
                 now: float) -> SessionContext | int | None:
    """What a v7+ request with session metadata other than (0, -1) asks for.

    Returns None for a sessionless full request, a Kafka error code (int) for a top-level
    error, or the context that answers the request.
    """
    epoch = req.session_epoch
    uses_ids = version >= _TOPIC_IDS_VERSION
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if req.session_id != INVALID_SESSION_ID:
            cache.remove(req.session_id)
        if epoch == FINAL_EPOCH or cache.max_entries == 0:
            return None
        return NewSession(cache, req.replica_id >= 0, uses_ids)
    session = cache.get(req.session_id)
    if session is None:
        return SESSION_ID_NOT_FOUND
    if session.epoch != epoch:
        return INVALID_EPOCH
    if session.uses_topic_ids != uses_ids:
        return TOPIC_ID_ERROR
    session.update(req)
    if not session.partitions:
        cache.remove(session.id)
        return None
    session.last_used = now
    session.epoch = next_epoch(session.epoch)
    return Incremental(cache, session, session.epoch)


__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "Answer",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "Incremental",
    "NewSession",
    "SessionContext",
    "next_epoch",
    "open_context",
]
