"""SyncGroup (14), v0-5: the leader sends the assignment; followers wait for theirs.

v3+ carry ``group_instance_id``; v5+ check and return the protocol type and name.
"""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import group_refused, respond_when_ready
from strom.broker.state import BrokerState
from strom.coordinator.group.model import SyncResult
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.SYNC_GROUP


class SyncGroupHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        refused = group_refused(self._state, request, body.group_id)
        if refused is not None:
            return refused
        coordinator = self._state.groups

        def encode(result: SyncResult) -> bytes:
            fields: dict[str, object] = {"throttle_time_ms": 0, "error_code": result.error,
                                         "assignment": result.assignment}
            if version >= 5:
                fields["protocol_type"] = result.protocol_type
                fields["protocol_name"] = result.protocol_name
            return api.response(API_KEY, version, fields)

        return respond_when_ready(
            lambda callback: coordinator.sync_group(
                group_id=body.group_id,
                generation=int(body.generation_id),
                member_id=body.member_id,
                group_instance_id=body.group_instance_id if version >= 3 else None,
                protocol_type=body.protocol_type if version >= 5 else None,
                protocol_name=body.protocol_name if version >= 5 else None,
                assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
                callback=callback,
            ),
            encode,
        )
