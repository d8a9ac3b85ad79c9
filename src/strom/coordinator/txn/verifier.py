"""KIP-890 verification against a transaction coordinator on another broker (Kafka's
``AddPartitionsToTxnManager``).

A partition leader appends a producer's first transactional batch only once the producer's
transaction coordinator confirms the partition was added to its ongoing transaction. When
the coordinator is this broker the produce handler asks it directly; otherwise
:class:`RemoteTxnVerifier` sends AddPartitionsToTxn v4 with ``verify_only`` to the broker
leading the transactional id's ``__transaction_state`` partition and returns its
per-partition answers (NONE, TRANSACTION_ABORTABLE, PRODUCER_FENCED, …; see
:meth:`~strom.coordinator.txn.shard.TxnShard.verify_partitions`). As Kafka's
``AddPartitionsToTxnManager``: no coordinator to ask is COORDINATOR_NOT_AVAILABLE and one that
cannot be reached NETWORK_EXCEPTION, for every partition; a top-level error applies to every
partition, CLUSTER_AUTHORIZATION_FAILED as INVALID_TXN_STATE (a producer must not see it).
The produce handler turns the answers into the errors producers know
(:func:`strom.broker.handlers.produce_checks.verification_error`: the retriable
NOT_ENOUGH_REPLICAS for the unavailable ones). Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

from strom.client.security import ClientSecurity
from strom.common.errors import KafkaError, error_class
from strom.common.types import TopicPartition
from strom.coordinator.txn.peers import Leader, PeerConnections
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.coordinator.txn.verifier")

#: the first AddPartitionsToTxn version with batched, verify-only transactions (brokers only).
VERIFY_VERSION = 4
COORDINATOR_NOT_AVAILABLE = error_class("COORDINATOR_NOT_AVAILABLE").code
NETWORK_EXCEPTION = error_class("NETWORK_EXCEPTION").code
CLUSTER_AUTHORIZATION_FAILED = error_class("CLUSTER_AUTHORIZATION_FAILED").code
INVALID_TXN_STATE = error_class("INVALID_TXN_STATE").code


class RemoteTxnVerifier:
    """``coordinator_of(transactional_id)``: the broker leading the id's
    ``__transaction_state`` partition, None while it has no leader."""

    def __init__(self, coordinator_of: Callable[[str], Leader | None], *,
                 request_timeout_s: float = 5.0, security: ClientSecurity | None = None
                 ) -> None:
        self._coordinator_of = coordinator_of
        self._timeout_s = request_timeout_s
        self._peers = PeerConnections("strom-txn-verify", request_timeout_s, security)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Set[TopicPartition]) -> dict[TopicPartition, int]:
        """Per partition: the coordinator's answer (module docstring)."""
        unavailable = dict.fromkeys(partitions, COORDINATOR_NOT_AVAILABLE)
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            return unavailable
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        fields = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        try:
            conn = await self._peers.get(coordinator)
            response = await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, fields,
                                          version=VERIFY_VERSION, timeout_s=self._timeout_s)
        except (KafkaError, OSError) as exc:
            log.debug("verification of %r at node %d failed: %s", transactional_id,
                      coordinator.node_id, exc)
            await self._peers.drop(coordinator.node_id)
            return dict.fromkeys(partitions, NETWORK_EXCEPTION)
        if response.error_code:
            code = int(response.error_code)
            return dict.fromkeys(partitions, INVALID_TXN_STATE
                                 if code == CLUSTER_AUTHORIZATION_FAILED else code)
        answers = dict(unavailable)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if tp in answers:
                        answers[tp] = int(p.partition_error_code)
        return answers

    async def close(self) -> None:
        await self._peers.close()
