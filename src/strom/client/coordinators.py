"""Coordinator lookup (FindCoordinator) for groups and transactional ids, cached per key.

A :class:`CoordinatorFinder` serves one key type — 0 for consumer groups, 1 for
transactional ids — and is owned by one client object (the admin's group and transaction
calls, a transactional producer). FindCoordinator v4+ looks up many keys in one request
(``coordinator_keys``); older versions take one ``key`` per request (v1+ with ``key_type``;
v0 knows only groups). Retriable answers (COORDINATOR_NOT_AVAILABLE while the coordinator's
partition of ``__consumer_offsets`` / ``__transaction_state`` loads, lost connections) are
retried with backoff until the finder's timeout; other errors are raised, worded by the
finder's ``describe_error``.

:meth:`CoordinatorFinder.on_coordinator` runs a call against a key's coordinator, dropping
the cached node and looking it up again after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a
lost connection, and retrying COORDINATOR_LOAD_IN_PROGRESS on the same node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from strom.client.cluster import RETRY_BACKOFF_S, Cluster
from strom.client.conn import Connection
from strom.client.metadata import BrokerNode
from strom.common.errors import (
    KafkaError,
    NetworkError,
    UnsupportedVersionError,
    error_class,
    error_for,
)
from strom.protocol.versions import ApiKey

T = TypeVar("T")

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

NotCoordinatorError = error_class("NOT_COORDINATOR")
CoordinatorNotAvailableError = error_class("COORDINATOR_NOT_AVAILABLE")
CoordinatorLoadInProgressError = error_class("COORDINATOR_LOAD_IN_PROGRESS")

#: Errors after which a cached coordinator is stale.
MOVED_CODES = frozenset({NotCoordinatorError.code, CoordinatorNotAvailableError.code})

#: Builds the exception for an error code about one key: (code, key, broker message).
ErrorWording = Callable[[int, str, "str | None"], KafkaError]

_KIND = {GROUP_KEY_TYPE: "consumer groups", TRANSACTION_KEY_TYPE: "transactions"}


def _plain_error(code: int, key: str, message: str | None) -> KafkaError:
    return error_for(code, f"{key!r}" + (f" ({message})" if message else ""))


class CoordinatorFinder:
    """Coordinator lookup and routing for one key type (see the module doc).

    Lifecycle: created by its owner with the owner's :class:`Cluster`; holds only a cache of
    key → coordinator node. Runs on the cluster's event loop; not thread-safe.
    """

    def __init__(self, cluster: Cluster, key_type: int, timeout_s: float,
                 describe_error: ErrorWording = _plain_error) -> None:
        self.cluster = cluster
        self.key_type = key_type
        self.timeout_s = timeout_s
        self.describe_error = describe_error
        self._cache: dict[str, BrokerNode] = {}

    def forget(self, key: str) -> None:
        """Drop ``key``'s cached coordinator; the next call looks it up again."""
        self._cache.pop(key, None)

    async def find_many(self, keys: Iterable[str], *, use_cache: bool = True,
                        timeout_s: float | None = None) -> dict[str, BrokerNode]:
        """The coordinator of each key, in the order asked (see the module doc for retries)."""
        wanted = list(dict.fromkeys(keys))
        found = {k: self._cache[k] for k in wanted if use_cache and k in self._cache}
        pending = [k for k in wanted if k not in found]
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        backoff = RETRY_BACKOFF_S
        while pending:
            try:
                conn = await self.cluster.any_connection()
                answers = await self._lookup(conn, pending)
            except NetworkError as exc:
                answers = dict.fromkeys(pending, exc)
            retry: list[str] = []
            for key in pending:
                answer = answers.get(key) or CoordinatorNotAvailableError(
                    f"FindCoordinator answered nothing for {key!r}")
                if isinstance(answer, BrokerNode):
                    found[key] = self._cache[key] = answer
                elif answer.retriable and time.monotonic() + backoff < deadline:
                    retry.append(key)
                else:
                    raise answer
            pending = retry
            if pending:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        return {k: found[k] for k in wanted}

    async def find(self, key: str, *, timeout_s: float | None = None) -> BrokerNode:
        """The coordinator of one key (see :meth:`find_many`)."""
        return (await self.find_many([key], timeout_s=timeout_s))[key]

    async def _lookup(self, conn: Connection, keys: list[str]
                      ) -> dict[str, BrokerNode | KafkaError]:
        if ApiKey.FIND_COORDINATOR not in conn.broker_versions:
            raise UnsupportedVersionError(
                f"broker {conn.address} does not support {_KIND.get(self.key_type, 'this')} "
                "(it does not offer FindCoordinator)")
        version = conn.version(ApiKey.FIND_COORDINATOR,
                               minimum=1 if self.key_type != GROUP_KEY_TYPE else None)
        out: dict[str, BrokerNode | KafkaError] = {}
        if version >= 4:
            response = await conn.request(ApiKey.FIND_COORDINATOR, {
                "key_type": self.key_type, "coordinator_keys": keys})
            for c in response.coordinators:
                out[c.key] = (self.describe_error(c.error_code, c.key, c.error_message)
                              if c.error_code else BrokerNode(c.node_id, c.host, c.port))
            return out

        async def one(key: str) -> BrokerNode | KafkaError:
            fields: dict[str, Any] = {"key": key}
            if version >= 1:
                fields["key_type"] = self.key_type
            r = await conn.request(ApiKey.FIND_COORDINATOR, fields, version=version)
            if r.error_code:
                return self.describe_error(r.error_code, key, getattr(r, "error_message", None))
            return BrokerNode(r.node_id, r.host, r.port)

        answers = await asyncio.gather(*(one(k) for k in keys))
        return dict(zip(keys, answers, strict=True))

    async def connect(self, node: BrokerNode) -> Connection:
        """A connection to a coordinator (refreshing metadata if the node is new to us)."""
        return await self.cluster.connection(node.node_id)

    async def on_coordinator(
        self, key: str, call: Callable[[Connection, BrokerNode], Awaitable[T]]
    ) -> T:
        """Run ``call`` against ``key``'s coordinator. ``call`` raises the key-level
        :class:`KafkaError`; coordinator errors and lost connections are retried."""
        deadline = time.monotonic() + self.timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                node = await self.find(key)
                return await call(await self.connect(node), node)
            except KafkaError as exc:
                if exc.code in MOVED_CODES or isinstance(exc, NetworkError):
                    self.forget(key)
                if not exc.retriable or time.monotonic() + backoff >= deadline:
                    raise
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
