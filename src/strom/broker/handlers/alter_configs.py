"""AlterConfigs (33), v0-2, and IncrementalAlterConfigs (44), v0-1: topic config overrides and
dynamic broker configs.

AlterConfigs replaces a resource's whole set; IncrementalAlterConfigs applies SET (0),
DELETE (1), APPEND (2) and SUBTRACT (3) to single keys (APPEND/SUBTRACT on list keys only) of
the current set. Every change of a resource is validated before any is applied;
``validate_only`` validates and writes nothing. As a Kafka broker does first: a resource named
twice, a key named twice or a null value (except for DELETE) is INVALID_REQUEST.

A broker resource is this broker (its id) or the cluster-wide default (``""``); its keys must
be ones that can change at run time (:mod:`strom.controller.broker_configs`, Kafka's errors).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.config import BROKER_KEYS, TOPIC_KEYS, ConfigKey, ConfigType
from strom.common.errors import (
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for,
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
        named = Counter((res.resource_type, res.resource_name) for res in body.resources)
        responses = []
        for res in body.resources:
            out: dict[str, Any] = {"error_code": 0, "error_message": None,
                                   "resource_type": res.resource_type,
                                   "resource_name": res.resource_name}
            try:
                if named[(res.resource_type, res.resource_name)] > 1:
                    raise InvalidRequestError("Each resource must appear at most once.")
                if refused := self._state.access.config_refusal(
                        request, res.resource_type, res.resource_name):
                    raise error_for(refused)
                self._alter(res, bool(body.validate_only))
            except KafkaError as exc:
                out["error_code"] = exc.code
                out["error_message"] = exc.message
            responses.append(out)
        return [api.response(self.api_key, version,
                             {"throttle_time_ms": 0, "responses": responses})]

    def _alter(self, res: Any, validate_only: bool) -> None:
        state = self._state
        if len({c.name for c in res.configs}) != len(res.configs):
            raise InvalidRequestError("Error due to duplicate config keys")
        nulls = [c.name for c in res.configs if c.value is None and not self._may_be_null(c)]
        if nulls:
            raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
        if res.resource_type == BROKER:
            admin = state.broker_configs
            current = admin.configs(res.resource_name)
            new = self._new_configs(current, res.configs, BROKER_KEYS, _unknown_broker_key)
            admin.set_configs(res.resource_name, new, validate_only=validate_only)
            return
        if res.resource_type != TOPIC:
            raise InvalidRequestError(f"Unknown resource type {res.resource_type}")
        topic = state.store.image.topics.get(res.resource_name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{res.resource_name}' does not exist.")
        new = self._new_configs(dict(topic.configs), res.configs, TOPIC_KEYS, _unknown_topic_key)
        state.topic_admin.set_topic_configs(res.resource_name, new, validate_only=validate_only)

    def _may_be_null(self, change: Any) -> bool:
        return False

    def _new_configs(self, current: dict[str, str], changes: Any, keys: Mapping[str, ConfigKey],
                     unknown: UnknownKey) -> dict[str, str]:
        raise NotImplementedError


# Refuses a key unknown to the resource type, for an operation (None: any), or lets it pass.
UnknownKey = Callable[[str, int | None], None]


def _unknown_topic_key(name: str, _op: int | None) -> None:
    raise InvalidConfigError(f"Unknown topic config name: {name}")


def _unknown_broker_key(name: str, op: int | None) -> None:
    # Kafka checks broker keys when validating the new set ("Cannot update these configs
    # dynamically"), except for list operations, which need the key's type first.
    if op in (APPEND, SUBTRACT):
        raise InvalidConfigError(f"Unknown config name: {name}")


class AlterConfigsHandler(_AlterBase):
    api_key = ApiKey.ALTER_CONFIGS

    def _new_configs(self, current: dict[str, str], changes: Any, keys: Mapping[str, ConfigKey],
                     unknown: UnknownKey) -> dict[str, str]:
        return {c.name: c.value for c in changes}


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

    def _may_be_null(self, change: Any) -> bool:
        return bool(change.config_operation == DELETE)

    def _new_configs(self, current: dict[str, str], changes: Any, keys: Mapping[str, ConfigKey],
                     unknown: UnknownKey) -> dict[str, str]:
        for c in changes:
            key = keys.get(c.name)
            if key is None:
                unknown(c.name, c.config_operation)
            if c.config_operation == SET:
                current[c.name] = c.value
            elif c.config_operation == DELETE:
                current.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                assert key is not None
                if key.type != ConfigType.LIST:
                    raise InvalidConfigError(
                        f"Config value append/subtract is not allowed for config key {c.name} "
                        "which is not a list")
                op = _APPEND if c.config_operation == APPEND else _SUBTRACT
                current[c.name] = op(current.get(c.name), c.value, key.default)
            else:
                raise InvalidRequestError(f"Unknown config operation {c.config_operation}")
        return current
