"""``TransactionAdmin`` behind the admin client's transaction calls (KIP-664).

- ``describe_producers``: DescribeProducers v0 to each partition's leader (or to one broker
  when ``broker_id`` is given, as Kafka's ``DescribeProducersOptions.brokerId``): the active
  producers and the first offset of each one's open transaction.
- ``list_transactions``: ListTransactions (v0; v1 for a duration filter) to every broker,
  each listing the transactional ids it coordinates; filters by state name, producer id and
  (v1) minimum running time of Ongoing transactions.
- ``describe_transactions``: DescribeTransactions v0 to each transactional id's coordinator
  (FindCoordinator key type 1, :mod:`strom.client.coordinators`).
- ``abort_transaction``: as Kafka's ``Admin.abortTransaction``, a WriteTxnMarkers (v1) ABORT
  marker sent to the partition's leader for the given producer id / epoch and coordinator
  epoch — the way out of a *hanging* transaction, one whose coordinator will never write the
  marker. The broker refuses a stale producer epoch (INVALID_PRODUCER_EPOCH) or coordinator
  epoch (TRANSACTION_COORDINATOR_FENCED); WriteTxnMarkers is a cluster action, so an
  authorizing broker needs the caller to hold ClusterAction.

Errors raise the code's :class:`~strom.common.errors.KafkaError`; retriable ones (leader or
coordinator moved, coordinator loading) are retried until the request timeout.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from strom.client import wire
from strom.client.admin_types import (
    AbortTransactionSpec,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)
from strom.client.cluster import Cluster, retrying
from strom.client.conn import Connection
from strom.client.coordinators import TRANSACTION_KEY_TYPE, CoordinatorFinder
from strom.client.metadata import BrokerNode
from strom.common.errors import KafkaError, UnsupportedVersionError, error_for
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey


def _require(conn: Connection, api_key: int, minimum: int | None = None) -> int:
    """The version to use; a clear error from a broker without the API."""
    if api_key not in conn.broker_versions:
        raise UnsupportedVersionError(
            f"broker {conn.address} does not support {wire.api_name(api_key)} (KIP-664 "
            "transaction introspection)")
    return conn.version(api_key, minimum=minimum)


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        out[tp.topic].append(tp.partition)
    return out


def _producer_state(p: Any) -> ProducerState:
    start = int(p.current_txn_start_offset)
    epoch = int(p.coordinator_epoch)
    return ProducerState(int(p.producer_id), int(p.producer_epoch), int(p.last_sequence),
                         int(p.last_timestamp), None if epoch < 0 else epoch,
                         None if start < 0 else start)


class TransactionAdmin:
    """The transaction introspection calls of :class:`~strom.client.admin.AdminClient`.

    Lifecycle: owned by the admin client, sharing its :class:`Cluster`; holds only the
    transaction-coordinator cache. Runs on the cluster's event loop; not thread-safe.
    """

    def __init__(self, cluster: Cluster, request_timeout_s: float) -> None:
        self.cluster = cluster
        self.request_timeout_s = request_timeout_s
        self.finder = CoordinatorFinder(cluster, TRANSACTION_KEY_TYPE, request_timeout_s)

    # -- DescribeProducers -------------------------------------------------------------------
    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """Each partition's active producers. With ``partial`` a failed partition's error
        is its value instead of being raised."""
        wanted = list(dict.fromkeys(partitions))

        async def call(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            version = _require(conn, ApiKey.DESCRIBE_PRODUCERS)
            fields = {"topics": [{"name": t, "partition_indexes": ps}
                                 for t, ps in _by_topic(tps).items()]}
            response = await conn.request(ApiKey.DESCRIBE_PRODUCERS, fields, version=version)
            out: dict[TopicPartition, Any] = {}
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    out[tp] = (error_for(p.error_code, p.error_message or
                                         f"describing the producers of {tp} on broker "
                                         f"{conn.node_id}")
                               if p.error_code else
                               [_producer_state(s) for s in p.active_producers])
            for tp in tps:
                out.setdefault(tp, error_for(-1, f"broker {conn.node_id} did not answer "
                                                 f"for {tp}"))
            return out

        if broker_id is None:
            return await self.cluster.per_leader(wanted, call, timeout_s=self.request_timeout_s,
                                                 partial=partial)

        async def on_broker() -> dict[TopicPartition, Any]:
            answers = await call(await self.cluster.connection(broker_id), wanted)
            for answer in answers.values():
                if isinstance(answer, KafkaError) and (answer.retriable or not partial):
                    raise answer
            return answers

        return await retrying(on_broker, timeout_s=self.request_timeout_s)

    # -- ListTransactions --------------------------------------------------------------------
    async def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        """The transactional ids every broker coordinates, sorted by id: only those in
        ``states`` (names of :class:`~strom.client.admin_types.TransactionState`), of
        ``producer_ids``, or Ongoing for longer than ``duration_ms`` when given."""
        state_filter = sorted(set(states or ()))
        pid_filter = sorted(set(producer_ids or ()))
        meta = self.cluster.metadata if self.cluster.metadata.brokers else \
            await self.cluster.refresh(None)

        async def on_broker(node: int) -> list[TransactionListing]:
            async def attempt() -> list[TransactionListing]:
                conn = await self.cluster.connection(node)
                version = _require(conn, ApiKey.LIST_TRANSACTIONS,
                                   minimum=1 if duration_ms is not None else None)
                fields: dict[str, Any] = {"state_filters": state_filter,
                                          "producer_id_filters": pid_filter}
                if version >= 1:
                    fields["duration_filter"] = -1 if duration_ms is None else duration_ms
                response = await conn.request(ApiKey.LIST_TRANSACTIONS, fields,
                                              version=version)
                if response.error_code:
                    raise error_for(response.error_code, f"ListTransactions on broker {node}")
                return [TransactionListing(t.transactional_id, int(t.producer_id),
                                           t.transaction_state, node)
                        for t in response.transaction_states]

            return await retrying(attempt, timeout_s=self.request_timeout_s)

        per_broker = await asyncio.gather(*(on_broker(n) for n in sorted(meta.brokers)))
        return sorted((t for listing in per_broker for t in listing),
                      key=lambda t: (t.transactional_id, t.coordinator_id))

    # -- DescribeTransactions ----------------------------------------------------------------
    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """The state of each transactional id at its coordinator, in the order asked
        (TransactionalIdNotFound for an id the coordinator does not know)."""
        wanted = list(dict.fromkeys(transactional_ids))

        async def one(tid: str) -> TransactionDescription:
            async def call(conn: Connection, node: BrokerNode) -> TransactionDescription:
                version = _require(conn, ApiKey.DESCRIBE_TRANSACTIONS)
                response = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS,
                                              {"transactional_ids": [tid]}, version=version)
                [state] = [s for s in response.transaction_states
                           if s.transactional_id == tid] or [None]
                if state is None:
                    raise error_for(-1, f"DescribeTransactions did not answer for {tid!r}")
                if state.error_code:
                    raise error_for(state.error_code, f"transactional id {tid!r}")
                start = int(state.transaction_start_time_ms)
                return TransactionDescription(
                    node.node_id, tid, state.transaction_state, int(state.producer_id),
                    int(state.producer_epoch), int(state.transaction_timeout_ms),
                    None if start < 0 else start,
                    frozenset(TopicPartition(t.topic, p) for t in state.topics
                              for p in t.partitions))

            return await self.finder.on_coordinator(tid, call)

        answers = await asyncio.gather(*(one(tid) for tid in wanted))
        return dict(zip(wanted, answers, strict=True))

    # -- abort (WriteTxnMarkers) -------------------------------------------------------------
    async def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """Write an ABORT marker for ``spec``'s producer to its partition (see the module
        doc); raises the partition's error."""

        async def call(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            version = _require(conn, ApiKey.WRITE_TXN_MARKERS)
            fields = {"markers": [{
                "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                "transaction_result": False, "coordinator_epoch": spec.coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": ps}
                           for t, ps in _by_topic(tps).items()]}]}
            response = await conn.request(ApiKey.WRITE_TXN_MARKERS, fields, version=version)
            out: dict[TopicPartition, Any] = {}
            for marker in response.markers:
                for t in marker.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        out[tp] = error_for(p.error_code, f"aborting the transaction of "
                                                          f"producer {spec.producer_id} on "
                                                          f"{tp}") if p.error_code else None
            for tp in tps:
                out.setdefault(tp, error_for(-1, f"broker {conn.node_id} did not answer "
                                                 f"for {tp}"))
            return out

        await self.cluster.per_leader([spec.partition], call, timeout_s=self.request_timeout_s)
