"""OffsetDelete (47), v0: delete a group's committed offsets for some partitions.

GROUP_SUBSCRIBED_TO_TOPIC for topics a current member subscribes to (read from the members'
ConsumerProtocol subscriptions); GROUP_ID_NOT_FOUND for unknown groups; NON_EMPTY_GROUP for
an active group that is not a consumer group. The answer waits for the tombstones to commit; a
failed write is the top-level error (Kafka's mapping).
"""

from __future__ import annotations

from strom.broker.access import GROUP_DENIED, TOPIC_DENIED
from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import partition_exists, respond_when_ready
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import UnknownTopicOrPartitionError
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.OFFSET_DELETE


class OffsetDeleteHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        image = self._state.store.image
        requested = [(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions]
        access = self._state.access
        readable = {t: access.allowed(request, ResourceType.TOPIC, t) for t, _ in requested}
        known = [tp for tp in requested if readable[tp[0]] and partition_exists(image, *tp)]

        def encode(outcome: tuple[int, list[int]]) -> bytes:
            top, results = outcome
            errors = {tp: UnknownTopicOrPartitionError.code if readable[tp[0]]
                      else TOPIC_DENIED for tp in requested}
            if not top:
                errors.update(zip(known, results, strict=True))
            topics = [] if top else [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index,
                     "error_code": errors[(t.name, int(p.partition_index))]}
                    for p in t.partitions]}
                for t in body.topics
            ]
            return api.response(API_KEY, version,
                                {"error_code": top, "throttle_time_ms": 0, "topics": topics})

        if not access.allowed(request, ResourceType.GROUP, body.group_id):
            return [encode((GROUP_DENIED, []))]
        return respond_when_ready(
            lambda callback: self._state.groups.delete_offsets(
                body.group_id, known, lambda top, results: callback((top, results))),
            encode,
        )
