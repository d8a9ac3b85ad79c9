"""AlterPartitionReassignments (45), v0-1: start, replace or cancel (null replicas) partition
reassignments (KIP-455), answered by the controller once the first step is written
(:mod:`strom.controller.reassignment`; the controller finishes each one when its target
replicas are in the ISR). v1 (KIP-860) may forbid a change of replication factor
(``allow_replication_factor_change`` false).

Per partition: NONE, INVALID_REPLICA_ASSIGNMENT (39), INVALID_REPLICATION_FACTOR (38, v1),
UNKNOWN_TOPIC_OR_PARTITION (3),
NO_REASSIGNMENT_IN_PROGRESS (85), with Kafka's messages. Another broker answers NOT_CONTROLLER
(41) at the top level with no partitions (Kafka's ZooKeeper mode); without ALTER on the
cluster every partition and the top level carry CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.on_controller import on_controller
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class, error_name
from strom.controller.reassignment import Reassignment, ReassignResult, TopicPartition, reassign
from strom.metadata.changes import MetadataChange
from strom.metadata.image import MetadataImage
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


class AlterPartitionReassignmentsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts | Awaitable[ResponseParts]:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        targets: dict[TopicPartition, tuple[int, ...] | None] = {
            (t.name, int(p.partition_index)):
                None if p.replicas is None else tuple(int(r) for r in p.replicas)
            for t in body.topics for p in t.partitions}
        allow_rf_change = bool(body.allow_replication_factor_change) if version >= 1 else True
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            failed = ReassignResult(error_name(denied))
            return [_response(version, denied, None, dict.fromkeys(targets, failed))]

        def plan(image: MetadataImage, live: set[int]
                 ) -> tuple[list[MetadataChange], Reassignment]:
            decided = reassign(image, live, targets, allow_rf_change)
            return decided.changes, decided

        return on_controller(
            self._state, plan,
            lambda decided: [_response(version, 0, None, decided.results)],
            lambda code: [_response(version, code, _message(code), {})])


def _message(code: int) -> str | None:
    return NOT_CONTROLLER_MESSAGE if code == error_class("NOT_CONTROLLER").code else None


def _response(version: int, code: int, message: str | None,
              results: dict[TopicPartition, ReassignResult]) -> bytes:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), result in results.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "error_code": error_class(result.error).code,
            "error_message": result.message})
    return api.response(API_KEY, version, {
        "throttle_time_ms": 0, "error_code": code, "error_message": message,
        "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
