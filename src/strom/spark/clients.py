"""Clients shared by the Python workers of one executor process, one per bootstrap string.

Spark reuses Python workers, so a lazily created module-level client outlives a task and is
reused by the next one. :class:`WorkerClient` owns a :class:`~strom.client.sync.LoopThread`
and a :class:`~strom.client.cluster.Cluster` living on it; the loop thread is a daemon and is
never stopped explicitly (Spark never tells a worker it is done).
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from strom.client.admin_types import OffsetAndMetadata
from strom.client.cluster import Cluster
from strom.client.group_admin import GroupAdmin
from strom.client.sync import LoopThread, SyncProducer
from strom.common.types import TopicPartition
from strom.spark.client_config import ClientConfig

T = TypeVar("T")

_lock = threading.Lock()
_clusters: dict[str, WorkerClient] = {}
_producers: dict[tuple[str, ClientConfig], SyncProducer] = {}


class WorkerClient:
    """A started :class:`Cluster` on a private loop thread; :meth:`run` executes coroutines.
    ``groups`` (used on the loop thread only) reads committed offsets."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = LoopThread("strom-spark")
        self.cluster = Cluster(bootstrap, client_id="strom-spark")
        self.groups = GroupAdmin(self.cluster, self.cluster.request_timeout_s)
        try:
            self.run(self.cluster.start())
        except BaseException:
            self.loop.stop()
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return self.loop.run(coro, timeout_s)


def cluster_client(bootstrap: str) -> WorkerClient:
    """The shared :class:`WorkerClient` for ``bootstrap`` (created on first use)."""
    with _lock:
        client = _clusters.get(bootstrap)
        if client is None:
            client = _clusters[bootstrap] = WorkerClient(bootstrap)
        return client


def producer(bootstrap: str, config: ClientConfig) -> SyncProducer:
    """The shared :class:`SyncProducer` for ``bootstrap`` and these settings (idempotent by
    default), created on first use."""
    with _lock:
        shared = _producers.get((bootstrap, config))
        if shared is None:
            shared = _producers[(bootstrap, config)] = SyncProducer(
                bootstrap, **config.producer_kwargs())
        return shared


def committed_offset(bootstrap: str, group_id: str,
                     tp: TopicPartition) -> OffsetAndMetadata | None:
    """``group_id``'s committed offset of ``tp`` (None: nothing committed), read with
    ``require_stable`` so a commit still inside an open transaction is not taken for absent."""
    client = cluster_client(bootstrap)
    found = client.run(client.groups.list_offsets(group_id, [tp], require_stable=True))
    return found.get(tp)
