"""DescribeGroups (15), v0-6: state, protocol and members (metadata and assignment only
while Stable, as Kafka). An unknown group is described as Dead with no error, and from v6
with GROUP_ID_NOT_FOUND and "Group <id> not found." (KIP-1043). v3+
authorized operations are a group's (READ, DESCRIBE, DELETE; :mod:`.authorized_ops`) when
asked, for groups described without error. A group whose partition is loading or not led here
gets that error with an empty state. A group the caller may not DESCRIBE is answered
GROUP_AUTHORIZATION_FAILED with nothing else (Kafka's ``groupError``)."""

from __future__ import annotations

from strom.broker.access import GROUP_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.authorized_ops import authorized
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_GROUPS
GroupIdNotFoundError = error_class("GROUP_ID_NOT_FOUND")


class DescribeGroupsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        include_ops = bool(body.include_authorized_operations) if version >= 3 else False
        groups: list[dict[str, object]] = []
        access = self._state.access
        for group_id in body.groups:
            if not access.allowed(request, ResourceType.GROUP, group_id):
                groups.append({"error_code": GROUP_DENIED, "group_id": group_id,
                               "group_state": "", "protocol_type": "", "protocol_data": "",
                               "members": []})
                continue
            error, summary = self._state.groups.describe_group(group_id)
            message = None
            if version >= 6 and not error and summary.state == "Dead":
                error, message = GroupIdNotFoundError.code, f"Group {group_id} not found."
            groups.append({
                "error_code": error,
                "error_message": message,
                "group_id": group_id,
                "group_state": summary.state,
                "protocol_type": summary.protocol_type,
                "protocol_data": summary.protocol,
                "members": [
                    {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "client_id": m.client_id, "client_host": m.client_host,
                     "member_metadata": m.metadata, "member_assignment": m.assignment}
                    for m in summary.members
                ],
                # Kafka reports them only for groups it could describe (no error).
                "authorized_operations": authorized(access, request, ResourceType.GROUP,
                                                    group_id, include_ops and not error),
            })
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "groups": groups})]
