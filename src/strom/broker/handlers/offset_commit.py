"""OffsetCommit (8), v2-9: commit offsets for a group member or a standalone consumer.

Generation -1 with an empty member id is a simple commit, allowed while the group is empty or
absent. v2-4 ``retention_time_ms`` (other than -1) becomes the record's expire timestamp.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION, as in Kafka. The response waits
until the commit is durable; a failed write answers each partition with Kafka's mapped error
(COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, INVALID_COMMIT_OFFSET_SIZE …), and the offset is
not committed. A group whose partition is loading or not led here answers every partition
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import partition_exists, respond_when_ready
from strom.broker.state import BrokerState
from strom.common.errors import UnknownTopicOrPartitionError, error_class
from strom.coordinator.group.coordinator import ILLEGAL_GENERATION, OffsetToCommit
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.OFFSET_COMMIT


class OffsetCommitHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        state = self._state
        image = state.store.image
        wanted: list[OffsetToCommit] = []
        errors: dict[tuple[str, int], int] = {}
        for topic in body.topics:
            for p in topic.partitions:
                if not partition_exists(image, topic.name, p.partition_index):
                    errors[(topic.name, p.partition_index)] = UnknownTopicOrPartitionError.code
                    continue
                wanted.append(OffsetToCommit(
                    topic.name, p.partition_index, int(p.committed_offset),
                    int(p.committed_leader_epoch) if version >= 6 else -1,
                    p.committed_metadata))
        expire = -1
        if 2 <= version <= 4 and int(body.retention_time_ms) >= 0:
            expire = state.clock.now_ms() + int(body.retention_time_ms)
        group_not_found = (error_class("GROUP_ID_NOT_FOUND").code if version >= 9
                           else ILLEGAL_GENERATION)

        def encode(results: list[int]) -> bytes:
            for o, error in zip(wanted, results, strict=True):
                errors[(o.topic, o.partition)] = error
            topics: list[dict[str, Any]] = [
                {"name": topic.name, "partitions": [
                    {"partition_index": p.partition_index,
                     "error_code": errors[(topic.name, p.partition_index)]}
                    for p in topic.partitions]}
                for topic in body.topics
            ]
            return api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": topics})

        return respond_when_ready(
            lambda callback: state.groups.commit_offsets(
                group_id=body.group_id,
                generation=int(body.generation_id_or_member_epoch),
                member_id=body.member_id or "",
                group_instance_id=body.group_instance_id if version >= 7 else None,
                offsets=wanted,
                expire_timestamp=expire,
                group_not_found_error=group_not_found,
                callback=callback,
            ),
            encode,
        )
