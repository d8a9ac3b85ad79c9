"""OffsetForLeaderEpoch (23), v2-4: the end offset of a leader epoch (KIP-101/KIP-320).

Consumers use it to validate their position after a leader change; followers to truncate.
Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), except to ``replica_id`` -2
(Kafka's debugging id), after the ``current_leader_epoch`` check (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH). The answer is the largest epoch <= the requested one with its end
offset (the next epoch's start, or the log end for the latest); (-1, -1) when the requested
epoch is -1, above every epoch, or the log has no epochs.
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
from strom.replication.replica_manager import as_kafka_error

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
DEBUGGING_REPLICA_ID = -2


class OffsetForLeaderEpochHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        topics = []
        access = self._state.access
        # A follower (replica_id >= 0) needs CLUSTER_ACTION, a consumer DESCRIBE on the topic.
        replica_id = int(body.replica_id) if version >= 3 else -1
        follower = replica_id >= 0
        for topic in body.topics:
            allowed = (access.allowed(request, ResourceType.CLUSTER) if follower
                       else access.allowed(request, ResourceType.TOPIC, topic.topic))
            parts = [self._one(topic.topic, p, replica_id) if allowed else {
                "error_code": TOPIC_DENIED, "partition": p.partition, "leader_epoch": -1,
                "end_offset": -1} for p in topic.partitions]
            topics.append({"topic": topic.topic, "partitions": parts})
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})]

    def _one(self, topic: str, p: Any, replica_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": 0, "partition": p.partition, "leader_epoch": -1,
                               "end_offset": -1}
        partition = self._state.replicas.get(topic, p.partition)
        if partition is None:  # known but not hosted (or its log still opening): retriable
            out["error_code"] = (
                NotLeaderOrFollowerError.code
                if leader_hints.in_image(self._state, topic, p.partition)
                else UnknownTopicOrPartitionError.code)
            return out
        try:
            check_leader_epoch(p.current_leader_epoch, partition.leader_epoch)
            if replica_id != DEBUGGING_REPLICA_ID and not partition.is_leader:
                raise NotLeaderOrFollowerError(f"this broker is not the leader of {topic}-"
                                               f"{p.partition}")
            epoch, end = partition.end_offset_for_epoch(p.leader_epoch)
            out["leader_epoch"], out["end_offset"] = epoch, end
        except Exception as exc:
            out["error_code"] = as_kafka_error(exc).code
        return out
