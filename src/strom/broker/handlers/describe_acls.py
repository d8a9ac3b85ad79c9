"""DescribeAcls (29), v1-3 (flexible from v2): the stored ACL bindings a filter matches,
grouped by resource pattern. Requires DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED);
a filter with an UNKNOWN code is INVALID_REQUEST. Without an authorizer: SECURITY_DISABLED
(see ``acl_common``)."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.acl_common import NO_AUTHORIZER_ON_BROKER, SECURITY_DISABLED, filter_of
from strom.broker.state import BrokerState
from strom.common.acl import ResourcePattern, ResourceType
from strom.common.errors import InvalidRequestError
from strom.controller import acls
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_ACLS


class DescribeAclsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        acl_filter = filter_of(body, version)
        fields: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0,
                                  "error_message": None, "resources": []}
        denied = self._state.access.check(request, ResourceType.CLUSTER)
        problem = acl_filter.problem()
        if denied:
            fields["error_code"] = denied
        elif not self._state.access.enabled:
            fields.update(error_code=SECURITY_DISABLED, error_message=NO_AUTHORIZER_ON_BROKER)
        elif problem is not None:
            fields.update(error_code=InvalidRequestError.code, error_message=problem)
        else:
            by_pattern: dict[ResourcePattern, list[dict[str, Any]]] = {}
            for b in acls.describe(self._state.store.image, acl_filter):
                by_pattern.setdefault(b.pattern, []).append({
                    "principal": b.entry.principal, "host": b.entry.host,
                    "operation": int(b.entry.operation),
                    "permission_type": int(b.entry.permission)})
            fields["resources"] = [
                {"resource_type": int(p.resource_type), "resource_name": p.name,
                 "pattern_type": int(p.pattern_type), "acls": entries}
                for p, entries in by_pattern.items()]
        return [api.response(API_KEY, version, fields)]
