"""ConsumerGroupDescribe (69), v0-1: KIP-848 consumer groups with their epochs, members,
current and target assignments (topics by id and name); v1 adds each member's type (1: a
consumer-protocol member; strom has no classic members in consumer groups). An unknown id or
a classic group is GROUP_ID_NOT_FOUND (the Java admin then falls back to DescribeGroups), an
empty id INVALID_GROUP_ID; DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED); the caller's
operations on the group when asked (``IncludeAuthorizedOperations``)."""

from __future__ import annotations

from typing import Any

from strom.broker.access import GROUP_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.authorized_ops import authorized
from strom.broker.state import BrokerState
from strom.common.acl import AclOperation, ResourceType
from strom.common.errors import error_class
from strom.coordinator.group.consumer.groups import chosen_assignor
from strom.coordinator.group.consumer.model import Assignment, ConsumerGroup, to_wire
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
INVALID_GROUP_ID = error_class("INVALID_GROUP_ID").code
GROUP_ID_NOT_FOUND = error_class("GROUP_ID_NOT_FOUND").code
CONSUMER_MEMBER_TYPE = 1


class ConsumerGroupDescribeHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        groups = [self._describe(request, group_id, version) for group_id in body.group_ids]
        if body.include_authorized_operations:
            for entry in groups:
                if not entry["error_code"]:
                    entry["authorized_operations"] = authorized(
                        self._state.access, request, ResourceType.GROUP, entry["group_id"])
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "groups": groups})]

    def _describe(self, request: Request, group_id: str, version: int) -> dict[str, Any]:
        empty: dict[str, Any] = {"group_id": group_id, "group_state": "", "group_epoch": 0,
                                 "assignment_epoch": 0, "assignor_name": "", "members": []}
        if not group_id:
            return {**empty, "error_code": INVALID_GROUP_ID}
        if not self._state.access.allowed(request, ResourceType.GROUP, group_id,
                                          AclOperation.DESCRIBE):
            return {**empty, "error_code": GROUP_DENIED}
        error, group, classic = self._state.groups.consumer_group(group_id)
        if group is None:
            message = None
            if error == GROUP_ID_NOT_FOUND:
                message = (f"Group {group_id} is not a consumer group." if classic
                           else f"Group {group_id} not found.")
            return {**empty, "error_code": error, "error_message": message}
        return {**empty, "error_code": 0, **self._group(group, version)}

    def _group(self, group: ConsumerGroup, version: int) -> dict[str, Any]:
        names = {info.topic_id: name
                 for name, info in self._state.store.image.topics.items()}

        def assignment(parts: Assignment) -> dict[str, Any]:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": names.get(t, ""), "partitions": list(ps)}
                for t, ps in to_wire(parts)]}

        members = []
        for m in group.members.values():
            entry: dict[str, Any] = {
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex or "",  # Kafka: ""
                "assignment": assignment(m.assigned),
                "target_assignment": assignment(group.target.get(m.member_id, {})),
            }
            if version >= 1:
                entry["member_type"] = CONSUMER_MEMBER_TYPE
            members.append(entry)
        default = self._state.groups.settings.consumer.assignors[0]
        return {"group_state": group.state().value, "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": chosen_assignor(group.members.values(), default),
                "members": members}
