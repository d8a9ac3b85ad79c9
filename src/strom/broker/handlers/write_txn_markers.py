"""WriteTxnMarkers (27), v1: the transaction coordinator's commit / abort markers.

Sent by a transaction coordinator (this broker's own included, over a real connection) to
each partition leader. Each marker becomes one control batch per partition — attributes
transactional + control, the transaction's producer id and epoch, base sequence -1, one
record (key: version 0, type 0 abort / 1 commit; value: version 0, coordinator epoch) —
appended through the one write path as the coordinator (acks=-1: answered once the high
watermark passes it). The partition's producer state ends the producer's transaction there
(see :mod:`strom.storage.producer_state`). Per-partition errors as Kafka:
UNKNOWN_TOPIC_OR_PARTITION for a partition not hosted here, NOT_LEADER_OR_FOLLOWER,
INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch, … Once a marker is in a
``__consumer_offsets`` partition the group coordinator commits (or drops) the producer's
transactional offsets there.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strom.broker.access import CLUSTER_DENIED
from strom.broker.dispatch import HandlerResult, Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.types import TopicPartition
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.protocol import api
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.control import (
    ControlType,
    encode_control_key,
    encode_end_txn_marker_value,
)
from strom.protocol.versions import ApiKey
from strom.replication.replica_manager import AppendOrigin

API_KEY = ApiKey.WRITE_TXN_MARKERS
APPEND_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """The control batch of one commit / abort marker (offsets are assigned on append)."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           transactional=True, control=True)
    builder.append(timestamp_ms,
                   encode_control_key(ControlType.COMMIT if commit else ControlType.ABORT),
                   encode_end_txn_marker_value(coordinator_epoch))
    return builder.build()


class WriteTxnMarkersHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self._timeout_ms = APPEND_TIMEOUT_MS

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if not self._state.access.allowed(request, ResourceType.CLUSTER):  # CLUSTER_ACTION
            return [api.response(API_KEY, version, {"markers": [
                {"producer_id": int(m.producer_id), "topics": [
                    {"name": t.name, "partitions": [
                        {"partition_index": p, "error_code": CLUSTER_DENIED}
                        for p in t.partition_indexes]} for t in m.topics]}
                for m in body.markers]})]
        now = self._state.clock.now_ms()
        outcomes = []
        for marker in body.markers:
            batch = marker_batch(int(marker.producer_id), int(marker.producer_epoch),
                                 bool(marker.transaction_result), int(marker.coordinator_epoch),
                                 now)
            entries = {TopicPartition(t.name, p): memoryview(bytearray(batch))
                       for t in marker.topics for p in t.partition_indexes}
            outcome = self._state.replicas.append(
                entries, required_acks=-1, origin=AppendOrigin.COORDINATOR,
                timeout_ms=self._timeout_ms)
            outcomes.append((marker, outcome))

        def answer() -> ResponseParts:
            markers: list[dict[str, Any]] = []
            for marker, outcome in outcomes:
                by_topic: dict[str, list[dict[str, int]]] = {}
                for tp, result in outcome.results.items():
                    if result.error is None and tp.topic == OFFSETS_TOPIC:
                        # The group coordinator now commits or drops the transaction's
                        # pending offsets there (Kafka's onTransactionCompleted).
                        self._state.groups.complete_transaction(
                            tp.partition, int(marker.producer_id),
                            bool(marker.transaction_result))
                    by_topic.setdefault(tp.topic, []).append({
                        "partition_index": tp.partition,
                        "error_code": 0 if result.error is None else result.error.code})
                markers.append({"producer_id": int(marker.producer_id), "topics": [
                    {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
            return [api.response(API_KEY, version, {"markers": markers})]

        waits = [o.done for _, o in outcomes if o.done is not None]
        if not waits:
            return answer()
        return self._later(waits, answer)

    @staticmethod
    async def _later(waits: list[asyncio.Future[None]], answer: Any) -> ResponseParts:
        await asyncio.gather(*waits)
        result: ResponseParts = answer()
        return result
