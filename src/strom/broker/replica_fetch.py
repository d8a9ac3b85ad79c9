"""The follower fetchers' transport: each sans-IO
:class:`~strom.replication.fetcher.ReplicaFetcher` driven over a real connection.

:class:`ReplicaFetcherManager` is the replica manager's ``fetching``: after every metadata
image it is told which partitions this broker follows (leader id and leader epoch each) and
spreads them over ``num.replica.fetchers`` fetchers per leader (a partition always goes to
the same one: CRC-32 of the topic name plus the partition number, modulo the count). Each
fetcher runs as one task with one connection to its leader's inter-broker listener (TLS / SASL
from :mod:`strom.broker.security.inter_broker`, as transaction markers connect): it sends
OffsetForLeaderEpoch (v4) for the partitions that must truncate, then Fetch (v13, by topic
id — a leader holding another topic of the same name refuses it —, sessionless; hand-written
codec :mod:`strom.protocol.follower_fetch`, the records appended as slices of the response)
for the others, one request at a time, feeding every
answer back to the state machine; with nothing ready it sleeps until a paused partition is
due or partitions are added. A connection that fails is dropped (reopened on the next
request) and the request's partitions pause for ``replica.fetch.backoff.ms``. A fetcher left
without partitions ends its task and closes its connection. A stopped fetcher sends nothing
more: its task is cancelled and its loop also checks a stop flag (a cancellation can be lost when it
races a response, and a broker shutting down must neither keep fetching — the leader would put
it back in the ISR — nor wait for it).

Lifecycle: created by the broker server; :meth:`ReplicaFetcherManager.update_followed` on
the event loop after role changes (only the partitions whose leader or epoch changed: a
pass adopting a dozen partitions of thousands costs a dozen);
:meth:`ReplicaFetcherManager.close` at shutdown, before the replica manager shuts down.
Everything here belongs to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from strom.broker.follower_session import (
    SESSION_ERRORS,
    FollowerFetchSession,
    topic_id_bytes,
)
from strom.client.conn import Connection
from strom.client.security import ClientSecurity
from strom.common.clock import Clock
from strom.common.config import BrokerConfig
from strom.common.errors import KafkaError
from strom.common.rate_limited_log import RateLimitedLog
from strom.common.types import TopicPartition
from strom.metadata.store import MetadataStore
from strom.protocol import api
from strom.protocol.follower_fetch import (
    FOLLOWER_FETCH_VERSION,
    decode_follower_fetch_response,
    encode_follower_fetch_request,
)
from strom.protocol.versions import ApiKey
from strom.replication.fetcher import (
    EpochAnswer,
    EpochRequest,
    FetchAnswer,
    FetcherSettings,
    FetchRequest,
    FollowerLogs,
    ReplicaFetcher,
)
from strom.replication.isr_writer import StoreIsrWriter
from strom.replication.quota import ReplicaQuota
from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger("strom.broker.replica_fetch")
_connect_failures = RateLimitedLog(log, logging.WARNING)

OFFSET_FOR_LEADER_EPOCH_VERSION = 4
IDLE_POLL_S = 0.01  # the shortest sleep of an idle fetcher

AddressOf = Callable[[int], tuple[str, int] | None]


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a leader's fetchers follows ``tp`` (stable across restarts)."""
    return (zlib.crc32(tp.topic.encode()) * 31 + tp.partition) % num_fetchers


def fetcher_settings(config: BrokerConfig, node_id: int) -> FetcherSettings:
    return FetcherSettings(
        node_id, max_wait_ms=int(config.get("replica.fetch.wait.max.ms")),
        min_bytes=int(config.get("replica.fetch.min.bytes")),
        response_max_bytes=int(config.get("replica.fetch.response.max.bytes")),
        partition_max_bytes=int(config.get("replica.fetch.max.bytes")),
        backoff_ms=int(config.get("replica.fetch.backoff.ms")))


class Replication:
    """What a broker runs to replicate: the follower fetchers and the ISR writer, attached
    to the replica manager (its ``fetching`` and ``isr_writer``), and the periodic ISR
    shrink check (every half ``replica.lag.time.max.ms``, as Kafka)."""

    def __init__(self, config: BrokerConfig, node_id: int, replicas: ReplicaManager,
                 store: MetadataStore, address_of: AddressOf, clock: Clock,
                 security: ClientSecurity | None, *, quota: ReplicaQuota | None = None
                 ) -> None:
        self._replicas = replicas
        self.max_lag_ms = int(config.get("replica.lag.time.max.ms"))
        self.shrink_interval_s = max(0.01, self.max_lag_ms / 2000)
        self.fetchers = ReplicaFetcherManager(
            fetcher_settings(config, node_id), replicas, address_of, clock,
            num_fetchers=int(config.get("num.replica.fetchers")), security=security,
            quota=quota)
        self.isr_writer = StoreIsrWriter(store, node_id, replicas.isr_change_failed,
                                         replicas.isr_change_written)
        replicas.fetching = self.fetchers
        replicas.isr_writer = self.isr_writer

    def shrink_isrs(self) -> None:
        self._replicas.shrink_isrs(self.max_lag_ms)

    async def close(self) -> None:
        """Stop fetching and writing ISR changes (before the replica manager shuts down)."""
        self._replicas.fetching = None
        self._replicas.isr_writer = None
        await self.fetchers.close()
        await self.isr_writer.close()


class ReplicaFetcherManager:
    """The replica manager's ``fetching`` over the network; see the module docstring."""

    def __init__(self, settings: FetcherSettings, logs: FollowerLogs, address_of: AddressOf,
                 clock: Clock, *, num_fetchers: int = 1,
                 security: ClientSecurity | None = None,
                 request_timeout_s: float = 30.0, quota: ReplicaQuota | None = None) -> None:
        self._settings = settings
        self._logs = logs
        self._address_of = address_of
        self._clock = clock
        self._num_fetchers = num_fetchers
        self._security = security
        self._timeout_s = request_timeout_s
        self._quota = quota  # the follower's replication throttle
        self._runners: dict[tuple[int, int], _FetcherRunner] = {}
        #: The runner (leader id, fetcher id) each followed partition is in.
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self._closed = False

    def update_followed(self, changes: Mapping[TopicPartition, tuple[int, int] | None]
                        ) -> None:
        """Follow each partition of ``changes`` from its leader at its epoch from now on, or
        no longer (None): it moves between fetchers when its leader changed, a fetcher is
        made for a leader followed anew and stopped once it has no partitions left."""
        if self._closed:
            return
        removed: dict[tuple[int, int], list[TopicPartition]] = {}
        added: dict[tuple[int, int], dict[TopicPartition, int]] = {}
        for tp, target in changes.items():
            key = None if target is None else (target[0], fetcher_id(tp, self._num_fetchers))
            current = self._where.get(tp)
            if current is not None and current != key:
                removed.setdefault(current, []).append(tp)
                del self._where[tp]
            if key is not None and target is not None:
                added.setdefault(key, {})[tp] = target[1]
                self._where[tp] = key
        for key, tps in removed.items():
            runner = self._runners[key]
            runner.fetcher.remove_partitions(tps)
            if not len(runner.fetcher) and key not in added:
                del self._runners[key]
                runner.stop()
        for key, epochs in added.items():
            found = self._runners.get(key)
            if found is None:
                fetcher = ReplicaFetcher(key[0], key[1], self._settings, self._logs,
                                         quota=self._quota)
                found = self._runners[key] = _FetcherRunner(
                    fetcher, self._address_of, self._clock, self._security, self._timeout_s)
            found.fetcher.add_partitions(epochs)
            found.wake()

    def fetcher_of(self, tp: TopicPartition) -> ReplicaFetcher | None:
        for runner in self._runners.values():
            if runner.fetcher.state(tp) is not None:
                return runner.fetcher
        return None

    async def close(self) -> None:
        self._closed = True
        runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            runner.stop()
        for runner in runners:
            await runner.stopped()


class _FetcherRunner:
    """One fetcher's task and connection."""

    def __init__(self, fetcher: ReplicaFetcher, address_of: AddressOf, clock: Clock,
                 security: ClientSecurity | None, timeout_s: float) -> None:
        self.fetcher = fetcher
        self._address_of = address_of
        self._clock = clock
        self._security = security
        self._timeout_s = timeout_s
        self._conn: Connection | None = None
        self._session = FollowerFetchSession()
        #: The topic names of the ids the fetcher's requests name (answers come by id).
        self._names: dict[bytes, str] = {}
        self._wakeup = asyncio.Event()
        #: set by stop(): the loop ends at its next turn even if the cancellation was lost
        #: (Python 3.11's ``asyncio.wait_for`` returns a result that raced the cancel).
        self._stopping = False
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{fetcher.source_id}-{fetcher.fetcher_id}")

    def wake(self) -> None:
        self._wakeup.set()

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        fetcher = self.fetcher
        try:
            while not self._stopping:
                epochs = fetcher.epoch_request(self._clock.now_ms())
                if epochs is not None:
                    await self._send_epochs(epochs)
                request = fetcher.fetch_request(self._clock.now_ms())
                if request is not None:
                    await self._send_fetch(request)
                elif epochs is None:
                    await self._idle()
        except Exception:
            # A bug: the state machine keeps every partition's error to that partition.
            # Say so here, since stopped() swallows what ended the task.
            log.exception("replica fetcher %d for leader %d stopped", fetcher.fetcher_id,
                          fetcher.source_id)
            raise
        finally:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def _idle(self) -> None:
        now = self._clock.now_ms()
        due = self.fetcher.next_wakeup_ms(now)
        self._wakeup.clear()
        timeout = None if due is None else max(IDLE_POLL_S, (due - now) / 1000)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()

    async def _connection(self) -> Connection | None:
        conn = self._conn
        source = self.fetcher.source_id
        address = self._address_of(source)
        if conn is not None and not conn.closed and address == (conn.host, conn.port):
            return conn
        if conn is not None:
            await conn.close()
            self._conn = None
        self._session.reset()  # a new leader (or its restart) knows nothing of the old one
        if address is None:
            return None
        conn = Connection(address[0], address[1], node_id=source,
                          client_id=f"strom-replica-fetcher-{self.fetcher.fetcher_id}",
                          request_timeout_s=self._timeout_s, security=self._security)
        try:
            await conn.open()
        except (KafkaError, OSError) as exc:
            _connect_failures.log("replica fetcher: cannot connect to leader %d at %s:%d: %s",
                                  source, address[0], address[1], exc)
            await conn.close()
            return None
        self._conn = conn
        return conn

    async def _call(self, api_key: ApiKey, version: int, fields: dict[str, Any],
                    timeout_s: float) -> Any:
        """The decoded response, or None (connection dropped) when there is none."""
        body = await self._send(api_key, version, api.request(api_key, version, fields),
                                timeout_s)
        return None if body is None else api.decode_response(api_key, version, body)

    async def _send(self, api_key: ApiKey, version: int, body: bytes, timeout_s: float
                    ) -> memoryview | None:
        """The response body, or None (connection dropped) when there is none."""
        conn = await self._connection()
        if conn is None:
            return None
        try:
            return await conn.send(api_key, version, body, timeout_s=timeout_s)
        except (KafkaError, OSError) as exc:
            log.debug("%s to leader %d failed: %s", api_key.name, self.fetcher.source_id, exc)
            self._conn = None
            await conn.close()
            return None

    async def _send_epochs(self, request: EpochRequest) -> None:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for q in request.partitions:
            by_topic.setdefault(q.tp.topic, []).append({
                "partition": q.tp.partition, "current_leader_epoch": q.current_leader_epoch,
                "leader_epoch": q.leader_epoch})
        response = await self._call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION,
            {"replica_id": request.replica_id,
             "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]},
            self._timeout_s)
        if response is None:
            self.fetcher.on_request_failed(request.partitions, self._clock.now_ms())
            await asyncio.sleep(self.fetcher.settings.backoff_ms / 1000)
            return
        answers = {TopicPartition(t.topic, p.partition): EpochAnswer(
            p.error_code, p.leader_epoch, p.end_offset)
            for t in response.topics for p in t.partitions}
        self.fetcher.on_epoch_response(request, answers, self._clock.now_ms())

    async def _send_fetch(self, request: FetchRequest) -> None:
        if request.changed is None:  # built from every partition: the names again
            self._names = {topic_id_bytes(q): q.tp.topic for q in request.partitions}
        else:
            for q in request.changed.values():
                if q is not None:
                    self._names[topic_id_bytes(q)] = q.tp.topic
        session = self._session
        incremental = session.incremental
        body = await self._send(ApiKey.FETCH, FOLLOWER_FETCH_VERSION,
                                encode_follower_fetch_request(session.build(request)),
                                self._timeout_s + request.max_wait_ms / 1000)
        response = None
        if body is not None:
            try:
                response = decode_follower_fetch_response(body)
            except KafkaError as exc:
                log.warning("malformed Fetch response from leader %d: %s",
                            self.fetcher.source_id, exc)
        if response is not None and response.error_code in SESSION_ERRORS:
            session.reset()  # the next request is a full one, at once
            return
        if response is None or response.error_code:
            session.reset()
            self.fetcher.on_request_failed(request.partitions, self._clock.now_ms())
            await asyncio.sleep(self.fetcher.settings.backoff_ms / 1000)
            return
        session.answered(response.session_id)
        names = self._names
        answers = {TopicPartition(names[p.topic_id], p.partition): FetchAnswer(
            p.error_code, p.high_watermark, p.log_start_offset, p.records)
            for p in response.partitions if p.topic_id in names}
        self.fetcher.on_fetch_response(request, answers, self._clock.now_ms(),
                                       omitted_unchanged=incremental)
