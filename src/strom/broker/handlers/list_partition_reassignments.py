"""ListPartitionReassignments (46), v0: the reassignments in progress, answered by the
controller from its metadata image: per partition the full replica set and the adding /
removing replicas (:mod:`strom.controller.reassignment`). Null ``topics`` lists every
reassignment; named partitions that do not exist or are not being reassigned are left out
(as Kafka). Another broker answers NOT_CONTROLLER (41); without DESCRIBE on the cluster:
CLUSTER_AUTHORIZATION_FAILED (31), both at the top level only.
"""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.alter_partition_reassignments import NOT_CONTROLLER_MESSAGE
from strom.broker.handlers.on_controller import is_controller
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.controller.reassignment import ongoing
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS


class ListPartitionReassignmentsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            return [_response(version, denied, None, [])]
        if not is_controller(self._state):
            return [_response(version, error_class("NOT_CONTROLLER").code,
                              NOT_CONTROLLER_MESSAGE, [])]
        wanted = None if body.topics is None else [
            (t.name, int(i)) for t in body.topics for i in t.partition_indexes]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, p in ongoing(self._state.store.image, wanted):
            by_topic.setdefault(topic, []).append({
                "partition_index": p.partition, "replicas": list(p.replicas),
                "adding_replicas": list(p.adding_replicas),
                "removing_replicas": list(p.removing_replicas)})
        return [_response(version, 0, None,
                          [{"name": t, "partitions": ps} for t, ps in by_topic.items()])]


def _response(version: int, code: int, message: str | None,
              topics: list[dict[str, Any]]) -> bytes:
    return api.response(API_KEY, version, {"throttle_time_ms": 0, "error_code": code,
                                           "error_message": message, "topics": topics})
