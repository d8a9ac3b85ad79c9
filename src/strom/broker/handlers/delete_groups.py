"""DeleteGroups (42), v0-2: delete Empty groups and their offsets (tombstones);
NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for unknown groups. Each answer
waits for its tombstones to commit; a failed write is that group's error (Kafka's mapping)."""

from __future__ import annotations

from strom.broker.access import GROUP_DENIED
from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import respond_when_ready
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DELETE_GROUPS


class DeleteGroupsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        names = list(body.groups_names)
        access = self._state.access
        denied = {g for g in names if not access.allowed(request, ResourceType.GROUP, g)}
        allowed = [g for g in names if g not in denied]

        def encode(errors: list[int]) -> bytes:
            by_group = dict(zip(allowed, errors, strict=True))
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0,
                "results": [{"group_id": g, "error_code": GROUP_DENIED if g in denied
                             else by_group[g]} for g in names],
            })

        return respond_when_ready(
            lambda callback: self._state.groups.delete_groups(allowed, callback), encode)
