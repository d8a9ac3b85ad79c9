"""ListGroups (16), v0-5: every group with its protocol type; v4+ state filter, v5+ type
filter and type (``classic``, or ``consumer`` for a KIP-848 group, whose protocol type is
``consumer`` too). COORDINATOR_LOAD_IN_PROGRESS (and no groups)
while a ``__consumer_offsets`` partition led here is still loading, as Kafka. A caller without
DESCRIBE on the cluster sees only the groups it may DESCRIBE."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.LIST_GROUPS


class ListGroupsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        states = set(body.states_filter or []) if version >= 4 else set()
        types = {t.lower() for t in body.types_filter or []} if version >= 5 else set()
        groups = []
        error = 0
        if not types or types & {"classic", "consumer"}:
            error, listed = self._state.groups.list_groups(states or None)
            access = self._state.access
            every = access.allowed(request, ResourceType.CLUSTER)
            for group_id, protocol_type, state, group_type in listed:
                if types and group_type not in types:
                    continue
                if not every and not access.allowed(request, ResourceType.GROUP, group_id):
                    continue
                entry = {"group_id": group_id, "protocol_type": protocol_type}
                if version >= 4:
                    entry["group_state"] = state
                if version >= 5:
                    entry["group_type"] = group_type
                groups.append(entry)
        return [api.response(API_KEY, version,
                             {"throttle_time_ms": 0, "error_code": error, "groups": groups})]
