"""CreateAcls (30), v1-3 (flexible from v2): store ACL bindings through
:mod:`strom.controller.acls`; one result per creation. Requires ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED for every creation otherwise, as Kafka). Without an authorizer
every creation answers SECURITY_DISABLED and nothing is stored (see ``acl_common``)."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.acl_common import NO_AUTHORIZER, SECURITY_DISABLED, code_of
from strom.broker.state import BrokerState
from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import error_class
from strom.controller import acls
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CREATE_ACLS


class CreateAclsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        new = [AclBinding(
            ResourcePattern(code_of(ResourceType, c.resource_type), str(c.resource_name),
                            code_of(PatternType, c.resource_pattern_type)),
            AccessControlEntry(str(c.principal), str(c.host),
                               code_of(AclOperation, c.operation),
                               code_of(AclPermissionType, c.permission_type)))
            for c in body.creations]
        denied = self._state.access.check(request, ResourceType.CLUSTER)
        results: list[dict[str, Any]]
        if denied:
            results = [{"error_code": denied, "error_message": None} for _ in new]
        elif not self._state.access.enabled:
            results = [{"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
                       for _ in new]
        else:
            results = [{"error_code": 0 if p is None else error_class(p[0]).code,
                        "error_message": None if p is None else p[1]}
                       for p in acls.create(self._state.store, new)]
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": results})]
