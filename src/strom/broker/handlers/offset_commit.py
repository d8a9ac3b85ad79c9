"""OffsetCommit (8), v2-10: commit offsets for a group member or a standalone consumer.

Generation -1 with an empty member id is a simple commit, allowed while the group is empty or
absent. v2-4 ``retention_time_ms`` (other than -1) becomes the record's expire timestamp.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION, as in Kafka; v10 names topics by
id only (KIP-848), and an id no topic has gets UNKNOWN_TOPIC_ID. The response waits
until the commit is durable; a failed write answers each partition with Kafka's mapped error
(COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, INVALID_COMMIT_OFFSET_SIZE …), and the offset is
not committed. A group whose partition is loading or not led here answers every partition
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR. Authorization: READ on the group (else
GROUP_AUTHORIZATION_FAILED in every partition, nothing committed), READ on each topic (else
TOPIC_AUTHORIZATION_FAILED in its partitions).
"""

from __future__ import annotations

from strom.broker.access import GROUP_DENIED, TOPIC_DENIED
from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import (
    commit_response_topics,
    offsets_to_commit,
    request_topics,
    respond_when_ready,
)
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.coordinator.group.coordinator import ILLEGAL_GENERATION
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
        access = state.access
        group_ok = access.allowed(request, ResourceType.GROUP, body.group_id)

        def refused(topic: str) -> int:
            if not group_ok:
                return GROUP_DENIED
            return 0 if access.allowed(request, ResourceType.TOPIC, topic) else TOPIC_DENIED

        topics = request_topics(image, body.topics, by_id=version >= 10)
        wanted, errors = offsets_to_commit(image, topics, with_leader_epoch=version >= 6,
                                           refused=refused)
        expire = -1
        if 2 <= version <= 4 and int(body.retention_time_ms) >= 0:
            expire = state.clock.now_ms() + int(body.retention_time_ms)
        group_not_found = (error_class("GROUP_ID_NOT_FOUND").code if version >= 9
                           else ILLEGAL_GENERATION)

        def encode(results: list[int]) -> bytes:
            for o, error in zip(wanted, results, strict=True):
                errors[(o.topic, o.partition)] = error
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "topics": commit_response_topics(topics, errors)})

        if not group_ok:
            return [encode([])]
        return respond_when_ready(
            lambda callback: state.groups.commit_offsets(
                group_id=body.group_id,
                generation=int(body.generation_id_or_member_epoch),
                member_id=body.member_id or "",
                group_instance_id=body.group_instance_id if version >= 7 else None,
                offsets=wanted,
                expire_timestamp=expire,
                group_not_found_error=group_not_found,
                stale_epoch_error=error_class(
                    "STALE_MEMBER_EPOCH" if version >= 9 else "ILLEGAL_GENERATION").code,
                callback=callback,
            ),
            encode,
        )
