"""ElectLeaders (43), v0-2: preferred (type 0) or unclean (type 1, v1+) leader election,
answered by the controller (Kafka's ZooKeeper mode; admin clients send it there).

Per partition: NONE (elected), ELECTION_NOT_NEEDED (84), PREFERRED_LEADER_NOT_AVAILABLE (80),
ELIGIBLE_LEADERS_NOT_AVAILABLE (83), UNKNOWN_TOPIC_OR_PARTITION. Null ``topic_partitions``
means every partition, and then the partitions that needed no election are left out of the
answer, as Kafka does. Another broker answers NOT_CONTROLLER (41) for every partition (and at
the top level, v1+); without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED. The
response is sent once the new leaders are written to the metadata store.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.on_controller import on_controller
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import InvalidRequestError, error_class
from strom.controller.decisions import Election, ElectionOutcome, ElectionType, elect_leaders
from strom.metadata.image import MetadataImage
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ELECT_LEADERS
_MESSAGES = {
    ElectionOutcome.NOT_NEEDED: "Leader election not needed for topic partition",
    ElectionOutcome.PREFERRED_NOT_AVAILABLE:
        "Failed to elect leader for partition: the preferred replica is not alive or not "
        "in the ISR",
    ElectionOutcome.NO_ELIGIBLE_LEADER:
        "Failed to elect leader for partition: no live replica is eligible",
    ElectionOutcome.UNKNOWN_PARTITION: "The partition does not exist.",
}


class ElectLeadersHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts | Awaitable[ResponseParts]:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        kind = ElectionType.PREFERRED
        if version >= 1:
            if body.election_type not in tuple(ElectionType):
                raise InvalidRequestError(f"unknown election type {body.election_type}")
            kind = ElectionType(body.election_type)
        wanted = None if body.topic_partitions is None else [
            (t.topic, int(i)) for t in body.topic_partitions for i in t.partitions]
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            return [_refused(version, wanted, denied)]
        return on_controller(
            self._state, lambda image, live: self._plan(image, live, kind, wanted),
            lambda election: [_answer(version, election, wanted is None)],
            lambda code: [_refused(version, wanted, code)])

    @staticmethod
    def _plan(image: MetadataImage, live: set[int], kind: ElectionType,
              wanted: list[tuple[str, int]] | None) -> tuple[list[Any], Election]:
        election = elect_leaders(image, live, kind, wanted)
        return election.changes, election


def _answer(version: int, election: Election, everything: bool) -> bytes:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), outcome in election.outcomes.items():
        if everything and outcome == ElectionOutcome.NOT_NEEDED:
            continue
        by_topic.setdefault(topic, []).append({
            "partition_id": partition, "error_code": error_class(outcome.value).code
            if outcome != ElectionOutcome.ELECTED else 0,
            "error_message": _MESSAGES.get(outcome)})
    return _response(version, 0, by_topic)


def _refused(version: int, wanted: list[tuple[str, int]] | None, code: int) -> bytes:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted or ():
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": None})
    return _response(version, code, by_topic)


def _response(version: int, code: int, by_topic: dict[str, list[dict[str, Any]]]) -> bytes:
    fields: dict[str, Any] = {"throttle_time_ms": 0, "replica_election_results": [
        {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}
    if version >= 1:
        fields["error_code"] = code
    return api.response(API_KEY, version, fields)
