"""DeleteTopics (20), v1-6: by name, or by topic id (v6)."""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker.access import TopicDenied
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.quotas.mutations import MutationQuota
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import (
    KafkaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from strom.common.types import ZERO_UUID
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DELETE_TOPICS


class DeleteTopicsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in body.topics or []]
        else:
            wanted = [(name, None) for name in body.topic_names or []]
        quota = MutationQuota(self._state.quotas, request)
        results = [self._delete(request, name, topic_id, quota) for name, topic_id in wanted]
        return [api.response(API_KEY, version, {"throttle_time_ms": request.throttle_ms,
                                                "responses": results})]

    def _delete(self, request: Request, name: str | None, topic_id: uuid.UUID | None,
                quota: MutationQuota) -> dict[str, Any]:
        image = self._state.store.image
        out: dict[str, Any] = {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": 0,
                               "error_message": None}
        try:
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                topic = image.topic_by_id(topic_id)
                if topic is None:
                    raise UnknownTopicIdError("Topic id does not exist.")
                name = topic.name
                out["name"] = name
            if name is not None and not self._state.access.allowed(
                    request, ResourceType.TOPIC, name):  # before revealing existence
                raise TopicDenied()
            if name is None or name not in image.topics:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            quota.check()
            deleted = self._state.delete_topic(name)
            quota.record(len(deleted.partitions))
            out["topic_id"] = deleted.topic_id
        except KafkaError as exc:
            out["error_code"] = exc.code
            out["error_message"] = exc.message
        return out
