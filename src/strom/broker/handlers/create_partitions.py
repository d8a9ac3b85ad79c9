"""CreatePartitions (37), v0-3: grow a topic's partition count (validate_only supported).

A request adding more than 10,000 partitions in all (:mod:`strom.controller.limits`) is
refused whole, POLICY_VIOLATION for every topic, before anything is planned."""

from __future__ import annotations

from typing import Any

from strom.broker.access import TopicDenied
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.quotas.mutations import MutationQuota
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import InvalidRequestError, KafkaError
from strom.controller.limits import check_added_partitions
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
        quota = MutationQuota(self._state.quotas, request)
        try:  # Kafka's per-request bound refuses the whole request, before anything else
            check_added_partitions(self._state.store.image,
                                   ((t.name, t.count) for t in body.topics))
            refused: KafkaError | None = None
        except KafkaError as exc:
            refused = exc
        for topic in body.topics:
            out: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
            try:
                if refused is not None:
                    raise refused
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(f"Duplicate topic {topic.name} in the request.")
                if not self._state.access.allowed(request, ResourceType.TOPIC, topic.name):
                    raise TopicDenied()
                quota.check()
                before = self._state.store.image.topics.get(topic.name)
                self._grow(topic, bool(body.validate_only))
                if not body.validate_only and before is not None:
                    quota.record(topic.count - len(before.partitions))
            except KafkaError as exc:
                out["error_code"] = exc.code
                out["error_message"] = exc.message
            results.append(out)
        return [api.response(API_KEY, version, {"throttle_time_ms": request.throttle_ms,
                                                "results": results})]

    def _grow(self, topic: Any, validate_only: bool) -> None:
        state = self._state
        assignments = ([list(a.broker_ids) for a in topic.assignments]
                       if topic.assignments is not None else None)
        if validate_only:
            state.topic_admin.add_partitions(topic.name, topic.count, assignments,
                                             validate_only=True)
        else:
            state.add_partitions(topic.name, topic.count, assignments)
