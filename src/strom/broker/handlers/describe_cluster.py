"""DescribeCluster (60), v0-2: cluster id, controller and brokers (endpoint type 1 only), and
the cluster's authorized operations when asked (:mod:`.authorized_ops`). v2 (KIP-1073) asks
for fenced brokers too: a registered strom broker is never fenced (``is_fenced`` false), and
one that is not registered is not known to anyone."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.authorized_ops import authorized
from strom.broker.handlers.common import broker_entries
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_CLUSTER
BROKERS_ENDPOINT = 1


class DescribeClusterHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        image = self._state.store.image
        endpoint = body.endpoint_type if version >= 1 else BROKERS_ENDPOINT
        fields = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": endpoint, "cluster_id": image.cluster_id,
            "controller_id": image.controller_id,
            "brokers": broker_entries(image, request.conn.listener, "broker_id"),
            "authorized_operations": authorized(
                self._state.access, request, ResourceType.CLUSTER,
                requested=bool(body.include_cluster_authorized_operations)),
        }
        if endpoint != BROKERS_ENDPOINT:
            err = error_class("UNSUPPORTED_ENDPOINT_TYPE")
            fields.update(error_code=err.code, brokers=[],
                          error_message="Only the brokers endpoint type is supported.")
        return [api.response(API_KEY, version, fields)]
