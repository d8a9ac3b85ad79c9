"""LeaveGroup (13), v0-5: v0-2 one member id; v3+ a batch of members by member id or
``group_instance_id`` (KIP-345), with a per-member error."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.group_common import group_refused
from strom.broker.state import BrokerState
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.LEAVE_GROUP


class LeaveGroupHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        refused = group_refused(self._state, request, body.group_id)
        if refused is not None:
            return refused
        if version >= 3:
            leaving = [(m.member_id or "", m.group_instance_id) for m in body.members]
        else:
            leaving = [(body.member_id, None)]
        top, errors = self._state.groups.leave_group(body.group_id, leaving)
        if version < 3:
            return [api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": top or (errors[0] if errors else 0)})]
        return [api.response(API_KEY, version, {
            "throttle_time_ms": 0,
            "error_code": top,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": error}
                for (mid, iid), error in zip(leaving, errors, strict=True)
            ],
        })]
