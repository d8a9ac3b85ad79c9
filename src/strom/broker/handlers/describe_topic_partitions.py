"""DescribeTopicPartitions (75), v0 (KIP-966): topics and their partitions, a page at a time.

What Java 4.x admin clients describe topics with (Metadata is their fallback). Answered as a
Kafka 4.4 node answers the same requests (measured with raw requests, 2026-12-07):

* the topics are the requested ones, each once, in name order (none requested: every topic
  the caller may DESCRIBE, internal ones included); an unknown name answers
  UNKNOWN_TOPIC_OR_PARTITION, an invalid one INVALID_TOPIC_EXCEPTION, one without DESCRIBE
  TOPIC_AUTHORIZATION_FAILED (each with a zero id and no partitions);
* at most ``response_partition_limit`` partitions are described (below 1: 1, above
  :data:`MAX_PARTITIONS`: that), and when more remain ``next_cursor`` names the first one
  left — the next topic's partition 0 when the page ends with a topic;
* ``cursor`` starts the page at a topic and partition: with topics requested the cursor's
  topic must be one of them, and its partition index not negative, or every requested topic
  answers INVALID_REQUEST (with no authorized operations and no cursor); without, topics
  before the cursor's name are skipped, whether or not it exists;
* partitions as Metadata describes them (a leader not alive: -1 and LEADER_NOT_AVAILABLE,
  replicas not alive in ``offline_replicas``); eligible leader replicas are empty lists (no
  KIP-966 ELR here), and each topic carries the caller's authorized operations.
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.authorized_ops import authorized
from strom.broker.handlers.metadata import topic_entry
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import (
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from strom.common.names import validate_topic_name
from strom.common.types import ZERO_UUID
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one answer holds.
MAX_PARTITIONS = 2000


class DescribeTopicPartitionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        access = self._state.access
        image = self._state.store.image
        limit = min(max(int(body.response_partition_limit), 1), MAX_PARTITIONS)
        cursor = body.cursor
        in_order = list(dict.fromkeys(t.name for t in body.topics))
        requested = sorted(in_order)
        if cursor is not None and requested and (
                cursor.topic_name not in requested or cursor.partition_index < 0):
            return [self._invalid(version, in_order)]
        if cursor is not None and cursor.partition_index < 0:
            return [self._invalid(version, [])]
        if requested:
            names = requested
        else:
            names = sorted(n for n in image.topics
                           if access.allowed(request, ResourceType.TOPIC, n))
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        topics: list[dict[str, Any]] = []
        next_cursor: dict[str, Any] | None = None
        left = limit
        for position, name in enumerate(names):
            if left == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            ops = authorized(access, request, ResourceType.TOPIC, name)
            error = self._refused(request, name)
            if error:
                topics.append(_error_topic(name, error, ops))
                continue
            entry = topic_entry(image.topics[name], ops, image.brokers)
            first = cursor.partition_index if (
                cursor is not None and position == 0 and name == cursor.topic_name) else 0
            partitions = entry["partitions"][first:]
            if len(partitions) > left:
                next_cursor = {"topic_name": name,
                               "partition_index": partitions[left]["partition_index"]}
                partitions = partitions[:left]
            left -= len(partitions)
            for p in partitions:
                p["eligible_leader_replicas"] = []
                p["last_known_elr"] = []
            entry["partitions"] = partitions
            entry["topic_authorized_operations"] = _bits(entry.pop("authorized_operations"))
            topics.append(entry)
            if next_cursor is not None:
                break
        return [api.response(API_KEY, version, {
            "throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor})]

    def _refused(self, request: Request, name: str) -> int:
        """The error a requested topic answers with instead of its partitions (0: none)."""
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return exc.code
        if not self._state.access.allowed(request, ResourceType.TOPIC, name):
            return TOPIC_DENIED
        if name not in self._state.store.image.topics:
            return UnknownTopicOrPartitionError.code
        return 0

    @staticmethod
    def _invalid(version: int, names: list[str]) -> bytes:
        topics = [_error_topic(n, InvalidRequestError.code, None) for n in names]
        return api.response(API_KEY, version, {"throttle_time_ms": 0, "next_cursor": None,
                                               "topics": topics})


def _error_topic(name: str, error: int, ops: set[int] | None) -> dict[str, Any]:
    return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "is_internal": False,
            "partitions": [], "topic_authorized_operations": _bits(ops)}


def _bits(ops: set[int] | None) -> int:
    """The int32 field this schema declares plainly (Metadata's is a bit field the adapter
    encodes): a bit per AclOperation code, or INT32_MIN for none given."""
    if ops is None:
        return -(1 << 31)
    return sum(1 << op for op in ops)
