"""Transaction markers over the wire: Kafka's ``TransactionMarkerChannelManager``.

Once a transaction is decided (PrepareCommit / PrepareAbort committed), its commit or abort
marker must reach every partition it wrote to. :class:`NetworkMarkerSender` sends one
WriteTxnMarkers request per partition leader — over a real connection to that broker's
listener even when the leader is this broker, the request path a multi-broker cluster uses —
and retries until every partition has answered:

* NONE: written. UNSUPPORTED_FOR_MESSAGE_FORMAT: the partition cannot take markers (done, as
  Kafka). A partition whose topic no longer exists is dropped (done).
* NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, COORDINATOR_* and network failures: retried after
  ``retry_backoff_ms`` against the partition's current leader.
* INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: a newer coordinator or producer
  epoch owns the transaction; this job is dropped without completing (the newer owner
  completes it). Any other error is logged and retried (Kafka treats them as bugs).

When every partition is done the job's ``on_done`` runs (on the event loop), and the
coordinator writes CompleteCommit / CompleteAbort. Connections are kept per broker and
reopened after a failure; they go to the inter-broker listener with its TLS / SASL settings
(``security``: :mod:`strom.broker.security.inter_broker`), and a connection that cannot be
opened or authenticated is logged as a WARNING (rate-limited). Owned by the broker's
event-loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from strom.client.security import ClientSecurity
from strom.common.errors import KafkaError, error_class
from strom.common.rate_limited_log import RateLimitedLog
from strom.common.types import TopicPartition
from strom.coordinator.txn.peers import Leader, PeerConnections
from strom.coordinator.txn.shard import MarkerJob
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.coordinator.txn.markers")
_connect_failures = RateLimitedLog(log, logging.WARNING)

WRITE_TXN_MARKERS_VERSION = 1


def _codes(*names: str) -> frozenset[int]:
    return frozenset(error_class(name).code for name in names)


_DONE = _codes("UNSUPPORTED_FOR_MESSAGE_FORMAT") | {0}
_FENCED = _codes("INVALID_PRODUCER_EPOCH", "TRANSACTION_COORDINATOR_FENCED")
_RETRIABLE = _codes("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                    "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                    "REQUEST_TIMED_OUT", "KAFKA_STORAGE_ERROR", "COORDINATOR_NOT_AVAILABLE",
                    "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR")


class NetworkMarkerSender:
    """Sends markers to partition leaders (see the module docstring)."""

    def __init__(self, leader_of: Callable[[TopicPartition], Leader | None],
                 exists: Callable[[TopicPartition], bool], *, retry_backoff_ms: int = 100,
                 request_timeout_s: float = 30.0, security: ClientSecurity | None = None
                 ) -> None:
        self._leader_of = leader_of
        self._exists = exists
        self._backoff_s = retry_backoff_ms / 1000
        self._timeout_s = request_timeout_s
        self._peers = PeerConnections("strom-txn-markers", request_timeout_s, security)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def send(self, job: MarkerJob, on_done: Callable[[], None]) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._run(job, on_done),
                                                      name=f"txn-markers-{job.producer_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._peers.close()

    # -- one job -----------------------------------------------------------------------------
    async def _run(self, job: MarkerJob, on_done: Callable[[], None]) -> None:
        remaining = set(job.partitions)
        warned: set[int] = set()
        while remaining and not self._closed:
            gone = {tp for tp in remaining if not self._exists(tp)}
            if gone:
                log.info("markers of producer %d: dropping deleted partitions %s",
                         job.producer_id, sorted(gone))
                remaining -= gone
            by_leader: dict[Leader, set[TopicPartition]] = {}
            for tp in remaining:
                leader = self._leader_of(tp)
                if leader is not None:
                    by_leader.setdefault(leader, set()).add(tp)
            results = await asyncio.gather(*(self._send_to(leader, job, tps)
                                              for leader, tps in by_leader.items()))
            for errors in results:
                for tp, code in errors.items():
                    if code is None:
                        continue  # no answer (connection failed: logged as such); retried
                    if code in _DONE:
                        remaining.discard(tp)
                    elif code in _FENCED:
                        log.info("markers of %r (producer %d epoch %d) fenced at %s (error "
                                 "%d): a newer owner completes them", job.transactional_id,
                                 job.producer_id, job.producer_epoch, tp, code)
                        return
                    elif code not in _RETRIABLE and code not in warned:
                        warned.add(code)
                        log.error("marker for %s of producer %d failed with error %d; "
                                  "retrying", tp, job.producer_id, code)
            if remaining:
                await asyncio.sleep(self._backoff_s)
        if not remaining and not self._closed:
            on_done()

    async def _send_to(self, leader: Leader, job: MarkerJob, tps: set[TopicPartition]
                       ) -> dict[TopicPartition, int | None]:
        """Per-partition error codes from one WriteTxnMarkers request (None: no answer)."""
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        fields = {"markers": [{
            "producer_id": job.producer_id, "producer_epoch": job.producer_epoch,
            "transaction_result": job.commit, "coordinator_epoch": job.coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        }]}
        try:
            conn = await self._peers.get(leader)
        except (KafkaError, OSError) as exc:
            # Refused TLS or SASL (or no listener) is a configuration problem: say so.
            _connect_failures.log("transaction markers: cannot connect to node %d at %s:%d: "
                                  "%s", leader.node_id, leader.host, leader.port, exc)
            return dict.fromkeys(tps, None)
        try:
            response = await conn.request(ApiKey.WRITE_TXN_MARKERS, fields,
                                          version=WRITE_TXN_MARKERS_VERSION,
                                          timeout_s=self._timeout_s)
        except (KafkaError, OSError) as exc:
            log.debug("WriteTxnMarkers to node %d failed: %s", leader.node_id, exc)
            await self._peers.drop(leader.node_id)
            return dict.fromkeys(tps, None)
        errors: dict[TopicPartition, int | None] = dict.fromkeys(tps, None)
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if tp in errors:
                        errors[tp] = p.error_code
        return errors
