"""A replica fetcher's side of an incremental fetch session (KIP-227), as Kafka's
``FetchSessionHandler`` for its ``ReplicaFetcherThread``.

Without a session every Fetch names every partition the follower follows from that leader,
and every answer carries all of them, changed or not: each round of replication — each
acks=all produce waits for one — costs the number of partitions, so creating partitions
slowed the data path of every other one. With a session the first request names them all
(session id 0, epoch 0: the leader answers with a session id); each later one (the session
id, epoch 1, 2, …) names only the partitions whose fetch parameters changed since they were
last sent (those that got records: their fetch offset moved; new ones) and lists under
``forgotten_topics_data`` those no longer wanted (removed, or paused by the fetcher), and the
leader answers only the partitions with something new (records, a moved high watermark, log
start or last stable offset, an error). A partition the answer leaves out had nothing new.
Building an incremental request compares only the partitions the fetcher marked changed
since its previous request (``FetchRequest.changed``), every partition when it did not say
(its periodic full rebuild) or when the previous request was never answered.

A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: the leader
restarted or evicted it) or a failed request ends the session: the next request is full
again. A leader that answers a full request with session id 0 (its cache is full) keeps
getting full requests. Owned by the fetcher's task; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.protocol import fast as wire_fetch
from strom.replication.fetcher import FetchQuery, FetchRequest

INITIAL_EPOCH = 0
_MAX_EPOCH = 0x7FFFFFFF
#: Top-level answers that end the session (the next request starts a new one).
SESSION_ERRORS = frozenset({error_class("FETCH_SESSION_ID_NOT_FOUND").code,
                            error_class("INVALID_FETCH_SESSION_EPOCH").code})

#: What the leader's session holds of one partition: its topic id as the wire carries it
#: (a topic deleted and created again under its name is another partition to the leader)
#: and the fetch parameters last sent.
_Sent = tuple[bytes, tuple[int, int, int, int]]


def topic_id_bytes(q: FetchQuery) -> bytes:
    """The query's topic id as the wire carries it (zeros: unknown)."""
    return q.topic_id.bytes if q.topic_id is not None else bytes(16)


def _sent(q: FetchQuery) -> _Sent:
    return (topic_id_bytes(q), (q.current_leader_epoch, q.fetch_offset, q.log_start_offset,
                                q.partition_max_bytes))


class FollowerFetchSession:
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, _Sent] = {}
        #: What the request just built changes in ``_sent`` once answered (None: removed).
        self._pending: dict[TopicPartition, _Sent | None] | None = None
        self._pending_full = False

    @property
    def incremental(self) -> bool:
        """Whether the next request is incremental (its answer leaves unchanged partitions
        out)."""
        return self.session_id != 0

    def build(self, request: FetchRequest) -> wire_fetch.FetchRequest:
        """The wire request for the fetcher's ``request`` (every partition it wants now), as
        Fetch v13 fields: topics by id, read_uncommitted. An incremental request compares
        only the partitions the fetcher marked changed (``request.changed``) when it can,
        every partition otherwise."""
        sent = self._sent
        queries: list[FetchQuery] = []
        forgotten: list[tuple[TopicPartition, bytes]] = []
        pending: dict[TopicPartition, _Sent | None] = {}
        if self.session_id == 0:
            queries = list(request.partitions)
            pending = {q.tp: _sent(q) for q in queries}
            epoch = INITIAL_EPOCH
        else:
            epoch = self.epoch
            candidates: Iterable[tuple[TopicPartition, FetchQuery | None]]
            if request.changed is not None and self._pending is None:
                candidates = request.changed.items()
            else:  # unknown (or a request built but not answered): compare them all
                wanted = request.by_tp if request.by_tp is not None else {
                    q.tp: q for q in request.partitions}
                candidates = [*wanted.items(),
                              *((tp, None) for tp in sent if tp not in wanted)]
            for tp, q in candidates:
                before = sent.get(tp)
                now = None if q is None else _sent(q)
                if now == before:
                    continue
                if before is not None and (now is None or now[0] != before[0]):
                    forgotten.append((tp, before[0]))  # gone, or another topic id now
                if q is not None:
                    queries.append(q)
                pending[tp] = now
        self._pending = pending
        self._pending_full = self.session_id == 0
        by_topic: dict[bytes, list[wire_fetch.FetchPartition]] = {}
        for q in queries:
            by_topic.setdefault(topic_id_bytes(q), []).append(wire_fetch.FetchPartition(
                q.tp.partition, q.current_leader_epoch, q.fetch_offset, -1,
                q.log_start_offset, q.partition_max_bytes))
        gone: dict[bytes, list[int]] = {}
        for tp, topic_id in forgotten:
            gone.setdefault(topic_id, []).append(tp.partition)
        return wire_fetch.FetchRequest(
            request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
            isolation_level=0, session_id=self.session_id, session_epoch=epoch,
            topics=[wire_fetch.FetchTopic(None, t, ps) for t, ps in by_topic.items()],
            forgotten=[(None, t, ps) for t, ps in gone.items()], rack_id="")

    def answered(self, session_id: int) -> None:
        """The request just built was answered without a top-level error."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if self._pending_full:
            self.session_id = session_id
            self.epoch = 1 if session_id else INITIAL_EPOCH
            self._sent = {}
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        if not self.session_id:
            self._sent = {}
            return
        sent = self._sent
        for tp, now in pending.items():
            if now is None:
                sent.pop(tp, None)
            else:
                sent[tp] = now

    def reset(self) -> None:
        """Start over with a full request (a session error, a failed request, a new
        connection)."""
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = None
