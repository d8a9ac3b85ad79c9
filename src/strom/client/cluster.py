"""Bootstrap, metadata refresh, partition leaders and one connection per broker.

A :class:`Cluster` belongs to one client object (admin client, producer or fetcher) and lives on
that client's event loop. It connects to the first reachable bootstrap address, learns the
brokers from Metadata, and opens at most one :class:`~strom.client.conn.Connection` per broker
id (re-opened after a connection loss). Metadata snapshots are immutable
(:class:`~strom.client.metadata.ClusterMetadata`) and replaced on refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from strom.client.conn import DEFAULT_REQUEST_TIMEOUT_S, Connection
from strom.client.metadata import BrokerNode, ClusterMetadata, from_response
from strom.client.security import ClientSecurity
from strom.common.errors import (
    KafkaError,
    LeaderNotAvailableError,
    NetworkError,
    StromError,
    UnknownTopicOrPartitionError,
    error_for,
)
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.cluster")

T = TypeVar("T")
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
RETRY_BACKOFF_S = 0.1
# How long an unknown topic is waited for (metadata may lag a CreateTopics on other brokers);
# longer waits would only delay the error for a topic that really does not exist.
UNKNOWN_TOPIC_WAIT_S = 2.0


def topic_error(code: int, topic: str) -> KafkaError:
    """The exception for a topic-level metadata error, worded for users."""
    if code == UnknownTopicOrPartitionError.code:
        return UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return error_for(code, f"topic {topic!r}")


class BootstrapError(StromError):
    """The bootstrap string is malformed."""


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"host:port[,host:port]"`` (``[v6addr]:port`` allowed) as a list of (host, port)."""
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:  # tolerate PLAINTEXT://host:port
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BootstrapError(f"invalid bootstrap server {item!r}: expected HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise BootstrapError("no bootstrap servers given")
    return out


class Cluster:
    """Connections and metadata for one client.

    Lifecycle: ``await start()`` (connects to a bootstrap broker and loads metadata), use, then
    ``await close()``. All methods must run on the loop that called ``start``.
    """

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "strom",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        allow_auto_create_topics: bool = False,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.allow_auto_create_topics = allow_auto_create_topics
        self.metadata = ClusterMetadata()
        self._bootstrap_conn: Connection | None = None
        self._conns: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Future[Connection]] = {}
        self._refreshing: asyncio.Future[ClusterMetadata] | None = None

    async def start(self) -> ClusterMetadata:
        """Connect to the first reachable bootstrap server and load metadata for all topics."""
        await self._bootstrap_connection()
        return await self.refresh(None)

    async def close(self) -> None:
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        for conn in conns:
            await conn.close()

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connections -------------------------------------------------------------------------
    def _new_connection(self, host: str, port: int, node_id: int) -> Connection:
        return Connection(host, port, node_id=node_id, client_id=self.client_id,
                          request_timeout_s=self.request_timeout_s, security=self.security)

    async def _bootstrap_connection(self) -> Connection:
        conn = self._bootstrap_conn
        if conn is not None and not conn.closed:
            return conn
        errors: list[str] = []
        for host, port in self.bootstrap:
            try:
                conn = await self._new_connection(host, port, -1).open()
            except NetworkError as exc:
                errors.append(exc.message)
                continue
            self._bootstrap_conn = conn
            return conn
        raise NetworkError("no bootstrap server reachable: " + "; ".join(errors))

    async def any_connection(self) -> Connection:
        """A live connection to some broker (an open one if any, else a bootstrap server)."""
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        for node_id in list(self.metadata.brokers):
            with contextlib.suppress(NetworkError):
                return await self.connection(node_id)
        return await self._bootstrap_connection()

    def ready_connection(self, node_id: int) -> Connection | None:
        """The open connection to broker ``node_id``, or None (without connecting or waiting)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int) -> Connection:
        """The connection to broker ``node_id``, opened on first use or after a loss."""
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            await self.refresh(None)
            broker = self.metadata.brokers.get(node_id)
            if broker is None:
                raise NetworkError(f"broker {node_id} is not in the cluster metadata")
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = future
        try:
            conn = await self._new_connection(broker.host, broker.port, node_id).open()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: concurrent waiters re-raise it themselves
            raise
        finally:
            self._connecting.pop(node_id, None)
        self._conns[node_id] = conn
        future.set_result(conn)
        return conn

    async def controller(self) -> Connection:
        """The controller's connection (any broker when the controller is unknown)."""
        controller = self.metadata.controller_id
        if controller >= 0 and controller in self.metadata.brokers:
            return await self.connection(controller)
        return await self.any_connection()

    # -- metadata ----------------------------------------------------------------------------
    async def refresh(
        self, topics: Iterable[str] | None = None, *, allow_auto_create: bool | None = None
    ) -> ClusterMetadata:
        """Fetch metadata (all topics when ``topics`` is None) and merge it into the snapshot."""
        wanted = None if topics is None else sorted(set(topics))
        auto = self.allow_auto_create_topics if allow_auto_create is None else allow_auto_create
        conn = await self.any_connection()
        fields: dict[str, Any] = {
            "topics": None if wanted is None else [{"name": name} for name in wanted],
        }
        version = conn.version(ApiKey.METADATA)
        if version >= 4:
            fields["allow_auto_topic_creation"] = auto
        try:
            response = await conn.request(ApiKey.METADATA, fields)
        except NetworkError:
            await conn.close()
            conn = await self.any_connection()
            response = await conn.request(ApiKey.METADATA, fields)
        if getattr(response, "error_code", 0):
            raise error_for(response.error_code, "Metadata request failed")
        fresh = from_response(response)
        self.metadata = self.metadata.merged(fresh, replace_topics=wanted is None)
        return self.metadata

    async def topic_partitions(self, topic: str, *, timeout_s: float | None = None) -> int:
        """The partition count of ``topic``, waiting while its metadata is not ready yet.

        Raises UnknownTopicOrPartitionError (or the topic's error) when it does not appear
        within ``timeout_s``.
        """
        started = time.monotonic()
        deadline = started + (self.request_timeout_s if timeout_s is None else timeout_s)
        while True:
            count = self.metadata.partition_count(topic)
            if count:
                return count
            meta = await self.refresh([topic])
            count = meta.partition_count(topic)
            if count:
                return count
            topic_meta = meta.topics.get(topic)
            code = topic_meta.error_code if topic_meta else UnknownTopicOrPartitionError.code
            error = topic_error(code or LeaderNotAvailableError.code, topic)
            if _give_up(error, started, deadline):
                raise error
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def leader_for(self, tp: TopicPartition, *, timeout_s: float | None = None) -> int:
        """The leader's node id of ``tp``, refreshing metadata while it is unknown."""
        started = time.monotonic()
        deadline = started + (self.request_timeout_s if timeout_s is None else timeout_s)
        while True:
            leader = self.metadata.leader(tp)
            if leader is not None:
                return leader
            meta = await self.refresh([tp.topic])
            leader = meta.leader(tp)
            if leader is not None:
                return leader
            topic = meta.topics.get(tp.topic)
            if topic is None or topic.error_code:
                code = topic.error_code if topic else UnknownTopicOrPartitionError.code
                error = topic_error(code, tp.topic)
            elif tp.partition not in topic.partitions:
                raise UnknownTopicOrPartitionError(
                    f"partition {tp.partition} of topic {tp.topic!r} does not exist "
                    f"(it has {len(topic.partitions)})"
                )
            else:
                error = LeaderNotAvailableError(f"no leader for {tp}")
            if _give_up(error, started, deadline):
                raise error
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def leader_connection(self, tp: TopicPartition) -> Connection:
        return await self.connection(await self.leader_for(tp))

    async def per_leader(
        self,
        partitions: Iterable[TopicPartition],
        call: Callable[[Connection, list[TopicPartition]], Awaitable[dict[TopicPartition, Any]]],
        *,
        timeout_s: float | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """Run ``call`` once per leader with the partitions it leads, concurrently.

        ``call`` returns, per partition, a value or a :class:`KafkaError`. Partitions with a
        retriable error (or whose connection failed) are looked up again and retried until
        ``timeout_s``; the first non-retriable error is raised — or, with ``partial``, kept
        as that partition's value (as is a partition whose leader cannot be found), so one
        failing partition does not hide the others' results.
        """
        deadline = time.monotonic() + (self.request_timeout_s if timeout_s is None else timeout_s)
        remaining = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, Any] = {}
        backoff = RETRY_BACKOFF_S
        while remaining:
            groups: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in remaining:
                left = max(deadline - time.monotonic(), 0.0)
                try:
                    groups[await self.leader_for(tp, timeout_s=left)].append(tp)
                except KafkaError as exc:
                    if not partial:
                        raise
                    results[tp] = exc
            outcomes = await asyncio.gather(
                *(self._call_leader(node, tps, call) for node, tps in groups.items())
            )
            retry: list[TopicPartition] = []
            for outcome in outcomes:
                for tp, value in outcome.items():
                    if not isinstance(value, KafkaError):
                        results[tp] = value
                    elif value.retriable and time.monotonic() + backoff < deadline:
                        retry.append(tp)
                        self.invalidate(tp)
                    elif partial:
                        results[tp] = value
                    else:
                        raise value
            remaining = retry
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        return results

    async def _call_leader(
        self,
        node: int,
        tps: list[TopicPartition],
        call: Callable[[Connection, list[TopicPartition]], Awaitable[dict[TopicPartition, Any]]],
    ) -> dict[TopicPartition, Any]:
        try:
            return await call(await self.connection(node), tps)
        except NetworkError as exc:
            return dict.fromkeys(tps, exc)

    def forget_topics(self, names: Iterable[str]) -> None:
        """Drop topics from the snapshot (after deleting them)."""
        gone = set(names)
        meta = self.metadata
        topics = {k: v for k, v in meta.topics.items() if k not in gone}
        self.metadata = ClusterMetadata(meta.brokers, topics, meta.controller_id, meta.cluster_id)

    def apply_leader_hint(self, tp: TopicPartition, leader: int, leader_epoch: int,
                          endpoints: Iterable[BrokerNode] = ()) -> bool:
        """Take a KIP-951 current-leader hint into the snapshot
        (:meth:`ClusterMetadata.with_leader_hint`); False when it could not be used."""
        hinted = self.metadata.with_leader_hint(tp, leader, leader_epoch, endpoints)
        if hinted is None:
            return False
        self.metadata = hinted
        return True

    def invalidate(self, tp: TopicPartition | None = None) -> None:
        """Forget what is known about ``tp``'s topic (all topics if None) so the next lookup
        refreshes it; called after NOT_LEADER_OR_FOLLOWER and similar errors."""
        self.forget_topics(self.metadata.topics if tp is None else [tp.topic])


def _give_up(error: KafkaError, started: float, deadline: float) -> bool:
    """Whether a metadata wait should end with ``error`` now."""
    now = time.monotonic()
    if not error.retriable or now >= deadline:
        return True
    return (isinstance(error, UnknownTopicOrPartitionError)
            and now - started >= UNKNOWN_TOPIC_WAIT_S)


async def retrying(
    operation: Callable[[], Awaitable[T]],
    *,
    timeout_s: float,
    on_retry: Callable[[KafkaError], Awaitable[None]] | None = None,
) -> T:
    """Run ``operation`` until it succeeds, a non-retriable error occurs, or time runs out."""
    deadline = time.monotonic() + timeout_s
    backoff = RETRY_BACKOFF_S
    while True:
        try:
            return await operation()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() + backoff >= deadline:
                raise
            log.debug("retrying after %s", exc)
            if on_retry is not None:
                await on_retry(exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
