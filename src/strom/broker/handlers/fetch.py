"""Fetch (1), v4-16: long-poll reads served as file regions (sendfile), woken by appends.

Consumers read up to the high watermark (the last stable offset with read_committed, with the
aborted transactions overlapping the records returned: producer id and first offset, for the
consumer to drop them) through the partition, never through storage. Requests with session
metadata other than sessionless (id 0, epoch -1) go through the incremental fetch session
cache (:mod:`strom.broker.fetch_sessions`, KIP-227): an incremental request reads every
partition of its session and answers only those that changed — a follower's reads only the
partitions its :class:`~strom.broker.follower_tracking.SessionTracker` holds dirty (named,
or changed since its last round; all of them at each periodic sweep), and parks without
purgatory keys, woken by the tracker; sessionless requests never touch the cache. Limits:
``partition_max_bytes`` per partition and ``max_bytes`` per response, with the first non-empty
partition allowed to exceed them by one batch (KIP-74). A request (full or incremental) that
cannot reach ``min_bytes`` parks in the replica manager's fetch purgatory
(:class:`~strom.replication.delayed.DelayedFetch`) until the high watermark of one of its
partitions moves far enough or ``max_wait_ms`` passes, and is answered as soon as it does;
a session's cache is updated from the read that is finally sent.

Followers (``replica_id`` >= 0, CLUSTER_ACTION) read from the leader only
(NOT_LEADER_OR_FOLLOWER elsewhere; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when their
``current_leader_epoch`` is older / newer) and up to the leader's log end; each read records
the follower's fetch offset as its log end
(:meth:`~strom.replication.partition.Partition.update_follower_fetch_state`), which may move
the high watermark and the ISR; the answer carries the high watermark after that. The leader's
replication throttle (:mod:`strom.replication.quota`) leaves a throttled partition's records
out (no error) while its quota is exceeded and the follower is not in the ISR, and records the
throttled partitions' bytes of each follower response sent. Consumers
read from the leader, and from Fetch v11 from followers too, up to the follower's own high
watermark (KIP-392; NOT_LEADER_OR_FOLLOWER on a follower before v11, and on a broker that
holds no replica of a partition the metadata knows). With ``replica.selector.class`` set, a
leader names the consumer's preferred read replica instead of reading
(:mod:`strom.replication.replica_selector`): that partition is answered at once, without
records, and the consumer moves its fetches there. A fetch (v12+) whose
``last_fetched_epoch`` shows that the fetcher's log diverged from this replica's is answered
with ``diverging_epoch`` (epoch, end offset) and no records
(:meth:`~strom.replication.partition.Partition.diverging_epoch`); a follower's fetch offset
is then not recorded. From v16 NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH carry the
current-leader hint and the response the leaders' endpoints (:mod:`.leader_hints`, KIP-951).

Consumer fetches of a connection are paced by its :class:`~strom.broker.fetch_pacing.FetchPacer`
once the client has shown that it stalls on its own queue (librdkafka's queue backoff): the
request may be held briefly and the response capped, never for replicas' fetches. A response
is *backlogged* when some partition filled at least half of what it was allowed (data was left
behind); that is what the pacer's stall detection relies on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import HandlerResult, Request, ResponseParts
from strom.broker.fetch_pacing import FetchPacer
from strom.broker.fetch_sessions import (
    FINAL_EPOCH,
    FetchSession,
    FetchSessionCache,
    Incremental,
    PartitionKey,
    SessionContext,
    open_context,
    topic_key,
)
from strom.broker.follower_tracking import SessionTracker, sweep_interval
from strom.broker.handlers import leader_hints
from strom.broker.handlers.common import check_leader_epoch, topic_name_for
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import (
    InconsistentTopicIdError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.protocol.versions import ApiKey
from strom.replication.delayed import DelayedFetch
from strom.replication.partition import FetchIsolation, Partition
from strom.replication.quota import should_leader_throttle, throttled_size
from strom.replication.replica_manager import as_kafka_error
from strom.replication.replica_selector import (
    FOLLOWER_FETCH_MIN_VERSION,
    preferred_read_replica,
    replica_selector,
)

log = logging.getLogger("strom.broker.fetch")
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER

API_KEY = ApiKey.FETCH
READ_COMMITTED = 1


def _unset_waker(tracker: SessionTracker, waker: Callable[[], None]) -> None:
    if tracker.waker is waker:
        tracker.waker = None


def _other_topic(requested_id: bytes | None, partition: Partition) -> bool:
    """Whether a fetch that named ``requested_id`` (v13+; None or zeros: by name) reached a
    partition of another topic id."""
    return (requested_id is not None and any(requested_id)
            and bytes(requested_id) != partition.topic_id.bytes)


@dataclass(slots=True)
class _Target:
    topic: fast.FetchTopic
    request: fast.FetchPartition
    name: str | None
    partition: Partition | None
    denied: bool = False


#: Whether a partition of a follower's incremental session can be left out of a read.
Unchanged = Callable[[_Target, Partition], bool]


def _unchanged_for_follower(req: fast.FetchRequest, session: FetchSession,
                            tracker: SessionTracker) -> Unchanged:
    """For a follower's incremental session: a partition the request does not name (so its
    fetch offset did not move) is unchanged when it is led here at the epoch asked for, the
    follower has its whole log, and its high watermark, log start and last stable offset are
    what the session last sent — it would be left out of the answer anyway (KIP-227), so it
    is not read at all; the follower's fetch state is still noted (ISR liveness). A fetch
    then costs the partitions that changed, not every partition the follower follows. A
    partition found unchanged is settled in ``tracker`` (not read until it changes)."""
    named = {(topic_key(t.name, t.topic_id, session.uses_topic_ids), p.partition)
             for t in req.topics for p in t.partitions}
    cached_parts = session.partitions
    replica_id = req.replica_id

    def unchanged(target: _Target, partition: Partition) -> bool:
        p = target.request
        key = (topic_key(target.topic.name, target.topic.topic_id, session.uses_topic_ids),
               p.partition)
        if key in named:
            return False
        cached = cached_parts.get(key)
        if (cached is None or cached.high_watermark < 0 or not partition.is_leader
                or p.current_leader_epoch not in (-1, partition.leader_epoch)
                or p.fetch_offset != partition.log_end_offset
                or cached.high_watermark != partition.high_watermark
                or cached.log_start_offset != partition.log_start_offset
                or cached.last_stable_offset != partition.last_stable_offset):
            return False
        try:
            partition.update_follower_fetch_state(replica_id, p.fetch_offset,
                                                  p.log_start_offset)
        except KafkaError:
            return False  # read: the answer carries the error
        tracker.settled(key)
        return True

    return unchanged


class FetchHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self._max_bytes = int(state.config.get("fetch.max.bytes"))
        self._selector = replica_selector(state.config.get("replica.selector.class"))
        self.sessions = FetchSessionCache(
            int(state.config.get("max.incremental.fetch.session.cache.slots")),
            int(state.config.get("min.incremental.fetch.session.eviction.ms")) / 1000)
        self._sweep_s = sweep_interval(int(state.config.get("replica.lag.time.max.ms")))

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        req = fast.decode_fetch_request(request.body, version)
        context: SessionContext | None = None
        unchanged: Unchanged | None = None
        tracker: SessionTracker | None = None
        if req.session_id != 0 or req.session_epoch != FINAL_EPOCH:
            opened = open_context(self.sessions, req, version, self._state.clock.monotonic())
            if isinstance(opened, int):  # a top-level session error, no partitions
                return fast.encode_fetch_response(version, [], error_code=opened)
            context = opened
        image = self._state.store.image
        replicas = self._state.replicas
        targets: list[_Target] = []
        access = self._state.access
        # A follower needs CLUSTER_ACTION; refused, its partitions answer as unauthorized
        # topics (Kafka's choice); a consumer needs READ on each topic.
        follower_denied = req.replica_id >= 0 and not access.allowed(request, CLUSTER)
        if isinstance(context, Incremental) and context.session.follower and not (
                follower_denied):
            session = context.session
            tracker = self._tracker(session)
            keys = tracker.begin_round(session, req, lambda name, topic_id: topic_name_for(
                image, name, topic_id), self._state.clock.monotonic())
            targets = self._tracked_targets(session, keys)
            unchanged = _unchanged_for_follower(req, session, tracker)
        elif isinstance(context, Incremental):  # a consumer's (or a refused follower's)
            targets = self._session_targets(request, req, context.session, follower_denied)
        else:
            for topic in req.topics:
                name = topic_name_for(image, topic.name, topic.topic_id)
                denied = self._denied(request, req, name, follower_denied)
                for p in topic.partitions:
                    partition = replicas.get(name, p.partition) if name is not None else None
                    targets.append(_Target(topic, p, name, partition, denied))
        if req.replica_id >= 0:
            request.quota_exempt = True  # follower fetches: no client quota, as in Kafka
        pacer = request.conn.fetch_pacer if req.replica_id < 0 else None
        if pacer is not None:
            stalls = pacer.stalls
            hold = pacer.before_read(self._state.clock.monotonic())
            if pacer.stalls != stalls and pacer.rate is not None:
                log.debug("consumer %s (client %r) stalled on its own queue; pacing its "
                          "fetches at %.1f MB/s, queue limit about %.1f MB", request.conn.peer,
                          request.conn.client_id, pacer.rate / 1e6, pacer.queue_bytes / 1e6)
            if hold > 0:
                return self._held(hold, req, version, targets, pacer, context,
                                  request.conn.listener)
        return self._respond(req, version, targets, pacer, context, request.conn.listener,
                             unchanged, tracker)

    def _tracker(self, session: FetchSession) -> SessionTracker:
        tracker = session.tracker
        if not isinstance(tracker, SessionTracker):
            tracker = SessionTracker(self._state.replicas.watchers, self._sweep_s)
            session.tracker = tracker
        return tracker

    def _tracked_targets(self, session: FetchSession, keys: list[PartitionKey]
                         ) -> list[_Target]:
        """The targets of a tracked follower session's ``keys`` (still in the session),
        names resolved again (a follower's access was checked for the request)."""
        image = self._state.store.image
        parts = session.partitions
        targets: list[_Target] = []
        for key in keys:
            cached = parts.get(key)
            if cached is not None:  # (the partition is looked up by _read)
                name = topic_name_for(image, cached.topic.name, cached.topic.topic_id)
                targets.append(_Target(cached.topic, cached.request, name, None))
        return targets

    def _denied(self, request: Request, req: fast.FetchRequest, name: str | None,
                follower_denied: bool) -> bool:
        """A follower needs CLUSTER_ACTION (``follower_denied``), a consumer READ on the
        topic; an unknown topic (``name`` None) is answered as unknown, not denied."""
        return name is not None and (follower_denied or (
            req.replica_id < 0 and not self._state.access.allowed(request, TOPIC, name)))

    def _session_targets(self, request: Request, req: fast.FetchRequest,
                         session: FetchSession, follower_denied: bool) -> list[_Target]:
        """Every partition of ``session``, names resolved and access checked again (a topic
        may have been deleted or an ACL removed since the session began)."""
        image = self._state.store.image
        replicas = self._state.replicas
        resolved: dict[tuple[str | None, bytes | None], tuple[str | None, bool]] = {}
        targets: list[_Target] = []
        for topic, p in session.requested():
            key = (topic.name, topic.topic_id)
            found = resolved.get(key)
            if found is None:
                name = topic_name_for(image, topic.name, topic.topic_id)
                found = resolved[key] = (name, self._denied(request, req, name, follower_denied))
            name, denied = found
            partition = replicas.get(name, p.partition) if name is not None else None
            targets.append(_Target(topic, p, name, partition, denied))
        return targets

    async def _held(
        self, hold: float, req: fast.FetchRequest, version: int, targets: list[_Target],
        pacer: FetchPacer, context: SessionContext | None, listener: str | None,
    ) -> ResponseParts:
        await asyncio.sleep(hold)
        result = self._respond(req, version, targets, pacer, context, listener)
        return result if isinstance(result, list) else await result

    def _respond(
        self, req: fast.FetchRequest, version: int, targets: list[_Target],
        pacer: FetchPacer | None, context: SessionContext | None, listener: str | None,
        unchanged: Unchanged | None = None, tracker: SessionTracker | None = None,
    ) -> ResponseParts | Awaitable[ResponseParts]:
        cap = pacer.budget(self._state.clock.monotonic()) if pacer is not None else None
        topics, size, errors, backlogged = self._read(req, version, targets, cap, unchanged)
        # (a tracked session parks with nothing dirty: a change to any partition wakes it)
        if size >= req.min_bytes or req.max_wait_ms <= 0 or errors or (
                not targets and tracker is None):
            if pacer is not None:
                pacer.after_read(self._state.clock.monotonic(), size, backlogged)
            return self._encode(req, version, topics, context, listener)
        if pacer is not None:  # parking: the consumer has caught up
            pacer.after_read(self._state.clock.monotonic(), 0, False)
        if tracker is not None:
            return self._wait_tracked(req, version, tracker, context, listener, unchanged)
        return self._wait(req, version, targets, context, listener)

    def _encode(self, req: fast.FetchRequest, version: int,
                topics: list[fast.FetchTopicResult],
                context: SessionContext | None, listener: str | None) -> ResponseParts:
        quota = self._state.replication_quotas.leader
        if req.replica_id >= 0 and quota.throttles_any:  # final: count what the throttle sent
            image = self._state.store.image
            quota.record(throttled_size(quota, topics, lambda t: topic_name_for(
                image, t.name, t.topic_id)))
        error_code = session_id = 0
        if context is not None:
            answer = context.finish(req, topics, self._state.clock.monotonic())
            topics, error_code, session_id = answer.topics, answer.error_code, answer.session_id
        endpoints = (leader_hints.node_endpoints(self._state, listener,
                                                 leader_hints.fetch_hints(topics))
                     if version >= leader_hints.FETCH_HINT_VERSION else None)
        return fast.encode_fetch_response(version, topics, error_code=error_code,
                                          session_id=session_id, node_endpoints=endpoints)

    def _wait(
        self, req: fast.FetchRequest, version: int, targets: list[_Target],
        context: SessionContext | None, listener: str | None,
    ) -> Awaitable[ResponseParts]:
        keys = [TopicPartition(t.name, t.request.partition) for t in targets if t.name]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[fast.FetchTopicResult]] = loop.create_future()

        def read() -> tuple[list[fast.FetchTopicResult], int, bool]:
            topics, size, errors, _ = self._read(req, version, targets)
            return topics, size, errors

        self._state.replicas.park_fetch(
            DelayedFetch(req.max_wait_ms, max(req.min_bytes, 1), read, future,
                         self._change_check(req, targets)), keys)
        return self._encode_when_read(future, req, version, context, listener)

    def _wait_tracked(
        self, req: fast.FetchRequest, version: int, tracker: SessionTracker,
        context: SessionContext | None, listener: str | None, unchanged: Unchanged | None,
    ) -> Awaitable[ResponseParts]:
        """Park a tracked follower session's fetch: no purgatory keys; a change to any of its
        partitions (the tracker's watch) re-reads the dirty ones."""
        assert isinstance(context, Incremental)
        session = context.session
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[fast.FetchTopicResult]] = loop.create_future()

        def read() -> tuple[list[fast.FetchTopicResult], int, bool]:
            targets = self._tracked_targets(session, list(tracker.dirty))
            topics, size, errors, _ = self._read(req, version, targets, None, unchanged)
            return topics, size, errors

        parked = DelayedFetch(req.max_wait_ms, max(req.min_bytes, 1), read, future)

        def wake() -> None:
            if not parked.is_completed:
                parked.try_complete()

        tracker.waker = wake
        future.add_done_callback(lambda _: _unset_waker(tracker, wake))
        self._state.replicas.park_fetch(parked, ())
        return self._encode_when_read(future, req, version, context, listener)

    async def _encode_when_read(
        self, pending: asyncio.Future[list[fast.FetchTopicResult]], req: fast.FetchRequest,
        version: int, context: SessionContext | None, listener: str | None,
    ) -> ResponseParts:
        """Encode a parked read once it completes (a session is updated from this read)."""
        return self._encode(req, version, await pending, context, listener)

    def _change_check(self, req: fast.FetchRequest, targets: list[_Target]
                      ) -> Callable[[Hashable], bool]:
        """For a parked fetch: whether an event on one partition may let it answer — the
        partition is no longer the one read (gone, re-created), its leadership or epoch
        moved, or it has records past the fetch offset (to the log end for a follower, to
        the high watermark / last stable offset for a consumer). Anything unsure: yes."""
        by_key = {TopicPartition(t.name, t.request.partition): t for t in targets if t.name}
        replicas = self._state.replicas
        follower = req.replica_id >= 0
        committed = req.isolation_level == READ_COMMITTED

        def changed(key: Hashable) -> bool:
            target = by_key.get(key) if isinstance(key, TopicPartition) else None
            if target is None or target.partition is None or target.name is None:
                return True
            partition = replicas.get(target.name, target.request.partition)
            if partition is not target.partition or not partition.is_leader or (
                    target.request.current_leader_epoch not in (-1, partition.leader_epoch)):
                return True
            if follower:
                bound: int = partition.log_end_offset
            else:
                bound = partition.last_stable_offset if committed else partition.high_watermark
            return bool(target.request.fetch_offset < bound)

        return changed

    def _known(self, topic: str, partition: int) -> bool:
        """Whether the metadata image has ``topic``-``partition`` (hosted or not)."""
        info = self._state.store.image.topics.get(topic)
        return info is not None and any(p.partition == partition for p in info.partitions)

    def _read(
        self, req: fast.FetchRequest, version: int, targets: list[_Target],
        cap: int | None = None, unchanged: Unchanged | None = None,
    ) -> tuple[list[fast.FetchTopicResult], int, bool, bool]:
        """Read every target; returns (topics, record bytes, any error, backlogged). With
        ``unchanged`` (a follower's incremental session) a partition it finds unchanged is
        not read and not answered — only the follower's fetch state is noted."""
        replica_id = req.replica_id
        if replica_id >= 0:
            isolation = FetchIsolation.LOG_END  # a follower reads to the leader's log end
        elif req.isolation_level == READ_COMMITTED:
            isolation = FetchIsolation.TXN_COMMITTED
        else:
            isolation = FetchIsolation.HIGH_WATERMARK
        read_committed = isolation is FetchIsolation.TXN_COMMITTED
        throttle = self._state.replication_quotas.leader
        fetch_only_leader = replica_id >= 0 or version < FOLLOWER_FETCH_MIN_VERSION
        selector = self._selector if not fetch_only_leader else None
        budget = min(req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF, self._max_bytes)
        if cap is not None:
            budget = min(budget, cap)
        total = 0
        errors = False
        backlogged = False
        min_one = True
        results: list[fast.FetchTopicResult] = []
        current: fast.FetchTopicResult | None = None
        for target in targets:
            if unchanged is not None and target.name is not None and not target.denied:
                partition = target.partition = self._state.replicas.get(
                    target.name, target.request.partition)
                if partition is not None and unchanged(target, partition):
                    continue
            if current is None or current.name != target.topic.name or (
                current.topic_id != target.topic.topic_id
            ):
                current = fast.FetchTopicResult(target.topic.name, target.topic.topic_id, [])
                results.append(current)
            p = target.request
            out = fast.FetchPartitionResult(p.partition)
            current.partitions.append(out)
            if target.denied:
                out.error_code = TOPIC_DENIED
                errors = True
                continue
            # Looked up on every read: a parked fetch sees a partition deleted or re-created.
            partition = target.partition = (
                self._state.replicas.get(target.name, p.partition) if target.name else None)
            if partition is None:
                error = UnknownTopicIdError if target.name is None else UnknownTopicOrPartitionError
                if target.name is not None and self._known(target.name, p.partition):
                    error = NotLeaderOrFollowerError  # known, but no replica here (as Kafka)
                out.error_code = error.code
                errors = True
                self._hint(out, version, target.name)
                continue
            if _other_topic(target.topic.topic_id, partition):
                # asked by id (v13+) and the name now belongs to another topic: a parked
                # fetch of a topic deleted and created again meanwhile (Kafka's answer)
                out.error_code = InconsistentTopicIdError.code
                errors = True
                continue
            try:
                check_leader_epoch(p.current_leader_epoch, partition.leader_epoch)
                max_bytes = min(p.partition_max_bytes, budget - total)
                if replica_id >= 0 and not partition.is_leader:
                    raise NotLeaderOrFollowerError(
                        f"this broker is not the leader of {target.name}-{p.partition}")
                preferred = -1 if selector is None else preferred_read_replica(
                    selector, partition, req.rack_id, p.fetch_offset,
                    self._state.store.image.brokers)
                # as Kafka: a preferred replica is named before the log is looked at
                diverging = (partition.diverging_epoch(p.fetch_offset, p.last_fetched_epoch)
                             if preferred < 0 and p.last_fetched_epoch >= 0 else None)
                if preferred >= 0:  # no read: answered now, as Kafka does (not an error)
                    data = None
                    out.preferred_read_replica = preferred
                    errors = True
                elif diverging is not None:  # no records: the fetcher truncates first
                    out.diverging_epoch = diverging
                    data = None
                elif (max_bytes <= 0 and not min_one) or (replica_id >= 0 and (
                        p.fetch_offset == partition.log_end_offset  # caught up: no read
                        or should_leader_throttle(throttle, partition, replica_id))):
                    data = None
                else:
                    data = partition.read(p.fetch_offset, max(max_bytes, 0), isolation,
                                          min_one=min_one, fetch_only_leader=fetch_only_leader)
                if replica_id >= 0 and diverging is None:
                    # the follower has everything below its fetch offset
                    partition.update_follower_fetch_state(replica_id, p.fetch_offset,
                                                          p.log_start_offset)
            except Exception as exc:
                err = as_kafka_error(exc)
                out.error_code = err.code
                out.high_watermark = partition.high_watermark
                out.last_stable_offset = partition.last_stable_offset
                out.log_start_offset = partition.log_start_offset
                errors = True
                self._hint(out, version, target.name)
                continue
            out.high_watermark = partition.high_watermark
            out.last_stable_offset = partition.last_stable_offset
            out.log_start_offset = partition.log_start_offset
            if read_committed:
                out.aborted_transactions = (data.aborted_transactions or []
                                            if data is not None else [])
            if data is not None and data.size > 0:
                out.records = list(data.regions)
                total += data.size
                min_one = False
                backlogged = backlogged or data.size * 2 >= max_bytes
            else:
                out.records = []
        return results, total, errors, backlogged

    def _hint(self, out: fast.FetchPartitionResult, version: int, name: str | None) -> None:
        """The current-leader hint of a partition answered with an error that carries one."""
        if (name is not None and version >= leader_hints.FETCH_HINT_VERSION
                and out.error_code in leader_hints.FETCH_HINTED):
            out.current_leader = leader_hints.current_leader(self._state, name, out.partition)
