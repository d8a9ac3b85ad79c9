"""Heartbeat (12), v0-4: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to
rejoin."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.group_common import group_refused
from strom.broker.state import BrokerState
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.HEARTBEAT


class HeartbeatHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        refused = group_refused(self._state, request, body.group_id)
        if refused is not None:
            return refused
        error = self._state.groups.heartbeat(
            body.group_id, body.member_id,
            body.group_instance_id if version >= 3 else None, int(body.generation_id),
        )
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "error_code": error})]
