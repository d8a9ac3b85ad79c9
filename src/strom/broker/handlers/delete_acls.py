"""DeleteAcls (31), v1-3 (flexible from v2): remove the stored ACL bindings each filter
matches (:mod:`strom.controller.acls`), reporting them per filter. Requires ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED for every filter otherwise). Without an authorizer every
filter answers SECURITY_DISABLED and nothing is removed (see ``acl_common``)."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.acl_common import (
    NO_AUTHORIZER,
    SECURITY_DISABLED,
    binding_fields,
    filter_of,
)
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.controller import acls
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DELETE_ACLS


class DeleteAclsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        filters = [filter_of(f, version) for f in body.filters]
        denied = self._state.access.check(request, ResourceType.CLUSTER)
        results: list[dict[str, Any]]
        if denied:
            results = [{"error_code": denied, "error_message": None, "matching_acls": []}
                       for _ in filters]
        elif not self._state.access.enabled:
            results = [{"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                        "matching_acls": []} for _ in filters]
        else:
            results = [
                {"error_code": 0 if problem is None else error_class(problem[0]).code,
                 "error_message": None if problem is None else problem[1],
                 "matching_acls": [{"error_code": 0, "error_message": None,
                                    **binding_fields(b)} for b in matched]}
                for problem, matched in acls.delete(self._state.store, filters)]
        return [api.response(API_KEY, version, {"throttle_time_ms": 0,
                                                "filter_results": results})]
