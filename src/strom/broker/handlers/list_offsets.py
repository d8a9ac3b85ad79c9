"""ListOffsets (2), v1-11: earliest, latest, max timestamp, and offset by timestamp.

Special timestamps: -2 earliest (log start), -1 latest (high watermark, or last stable offset
for read_committed), -3 the record with the largest timestamp (v7+, KIP-734), -4 earliest local
(v8+, = earliest here), -5 latest tiered (v9+, KIP-1005) and -6 earliest pending upload (v11+,
KIP-1023): no tiered storage, so offset -1, as Kafka without remote storage. A special value in
an older request, or any other negative timestamp, is UNSUPPORTED_VERSION with offset -1, as
Kafka 4.4 answers (``SPECIAL_FROM_VERSION``). v10's ``timeout_ms`` (KIP-1075, for remote
lookups) has nothing to wait for. Any other timestamp finds the first record whose timestamp is
at least it — exact per record, not per batch — below the high watermark (last stable offset).
Resolved by the partition (:meth:`Partition.list_offset`).
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers import leader_hints
from strom.broker.handlers.common import check_leader_epoch
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from strom.common.types import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.replication.partition import FetchIsolation
from strom.replication.replica_manager import as_kafka_error

API_KEY = ApiKey.LIST_OFFSETS
READ_COMMITTED = 1
#: The special timestamps after latest (-1) and earliest (-2), and the request version that
#: brought each. Any other negative timestamp, or one of these in an older request, is answered
#: UNSUPPORTED_VERSION with offset -1, as Kafka 4.4 answers it (measured with raw requests).
SPECIAL_FROM_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8,
                        LATEST_TIERED_TIMESTAMP: 9, EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}


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
                partitions.append(self._one(topic.name, p, read_committed, denied, version))
            topics.append({"name": topic.name, "partitions": partitions})
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})]

    def _one(self, topic: str, p: Any, read_committed: bool, denied: bool, version: int
             ) -> dict[str, Any]:
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
        timestamp = p.timestamp
        if timestamp < 0 and timestamp not in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP) and (
                version < SPECIAL_FROM_VERSION.get(timestamp, 1 << 15)):
            out["error_code"] = UnsupportedVersionError.code
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
