"""CreatePartitions (37), v0-3: grow a topic's partition count (validate_only supported)."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CREATE_PARTITIONS


class CreatePartitionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        names = [t.name for t in body.topics]
        results = []
        for topic in body.topics:
            out: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(f"Duplicate topic {topic.name} in the request.")
                self._grow(topic, bool(body.validate_only))
            except KafkaError as exc:
                out["error_code"] = exc.code
                out["error_message"] = exc.message
            results.append(out)
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": results})]

    def _grow(self, topic: Any, validate_only: bool) -> None:
        state = self._state
        info = state.store.image.topics.get(topic.name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{topic.name}' does not exist.")
        current = len(info.partitions)
        if topic.count <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{topic.count}.")
        if topic.assignments is not None:
            if len(topic.assignments) != topic.count - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {topic.count - current} but "
                    f"{len(topic.assignments)} assignments provided.")
            brokers = set(state.store.image.brokers)
            for a in topic.assignments:
                if not a.broker_ids or set(a.broker_ids) - brokers:
                    raise InvalidReplicaAssignmentError(f"Unknown broker in {a.broker_ids}.")
        if not validate_only:
            state.add_partitions(topic.name, topic.count)
