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

A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: the leader
restarted or evicted it) or a failed request ends the session: the next request is full
again. A leader that answers a full request with session id 0 (its cache is full) keeps
getting full requests. Owned by the fetcher's task; not thread-safe.
"""

from __future__ import annotations

from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.protocol import fast as wire_fetch
from strom.replication.fetcher import FetchQuery, FetchRequest

INITIAL_EPOCH = 0
_MAX_EPOCH = 0x7FFFFFFF
#: Top-level answers that end the session (the next request starts a new one).
SESSION_ERRORS = frozenset({error_class("FETCH_SESSION_ID_NOT_FOUND").code,
                            error_class("INVALID_FETCH_SESSION_EPOCH").code})

#: What the leader's session holds of one partition.
_Sent = tuple[int, int, int, int]
#: A partition in the session: its name and its topic id (the wire names the id, Fetch v13;
#: a topic deleted and created again under its name is another partition to the leader).
_Key = tuple[TopicPartition, bytes]


def topic_id_bytes(q: FetchQuery) -> bytes:
    """The query's topic id as the wire carries it (zeros: unknown)."""
    return q.topic_id.bytes if q.topic_id is not None else bytes(16)


def _key(q: FetchQuery) -> _Key:
    return (q.tp, topic_id_bytes(q))


def _params(q: FetchQuery) -> _Sent:
    return (q.current_leader_epoch, q.fetch_offset, q.log_start_offset,
            q.partition_max_bytes)


class FollowerFetchSession:
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent: dict[_Key, _Sent] = {}
        self._pending: dict[_Key, _Sent] | None = None
        self._pending_full = False

    @property
    def incremental(self) -> bool:
        """Whether the next request is incremental (its answer leaves unchanged partitions
        out)."""
        return self.session_id != 0

    def build(self, request: FetchRequest) -> wire_fetch.FetchRequest:
        """The wire request for the fetcher's ``request`` (every partition it wants now), as
        Fetch v13 fields: topics by id, read_uncommitted."""
        wanted = {_key(q): q for q in request.partitions}
        if self.session_id == 0:
            queries = list(request.partitions)
            forgotten: list[_Key] = []
            epoch = INITIAL_EPOCH
        else:
            sent = self._sent
            queries = [q for key, q in wanted.items() if sent.get(key) != _params(q)]
            forgotten = [key for key in sent if key not in wanted]
            epoch = self.epoch
        self._pending = {key: _params(q) for key, q in wanted.items()}
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
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        self._sent = pending if self.session_id else {}

    def reset(self) -> None:
        """Start over with a full request (a session error, a failed request, a new
        connection)."""
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = None
