"""DeleteRecords (21), v0-2: advance partitions' log start offsets (-1 means the high watermark).

Internal topics are refused with INVALID_TOPIC_EXCEPTION, as Kafka does."""

from __future__ import annotations

from typing import Any

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import InvalidTopicError, UnknownTopicOrPartitionError
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.replication.replica_manager import as_kafka_error

API_KEY = ApiKey.DELETE_RECORDS


class DeleteRecordsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        topics = []
        for topic in body.topics:
            denied = not self._state.access.allowed(request, ResourceType.TOPIC, topic.name)
            parts = [{"partition_index": p.partition_index, "low_watermark": -1,
                      "error_code": TOPIC_DENIED} if denied else self._one(topic.name, p)
                     for p in topic.partitions]
            topics.append({"name": topic.name, "partitions": parts})
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})]

    def _one(self, topic: str, p: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                               "error_code": 0}
        partition = self._state.replicas.get(topic, p.partition_index)
        if partition is None:
            out["error_code"] = UnknownTopicOrPartitionError.code
            return out
        if partition.internal:
            out["error_code"] = InvalidTopicError.code
            return out
        try:
            out["low_watermark"] = partition.delete_records_before(int(p.offset))
        except Exception as exc:
            out["error_code"] = as_kafka_error(exc).code
        return out
