"""ListOffsets (2), v1-8: earliest, latest, max timestamp, and offset by timestamp.

Special timestamps: -2 earliest (log start), -1 latest (high watermark, or last stable offset
for read_committed), -3 the record with the largest timestamp (KIP-734), -4 earliest local
(= earliest here), -5 latest tiered (none: -1). Any other timestamp finds the first record
whose timestamp is at least it — exact per record, not per batch — below the high watermark
(last stable offset). Resolved by the partition (:meth:`Partition.list_offset`).
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers import leader_hints
from strom.broker.handlers.common import check_leader_epoch
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.replication.partition import FetchIsolation
from strom.replication.replica_manager import as_kafka_error

API_KEY = ApiKey.LIST_OFFSETS
READ_COMMITTED = 1


class ListOffsetsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        read_committed = version >= 2 and body.isolation_level == READ_COMMITTED
        topics = []
        access = self._state.access
        for topic in body.topics:
            partitions = []
            denied = not access.allowed(request, ResourceType.TOPIC, topic.name)
            for p in topic.partitions:
                partitions.append(self._one(topic.name, p, read_committed, denied))
            topics.append({"name": topic.name, "partitions": partitions})
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})]

    def _one(self, topic: str, p: Any, read_committed: bool, denied: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partition_index": p.partition_index,
            "error_code": 0,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
        if denied:  # without DESCRIBE: nothing, not even whether the topic exists
            out["error_code"] = TOPIC_DENIED
            return out
        partition = self._state.replicas.get(topic, p.partition_index)
        if partition is None:  # known but not hosted (or its log still opening): retriable
            out["error_code"] = (
                NotLeaderOrFollowerError.code
                if leader_hints.in_image(self._state, topic, p.partition_index)
                else UnknownTopicOrPartitionError.code)
            return out
        try:
            check_leader_epoch(getattr(p, "current_leader_epoch", -1), partition.leader_epoch)
            isolation = (FetchIsolation.TXN_COMMITTED if read_committed
                         else FetchIsolation.HIGH_WATERMARK)
            found = partition.list_offset(p.timestamp, isolation)
            if found is not None:
                out["offset"], out["timestamp"], out["leader_epoch"] = found
        except Exception as exc:
            out["error_code"] = as_kafka_error(exc).code
        return out
