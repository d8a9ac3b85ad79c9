"""AddPartitionsToTxn (24), v0-5: partitions join a producer's ongoing transaction.

v0-3 come from producers: one transaction (``v3_and_below_*`` fields), answered per
partition. v4+ come from brokers (KIP-890): a batch of transactions, each either added or,
with ``verify_only``, checked as Kafka's coordinator checks it (the producer's error —
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while completing — or
per partition NONE when in the transaction, TRANSACTION_ABORTABLE otherwise), answered per
transaction. As Kafka: a partition of an unknown
topic fails the whole transaction's request (UNKNOWN_TOPIC_OR_PARTITION for it,
OPERATION_NOT_ATTEMPTED for the others); otherwise every partition gets the coordinator's
answer (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.broker.access import TOPIC_DENIED, TXN_ID_DENIED
from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import partition_exists, respond_when_ready
from strom.broker.handlers.init_producer_id import fenced_for
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import UnknownTopicOrPartitionError, error_class
from strom.common.types import TopicPartition
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
OPERATION_NOT_ATTEMPTED = error_class("OPERATION_NOT_ATTEMPTED").code


def topic_results(errors: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp in sorted(errors):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "partition_error_code": errors[tp]})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


class AddPartitionsToTxnHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _unknown(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int] | None:
        """Kafka's pre-check: any unknown partition fails the transaction's request."""
        image = self._state.store.image
        missing = {tp for tp in partitions if not partition_exists(image, tp.topic, tp.partition)}
        if not missing:
            return None
        return {tp: UnknownTopicOrPartitionError.code if tp in missing
                else OPERATION_NOT_ATTEMPTED for tp in partitions}

    def _refused(self, request: Request, tid: str, partitions: set[TopicPartition]
                 ) -> dict[TopicPartition, int] | None:
        """Kafka's authorization: WRITE on the transactional id (else every partition
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (else its partitions
        TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); None if allowed."""
        access = self._state.access
        if not access.allowed(request, ResourceType.TRANSACTIONAL_ID, tid):
            return dict.fromkeys(partitions, TXN_ID_DENIED)
        denied = {t for t in {tp.topic for tp in partitions}
                  if not access.allowed(request, ResourceType.TOPIC, t)}
        if not denied:
            return None
        return {tp: TOPIC_DENIED if tp.topic in denied else OPERATION_NOT_ATTEMPTED
                for tp in partitions}

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if version < 4:
            return self._single(request, version, body)
        return self._batch(request, version, body)

    def _single(self, request: Request, version: int, body: Any) -> HandlerResult:
        partitions = {TopicPartition(t.name, p) for t in body.v3_and_below_topics
                      for p in t.partitions}

        def answer(errors: dict[TopicPartition, int]) -> bytes:
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "results_by_topic_v3_and_below": topic_results(errors)})

        failed = (self._refused(request, body.v3_and_below_transactional_id, partitions)
                  or self._unknown(partitions))
        if failed is not None:
            return [answer(failed)]
        return respond_when_ready(
            lambda callback: self._state.txns.add_partitions(
                body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch), partitions,
                lambda error: callback(dict.fromkeys(partitions,
                                                     fenced_for(version, 2, error)))),
            answer)

    def _batch(self, request: Request, version: int, body: Any) -> HandlerResult:
        txns = list(body.transactions)
        results: list[dict[str, Any] | None] = [None] * len(txns)
        pending = [len(txns)]
        done: list[Any] = []

        def settle(index: int, tid: str, errors: dict[TopicPartition, int]) -> None:
            results[index] = {"transactional_id": tid, "topic_results": topic_results(errors)}
            pending[0] -= 1
            if pending[0] == 0 and done:
                done[0](results)

        def start(callback: Any) -> None:
            done.append(callback)
            if not txns:
                callback(results)
            for index, txn in enumerate(txns):
                parts = {TopicPartition(t.name, p) for t in txn.topics for p in t.partitions}
                tid = txn.transactional_id
                failed = self._refused(request, tid, parts) or self._unknown(parts)
                if failed is not None:
                    settle(index, tid, failed)
                elif txn.verify_only:
                    settle(index, tid, self._state.txns.verify_partitions(
                        tid, int(txn.producer_id), int(txn.producer_epoch), parts))
                else:
                    self._state.txns.add_partitions(
                        tid, int(txn.producer_id), int(txn.producer_epoch), parts,
                        added(index, tid, parts))

        def added(index: int, tid: str, parts: set[TopicPartition]) -> Callable[[int], None]:
            return lambda error: settle(index, tid, dict.fromkeys(parts, error))

        def answer(out: list[dict[str, Any] | None]) -> bytes:
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out})

        return respond_when_ready(start, answer)
