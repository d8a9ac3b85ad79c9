"""AlterConfigs (33), v0-2, and IncrementalAlterConfigs (44), v0-1: topic config overrides.

AlterConfigs replaces a topic's whole override set; IncrementalAlterConfigs applies SET (0),
DELETE (1), APPEND (2) and SUBTRACT (3) to single keys (APPEND/SUBTRACT on list keys only).
Every change is validated before any is applied. Broker configs are static in this version:
altering them is refused with INVALID_CONFIG and a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.config import TOPIC_KEYS, ConfigType, validate_topic_configs
from strom.common.errors import (
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey

TOPIC = 2
BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class _AlterBase:
    api_key: int

    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(self.api_key, version, request.body)
        responses = []
        for res in body.resources:
            out: dict[str, Any] = {"error_code": 0, "error_message": None,
                                   "resource_type": res.resource_type,
                                   "resource_name": res.resource_name}
            try:
                self._alter(res, bool(body.validate_only))
            except KafkaError as exc:
                out["error_code"] = exc.code
                out["error_message"] = exc.message
            responses.append(out)
        return [api.response(self.api_key, version,
                             {"throttle_time_ms": 0, "responses": responses})]

    def _alter(self, res: Any, validate_only: bool) -> None:
        state = self._state
        if res.resource_type == BROKER:
            raise InvalidConfigError("Broker configs are static in strom: set them with "
                                     "--config / --set and restart the broker.")
        if res.resource_type != TOPIC:
            raise InvalidRequestError(f"Unsupported resource type {res.resource_type}")
        topic = state.store.image.topics.get(res.resource_name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{res.resource_name}' does not exist.")
        new = self._new_overrides(dict(topic.configs), res.configs)
        validate_topic_configs(new)
        if not validate_only:
            state.set_topic_configs(res.resource_name, new)

    def _new_overrides(self, current: dict[str, str], changes: Any) -> dict[str, str]:
        raise NotImplementedError


class AlterConfigsHandler(_AlterBase):
    api_key = ApiKey.ALTER_CONFIGS

    def _new_overrides(self, current: dict[str, str], changes: Any) -> dict[str, str]:
        return {c.name: c.value for c in changes if c.value is not None}


def _list_op(op: Callable[[list[str], list[str]], list[str]]) -> Callable[..., str]:
    def apply(current: str | None, value: str | None, default: Any) -> str:
        base = current.split(",") if current else list(default or [])
        extra = [v.strip() for v in (value or "").split(",") if v.strip()]
        return ",".join(op(base, extra))
    return apply


_APPEND = _list_op(lambda base, extra: base + [v for v in extra if v not in base])
_SUBTRACT = _list_op(lambda base, extra: [v for v in base if v not in extra])


class IncrementalAlterConfigsHandler(_AlterBase):
    api_key = ApiKey.INCREMENTAL_ALTER_CONFIGS

    def _new_overrides(self, current: dict[str, str], changes: Any) -> dict[str, str]:
        names = [c.name for c in changes]
        for c in changes:
            if names.count(c.name) > 1:
                raise InvalidRequestError(f"Duplicate alter of config {c.name}")
            key = TOPIC_KEYS.get(c.name)
            if key is None:
                raise InvalidConfigError(f"Unknown topic config name: {c.name}")
            if c.config_operation == SET:
                if c.value is None:
                    raise InvalidRequestError(f"Null value not supported for {c.name}")
                current[c.name] = c.value
            elif c.config_operation == DELETE:
                current.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                if key.type != ConfigType.LIST:
                    raise InvalidConfigError(
                        f"Config value append/subtract is not allowed for config key {c.name} "
                        "which is not a list")
                op = _APPEND if c.config_operation == APPEND else _SUBTRACT
                current[c.name] = op(current.get(c.name), c.value, key.default)
            else:
                raise InvalidRequestError(f"Unknown config operation {c.config_operation}")
        return current
