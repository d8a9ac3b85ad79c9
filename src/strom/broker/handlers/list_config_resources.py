"""ListConfigResources (74), v0-1 (KIP-1142): the resources ``kafka-configs --describe``
can describe without a name. As Kafka 4.4 answers (measured): v0 lists client-metrics
resources only; v1 lists the resource types asked (every type when none is): topics (every
topic, internal ones included), brokers (every registered broker id); an unknown type is
UNSUPPORTED_VERSION. strom has no client-metrics, group or broker-logger configs, so those
types list nothing (Kafka lists its own id as a broker logger). DESCRIBE_CONFIGS on the
cluster (CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from strom.broker.access import CLUSTER_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.LIST_CONFIG_RESOURCES
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
KNOWN = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
UNSUPPORTED_VERSION = error_class("UNSUPPORTED_VERSION").code


class ListConfigResourcesHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)

        def answer(error: int, resources: list[dict[str, object]]) -> ResponseParts:
            return [api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": error, "config_resources": resources})]

        if not self._state.access.allowed(request, ResourceType.CLUSTER):
            return answer(CLUSTER_DENIED, [])
        types = [int(t) for t in body.resource_types or []] if version >= 1 else [
            CLIENT_METRICS]
        if any(t not in KNOWN for t in types):
            return answer(UNSUPPORTED_VERSION, [])
        wanted = set(types or KNOWN)
        image = self._state.store.image
        resources: list[dict[str, object]] = []
        if TOPIC in wanted:
            resources += [{"resource_name": name, "resource_type": TOPIC}
                          for name in sorted(image.topics)]
        if BROKER in wanted:
            resources += [{"resource_name": str(node), "resource_type": BROKER}
                          for node in sorted(image.brokers)]
        return answer(0, resources)
