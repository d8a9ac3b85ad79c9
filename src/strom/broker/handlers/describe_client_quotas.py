"""DescribeClientQuotas (48), v0-1: the stored client quotas matching a filter, from
:mod:`strom.controller.client_quotas` (an invalid filter: one top-level error). Needs
DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as Kafka."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.controller.client_quotas import describe
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS


class DescribeClientQuotasHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            return [api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": denied, "error_message": None,
                "entries": None})]
        components = [(str(c.entity_type), int(c.match_type), c.match)
                      for c in body.components]
        found = describe(self._state.store.image, components, bool(body.strict))
        if isinstance(found, tuple):
            return [api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": error_class(found[0]).code,
                "error_message": found[1], "entries": None})]
        return [api.response(API_KEY, version, {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
                        for entity, values in found]})]
