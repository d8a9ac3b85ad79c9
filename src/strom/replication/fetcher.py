"""Follower fetching as a sans-IO state machine: Kafka's ``AbstractFetcherThread`` /
``ReplicaFetcherThread`` without threads or sockets.

A :class:`ReplicaFetcher` holds the partitions this broker follows from one source broker
(the leader; ``num.replica.fetchers`` of them per leader, a partition always in the same
one). Each partition is in one of two phases:

* **truncating** — entered whenever the partition is (re)added for a leader epoch, and when
  the follower's log turns out to end past the leader's. An OffsetForLeaderEpoch query
  (KIP-101 / KIP-279) asks the leader where the follower's latest epoch ends; the follower
  truncates to the smaller of that and its own log end. When the leader answers with an
  *older* epoch than the one asked for, the follower truncates to where that older epoch
  ends in its own log and asks again (walking back epoch by epoch, as Kafka does); when the
  leader has no epoch up to the one asked for, the follower drops its latest epoch (truncates
  to where it starts) and asks about the one before. A log
  without leader epochs (empty) starts fetching at its log end at once. Nothing is ever
  truncated to the high watermark: a follower keeps every record the leader may still have.
* **fetching** — a Fetch from the follower's log end (``replica_id`` = this broker,
  ``current_leader_epoch`` per partition, the follower's log start,
  ``replica.fetch.max.bytes`` per partition, ``replica.fetch.response.max.bytes``,
  ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``). Fetched batches are appended
  with the leader's offsets and epochs (``FollowerLogs.append_fetched``, which fills the
  leader-epoch cache from the batches), the follower's high watermark follows the leader's
  (bounded by its own log end) and its log start follows the leader's (up to its high
  watermark).

Replication throttle (``quota``, the follower's :class:`~strom.replication.quota.ReplicaQuota`,
Kafka's ``shouldFollowerThrottle``): a partition the quota throttles is left out of the Fetch
while the quota is exceeded unless it has caught up with the leader's high watermark (it is
looked at again after :data:`THROTTLE_RECHECK_MS`); the record bytes received for throttled
partitions are recorded.

Errors per partition: OFFSET_OUT_OF_RANGE below the leader's log start → the follower drops
its log and continues at the leader's log start; otherwise the follower is ahead of the
leader's log end → back to truncating (by epoch). FENCED_LEADER_EPOCH (the follower's
metadata is older), UNKNOWN_LEADER_EPOCH (the leader's is older), NOT_LEADER_OR_FOLLOWER and
any other error pause the partition for ``replica.fetch.backoff.ms``; newer metadata re-adds it
with its new leader epoch (and a fresh truncation). A request that failed as a whole (no
connection, timeout) pauses all its partitions. A write of the follower's log that fails on
disk (``OSError``: a full disk, EIO) — truncating, starting over at the leader's log start,
moving the log start, appending — is reported through ``FollowerLogs.storage_failed`` (the
data directory's health, as a client append's is; appends report it in the replica manager)
and pauses that partition only; the phase stays, so the retry redoes the write. Nothing a
partition's log raises escapes to the other partitions of the fetcher.

How to drive it (the asyncio transport :mod:`strom.broker.replica_fetch` does exactly this; a
deterministic simulation does the same with a scripted network and a manual clock)::

    while running:
        now = clock.now_ms()
        query = fetcher.epoch_request(now)      # None: nobody is truncating
        if query is not None:
            answers = send OffsetForLeaderEpoch(query) to fetcher.source_id
            fetcher.on_epoch_response(query, answers, clock.now_ms())
            # or, when no answer came: fetcher.on_request_failed(query.partitions, now)
        request = fetcher.fetch_request(clock.now_ms())  # None: nothing ready to fetch
        if request is not None:
            answers = send Fetch(request) to fetcher.source_id
            fetcher.on_fetch_response(request, answers, clock.now_ms())
        else:
            sleep until fetcher.next_wakeup_ms(now) (None: until partitions are added)

Cost per request: a fetch request is rebuilt only for the partitions whose query may have
changed since the last one (answered, paused or unpaused, added, removed, changed phase) and
carries them in ``FetchRequest.changed``, so an incremental fetch session compares only those;
every :data:`FULL_REBUILD_MS` (and while the replication throttle holds partitions back) it
is built from every partition (``changed`` None), which also picks up a log start moved by the
follower's own retention. A round of a follower of a thousand partitions costs the few that
moved, not a thousand.

Topic ids: each Fetch names the partition's topic id (the transport sends Fetch by id, so a
leader holding another topic of the same name refuses it), and a hosted partition whose topic
id changed — the topic was deleted and created again under its name, at the same leader and
epoch — starts over (truncating, then fetching from its new log's end): a follower never
feeds one generation's answers into another's log.

Answers are matched to the request they answer: a partition removed, re-added at another
epoch, moved on or replaced by another topic's in between ignores a late answer. All times
are milliseconds of the caller's clock. Owned by one task (the broker's event loop); not
thread-safe.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from strom.common.errors import KafkaError, error_class, error_name
from strom.common.types import TopicPartition
from strom.replication.partition import Partition
from strom.replication.quota import ReplicaQuota

log = logging.getLogger("strom.replication.fetcher")

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
NONE = 0
OFFSET_OUT_OF_RANGE = error_class("OFFSET_OUT_OF_RANGE").code
#: How long a partition held back by the replication throttle waits before it is looked at
#: again (Kafka's fetcher waits its fetch backoff when nothing is left to fetch).
THROTTLE_RECHECK_MS = 100
#: How often a fetch request is built from every partition rather than from those marked
#: changed since the last one.
FULL_REBUILD_MS = 1000


class FollowerLogs(Protocol):
    """The follower side the fetcher works on (the replica manager)."""

    def follower(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition if this broker follows it now, else None."""
        ...

    def append_fetched(self, partition: Partition, records: memoryview) -> None:
        """Append batches fetched from the leader (raises what the log refuses)."""
        ...

    def storage_failed(self, exc: OSError, doing: str) -> None:
        """A follower's write other than an append (a truncation, a log-start move) failed
        on disk: report it where every failing write of the data directory goes."""
        ...


class Phase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(slots=True)
class FollowedPartition:
    """One partition of a fetcher: its leader epoch, phase, next offset and pause;
    ``caught_up``: the last answer's high watermark was reached (Kafka's lag <= 0);
    ``topic_id``: the hosted partition's topic id when last looked at (None: not yet)."""

    tp: TopicPartition
    leader_epoch: int
    phase: Phase = Phase.TRUNCATING
    fetch_offset: int = -1
    delayed_until_ms: int = 0
    caught_up: bool = False
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """The ``replica.fetch.*`` settings of one broker."""

    replica_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    response_max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000


@dataclass(frozen=True, slots=True)
class EpochQuery:
    """Where does ``leader_epoch`` (the follower's latest) end at the leader?"""

    tp: TopicPartition
    current_leader_epoch: int
    leader_epoch: int
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """One OffsetForLeaderEpoch request (``replica_id`` = the follower)."""

    replica_id: int
    partitions: tuple[EpochQuery, ...]


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    error_code: int
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_OFFSET


@dataclass(frozen=True, slots=True)
class FetchQuery:
    tp: TopicPartition
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    #: the follower's topic id for ``tp`` (Fetch v13 names topics by id).
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One Fetch request of a follower (read_uncommitted): every partition ready to fetch.

    ``by_tp``: the same queries by partition (None: build it from ``partitions``).
    ``changed``: the partitions whose query may differ from the previous request the fetcher
    built, with their query now (None: not wanted now); None when unknown (the first
    request, a periodic full rebuild): an incremental fetch session compares them all."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: tuple[FetchQuery, ...]
    by_tp: Mapping[TopicPartition, FetchQuery] | None = None
    changed: Mapping[TopicPartition, FetchQuery | None] | None = None

    def query(self, tp: TopicPartition) -> FetchQuery | None:
        """The query for ``tp`` in this request (None: not asked)."""
        if self.by_tp is not None:
            return self.by_tp.get(tp)
        return next((q for q in self.partitions if q.tp == tp), None)


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""


class ReplicaFetcher:
    """Follows the partitions led by ``source_id``; see the module docstring."""

    def __init__(self, source_id: int, fetcher_id: int, settings: FetcherSettings,
                 logs: FollowerLogs, *, quota: ReplicaQuota | None = None) -> None:
        self.source_id = source_id
        self.fetcher_id = fetcher_id
        self.settings = settings
        self._logs = logs
        self._quota = quota
        self._partitions: dict[TopicPartition, FollowedPartition] = {}
        #: The partitions that are truncating (the epoch request's candidates).
        self._truncating: set[TopicPartition] = set()
        #: The queries of the last fetch request, and the partitions whose query may have
        #: changed since (rebuilt for those only, all of them every :data:`FULL_REBUILD_MS`).
        self._queries: dict[TopicPartition, FetchQuery] = {}
        self._dirty: set[TopicPartition] = set()
        self._paused: dict[TopicPartition, int] = {}  # paused partitions: until when
        self._next_rebuild_ms: int | None = None

    # -- membership -------------------------------------------------------------------------
    def add_partitions(self, epochs: Mapping[TopicPartition, int]) -> None:
        """Follow each partition at its leader epoch; a partition already followed at that
        epoch keeps its state, any other starts truncating."""
        for tp, epoch in epochs.items():
            current = self._partitions.get(tp)
            if current is None or current.leader_epoch != epoch:
                self._partitions[tp] = FollowedPartition(tp, epoch)
                self._truncating.add(tp)
                self._dirty.add(tp)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            if self._partitions.pop(tp, None) is not None:
                self._truncating.discard(tp)
                self._paused.pop(tp, None)
                self._dirty.add(tp)

    def state(self, tp: TopicPartition) -> FollowedPartition | None:
        return self._partitions.get(tp)

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)

    def next_wakeup_ms(self, now_ms: int) -> int | None:
        """When a paused partition becomes ready (``now_ms`` if one is ready now; None
        without partitions)."""
        if not self._partitions:
            return None
        return max(now_ms, min(p.delayed_until_ms for p in self._partitions.values()))

    def _truncating_ready(self, now_ms: int) -> list[FollowedPartition]:
        states = [self._partitions[tp] for tp in sorted(self._truncating)]
        return [p for p in states if p.phase is Phase.TRUNCATING and p.delayed_until_ms <= now_ms]

    def _set_phase(self, state: FollowedPartition, phase: Phase) -> None:
        state.phase = phase
        if phase is Phase.TRUNCATING:
            self._truncating.add(state.tp)
        else:
            self._truncating.discard(state.tp)
        self._dirty.add(state.tp)

    def _pause(self, state: FollowedPartition, now_ms: int) -> None:
        state.delayed_until_ms = now_ms + self.settings.backoff_ms
        self._dirty.add(state.tp)  # _query notes until when

    def _follower(self, state: FollowedPartition) -> Partition | None:
        """The hosted partition ``state`` follows (None: not followed here now). One of
        another topic id than last time (the topic was deleted and created again under
        its name) starts over: truncating, then fetching from its own log's end."""
        partition = self._logs.follower(state.tp)
        if partition is None or partition.topic_id == state.topic_id:
            return partition
        if state.topic_id is not None:
            log.info("%s: now topic id %s (was %s): following it from the start", state.tp,
                     partition.topic_id, state.topic_id)
            self._set_phase(state, Phase.TRUNCATING)
            state.fetch_offset = -1
            state.delayed_until_ms = 0
            state.caught_up = False
        state.topic_id = partition.topic_id
        return partition

    # -- truncation -------------------------------------------------------------------------
    def epoch_request(self, now_ms: int) -> EpochRequest | None:
        """The OffsetForLeaderEpoch request for the partitions that must truncate first."""
        if not self._truncating:
            return None
        queries = []
        for state in self._truncating_ready(now_ms):
            partition = self._follower(state)
            if partition is None or state.phase is not Phase.TRUNCATING:
                continue
            latest = partition.log.latest_epoch
            if latest == UNDEFINED_EPOCH:  # nothing with an epoch: fetch from the log end
                self._start_fetching(state, partition)
                continue
            queries.append(EpochQuery(state.tp, state.leader_epoch, latest, partition.topic_id))
        if not queries:
            return None
        return EpochRequest(self.settings.replica_id, tuple(queries))

    def on_epoch_response(self, request: EpochRequest,
                          answers: Mapping[TopicPartition, EpochAnswer], now_ms: int) -> None:
        for query in request.partitions:
            state = self._partitions.get(query.tp)
            if state is None or state.phase is not Phase.TRUNCATING or (
                    state.leader_epoch != query.current_leader_epoch):
                continue  # removed or re-added since the request was built
            partition = self._follower(state)
            if partition is None or partition.topic_id != query.topic_id:
                continue  # another topic of the same name replaced it meanwhile
            answer = answers.get(query.tp)
            if answer is None or answer.error_code != NONE:
                self._on_error(state, answer.error_code if answer else -1, "OffsetForLeaderEpoch",
                               now_ms)
                continue
            try:
                self._truncate(state, partition, query, answer)
            except OSError as exc:
                self._storage_failed(state, exc, "truncating", now_ms)
            except KafkaError as exc:
                log.warning("%s: truncation failed (%s); retrying", query.tp, exc)
                self._pause(state, now_ms)

    def _truncate(self, state: FollowedPartition, partition: Partition, query: EpochQuery,
                  answer: EpochAnswer) -> None:
        """Kafka's truncation rules for one answer (see the module docstring)."""
        log_end = partition.log_end_offset
        done = True
        if answer.end_offset == UNDEFINED_OFFSET:
            # The leader has no epoch up to ours: what we hold of our latest epoch is not on
            # the leader. Cut it off and ask again about the epoch before.
            target = min(self._epoch_start(partition, query.leader_epoch), log_end)
            done = False
        elif answer.leader_epoch == UNDEFINED_EPOCH:
            target = min(answer.end_offset, log_end)
        else:
            epoch, end = partition.end_offset_for_epoch(answer.leader_epoch)
            if end == UNDEFINED_OFFSET:
                target = min(answer.end_offset, log_end)
            elif epoch != answer.leader_epoch:
                # The leader answered with an epoch this log does not have: cut to the end
                # of the largest epoch below it and ask again.
                target = min(end, log_end)
                done = False
            else:
                target = min(end, answer.end_offset, log_end)
        if target < log_end:
            log.info("%s: truncating from %d to %d (leader %d answered epoch %d ends at %d "
                     "for our epoch %d)", state.tp, log_end, target, self.source_id,
                     answer.leader_epoch, answer.end_offset, query.leader_epoch)
            partition.truncate_to(target)
        if done or partition.log.latest_epoch == UNDEFINED_EPOCH:
            self._start_fetching(state, partition)

    @staticmethod
    def _epoch_start(partition: Partition, epoch: int) -> int:
        for known, start in reversed(partition.log.leader_epochs.entries()):
            if known <= epoch:
                return start
        return partition.log_start_offset

    def _start_fetching(self, state: FollowedPartition, partition: Partition) -> None:
        self._set_phase(state, Phase.FETCHING)
        state.fetch_offset = partition.log_end_offset

    # -- fetching ---------------------------------------------------------------------------
    def fetch_request(self, now_ms: int) -> FetchRequest | None:
        """The next Fetch for the partitions ready to fetch (None: none is), in partition
        order (new ones last between full rebuilds).

        Only the partitions whose query may have changed since the last request are looked
        at — an answer, a pause, a phase or membership change marks them, and a pause that
        ended — every partition every :data:`FULL_REBUILD_MS` (a log start moved by the
        follower's own retention, a hosted partition replaced) and whenever the replication
        throttle holds partitions back (its state moves with time)."""
        settings = self.settings
        quota = self._quota
        throttling = quota is not None and quota.throttles_any
        changed: dict[TopicPartition, FetchQuery | None] | None
        if throttling or self._next_rebuild_ms is None or now_ms >= self._next_rebuild_ms:
            self._next_rebuild_ms = now_ms + FULL_REBUILD_MS
            self._dirty.clear()
            self._paused = {}
            queries: dict[TopicPartition, FetchQuery] = {}
            for tp, state in sorted(self._partitions.items()):
                query = self._query(state, now_ms)
                if query is not None:
                    queries[tp] = query
            self._queries = queries
            changed = None
        else:
            for tp, until in list(self._paused.items()):
                if until <= now_ms:
                    del self._paused[tp]
                    self._dirty.add(tp)
            changed = {}
            while self._dirty:  # (looking a partition up may mark it again)
                tp = self._dirty.pop()
                followed = self._partitions.get(tp)
                query = None if followed is None else self._query(followed, now_ms)
                if query is None:
                    self._queries.pop(tp, None)
                else:
                    self._queries[tp] = query
                changed[tp] = query
        if not self._queries:
            return None
        by_tp = dict(self._queries)
        return FetchRequest(settings.replica_id, settings.max_wait_ms, settings.min_bytes,
                            settings.response_max_bytes, tuple(by_tp.values()), by_tp, changed)

    def _query(self, state: FollowedPartition, now_ms: int) -> FetchQuery | None:
        """The fetch query of ``state`` now; None when it is not ready to fetch (a paused
        one is noted with when its pause ends)."""
        if state.phase is not Phase.FETCHING:
            return None
        if state.delayed_until_ms > now_ms:
            self._paused[state.tp] = state.delayed_until_ms
            return None
        partition = self._follower(state)
        self._dirty.discard(state.tp)
        if partition is None or state.phase is not Phase.FETCHING:
            return None
        quota = self._quota
        if quota is not None and not state.caught_up and quota.is_throttled(state.tp) and (
                quota.is_quota_exceeded()):
            state.delayed_until_ms = self._paused[state.tp] = now_ms + THROTTLE_RECHECK_MS
            return None
        return FetchQuery(state.tp, state.leader_epoch, state.fetch_offset,
                          partition.log_start_offset, self.settings.partition_max_bytes,
                          partition.topic_id)

    def on_fetch_response(self, request: FetchRequest,
                          answers: Mapping[TopicPartition, FetchAnswer], now_ms: int, *,
                          omitted_unchanged: bool = False) -> None:
        """``omitted_unchanged``: the answer of an incremental fetch session (KIP-227),
        which leaves out the partitions with nothing new; otherwise a missing answer is an
        error for that partition."""
        if omitted_unchanged:
            queries: Iterable[FetchQuery] = [
                q for q in (request.query(tp) for tp in answers) if q is not None]
        else:
            queries = request.partitions
        for query in queries:
            self._dirty.add(query.tp)  # its fetch offset, phase or pause may move
            state = self._partitions.get(query.tp)
            if state is None or state.phase is not Phase.FETCHING or (
                    state.leader_epoch != query.current_leader_epoch
                    or state.fetch_offset != query.fetch_offset):
                continue  # changed since the request was built
            partition = self._follower(state)
            if partition is None or partition.topic_id != query.topic_id:
                continue  # another topic of the same name replaced it meanwhile
            answer = answers.get(query.tp)
            if answer is None:
                self._on_error(state, -1, "Fetch", now_ms)
            elif answer.error_code == NONE:
                self._on_data(state, partition, answer, now_ms)
            elif answer.error_code == OFFSET_OUT_OF_RANGE:
                try:
                    self._on_out_of_range(state, partition, answer)
                except OSError as exc:
                    self._storage_failed(state, exc, "truncating", now_ms)
            else:
                self._on_error(state, answer.error_code, "Fetch", now_ms)

    def _on_data(self, state: FollowedPartition, partition: Partition, answer: FetchAnswer,
                 now_ms: int) -> None:
        try:
            if len(answer.records):
                if self._quota is not None and self._quota.is_throttled(state.tp):
                    self._quota.record(len(answer.records))
                self._logs.append_fetched(partition, memoryview(answer.records))
            partition.update_follower_high_watermark(answer.high_watermark)
            if answer.log_start_offset >= 0:
                partition.update_follower_log_start(answer.log_start_offset)
        except OSError as exc:  # the log start's move (appends raise KafkaStorageError)
            self._storage_failed(state, exc, "moving the log start of", now_ms)
        except KafkaError as exc:
            log.warning("%s: cannot append what leader %d sent at offset %d: %s", state.tp,
                        self.source_id, state.fetch_offset, exc)
            self._pause(state, now_ms)
        state.fetch_offset = partition.log_end_offset
        state.caught_up = state.fetch_offset >= answer.high_watermark

    def _on_out_of_range(self, state: FollowedPartition, partition: Partition,
                         answer: FetchAnswer) -> None:
        leader_start = answer.log_start_offset
        if leader_start > state.fetch_offset:
            log.info("%s: log end %d is below leader %d's log start %d; starting over there",
                     state.tp, state.fetch_offset, self.source_id, leader_start)
            partition.truncate_fully_and_start_at(leader_start)
            state.fetch_offset = partition.log_end_offset
            return
        if partition.log.latest_epoch == UNDEFINED_EPOCH and answer.high_watermark >= 0:
            # No epochs to compare: the leader's high watermark is all it tells us.
            partition.truncate_to(min(answer.high_watermark, state.fetch_offset))
            state.fetch_offset = partition.log_end_offset
            return
        log.info("%s: log end %d is past leader %d's log end; truncating by leader epoch",
                 state.tp, state.fetch_offset, self.source_id)
        self._set_phase(state, Phase.TRUNCATING)

    def _storage_failed(self, state: FollowedPartition, exc: OSError, doing: str,
                        now_ms: int) -> None:
        self._logs.storage_failed(exc, f"{doing} {state.tp}")
        self._pause(state, now_ms)

    def _on_error(self, state: FollowedPartition, code: int, api: str, now_ms: int) -> None:
        what = error_name(code) if code > 0 else "no answer"
        log.debug("%s: %s from leader %d failed (%s); retrying in %d ms", state.tp, api,
                  self.source_id, what, self.settings.backoff_ms)
        self._pause(state, now_ms)

    def on_request_failed(self, queries: Iterable[EpochQuery | FetchQuery], now_ms: int
                          ) -> None:
        """A request got no answer at all: pause its partitions."""
        for query in queries:
            state = self._partitions.get(query.tp)
            if state is not None and state.leader_epoch == query.current_leader_epoch:
                self._pause(state, now_ms)
