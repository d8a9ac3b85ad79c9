"""DescribeProducers (61), v0 (KIP-664): the active producers of partitions this broker holds
a replica of — producer id and epoch, last sequence and timestamp, the coordinator epoch of
its last marker, and the first offset of its open transaction (-1 if none), which is what an
operator needs to find and abort a hanging transaction. A follower answers from its own log,
as Kafka does (``kafka-transactions find-hanging --broker-id`` asks every replica a broker
holds). A partition the metadata has but this broker does not host answers
NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers import leader_hints
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_PRODUCERS


class DescribeProducersHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _partition(self, topic: str, index: int) -> dict[str, Any]:
        out: dict[str, Any] = {"partition_index": index, "error_code": 0,
                               "error_message": None, "active_producers": []}
        partition = self._state.replicas.get(topic, index)
        if partition is None:
            out["error_code"] = (NotLeaderOrFollowerError.code
                                 if leader_hints.in_image(self._state, topic, index)
                                 else UnknownTopicOrPartitionError.code)
        else:
            out["active_producers"] = [
                {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                 "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                 "coordinator_epoch": p.coordinator_epoch,
                 "current_txn_start_offset": p.txn_start_offset}
                for p in partition.active_producers()]
        return out

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        access = self._state.access
        topics = [{"name": t.name,
                   "partitions": [self._partition(t.name, int(i)) if access.allowed(
                       request, ResourceType.TOPIC, t.name) else {
                       "partition_index": int(i), "error_code": TOPIC_DENIED,
                       "error_message": None, "active_producers": []}
                       for i in t.partition_indexes]}
                  for t in body.topics]
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})]
