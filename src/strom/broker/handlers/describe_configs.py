"""DescribeConfigs (32), v1-4: topic and broker configs with sources, synonyms and docs.

A broker resource is this broker (its id: every key as it runs with it) or the cluster-wide
default (name ``""``: the dynamic default configs that are set); any other name is
INVALID_REQUEST with Kafka's message."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.configs_view import (
    broker_entries,
    cluster_default_entries,
    topic_entries,
)
from strom.broker.state import BrokerState
from strom.common.errors import (
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_CONFIGS
TOPIC = 2
BROKER = 4


class DescribeConfigsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        synonyms = bool(body.include_synonyms) if version >= 1 else False
        docs = bool(body.include_documentation) if version >= 3 else False
        results = []
        for res in body.resources:
            out: dict[str, Any] = {
                # Kafka leaves the message at its default on success: "", not null.
                "error_code": 0, "error_message": "", "resource_type": res.resource_type,
                "resource_name": res.resource_name, "configs": [],
            }
            try:
                if refused := self._state.access.config_refusal(
                        request, res.resource_type, res.resource_name):
                    raise error_for(refused)
                out["configs"] = self._describe(res, synonyms, docs)
            except KafkaError as exc:
                out["error_code"] = exc.code
                out["error_message"] = exc.message
            results.append(out)
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": results})]

    def _describe(self, res: Any, synonyms: bool, docs: bool) -> list[dict[str, Any]]:
        state = self._state
        keys = list(res.configuration_keys) if res.configuration_keys is not None else None
        if res.resource_type == TOPIC:
            if res.resource_name not in state.store.image.topics:
                raise UnknownTopicOrPartitionError(
                    f"Topic '{res.resource_name}' does not exist.")
            return topic_entries(state.topic_config(res.resource_name), keys, synonyms, docs)
        if res.resource_type == BROKER:
            name = res.resource_name
            if not name:
                return cluster_default_entries(state.config, keys, synonyms, docs)
            try:
                node = int(name)
            except ValueError:
                raise InvalidRequestError(
                    f"Broker id must be an integer, but it is: {name}") from None
            if node != state.node_id:
                raise InvalidRequestError(f"Unexpected broker id, expected {state.node_id} or "
                                          f"empty string, but received {name}")
            return broker_entries(state.config, keys, synonyms, docs)
        raise InvalidRequestError(f"Unsupported resource type {res.resource_type}")
