"""FindCoordinator (10), v0-5: a group's coordinator is the leader of its partition of
``__consumer_offsets`` (COORDINATOR_NOT_AVAILABLE while that partition has no leader).

v4+ batches keys (``coordinator_keys``). Key type 0 is a group, key type 1 a transactional
id (its coordinator leads its partition of ``__transaction_state``; an empty id is
INVALID_REQUEST); other types are INVALID_REQUEST. The first lookup of each kind creates
the internal topic (as in Kafka); when that fails on a full disk the answer is
COORDINATOR_NOT_AVAILABLE, and the client retries. The error message is never null: on
success Kafka sends "NONE" (v1-3) or "" (v4+). Without DESCRIBE on the group / transactional
id: GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED, before the internal topic is created.
"""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.common import storage_failure_answer
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import KafkaStorageError, error_class
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.txn.records import TXN_TOPIC
from strom.metadata.image import BrokerInfo
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.FIND_COORDINATOR
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
_RESOURCE = {GROUP_KEY_TYPE: ResourceType.GROUP,
             TRANSACTION_KEY_TYPE: ResourceType.TRANSACTIONAL_ID}


class FindCoordinatorHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _answer(self, request: Request, key: str, key_type: int,
                success_message: str) -> dict[str, Any]:
        listener = request.conn.listener
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1,
                                 "error_code": 0, "error_message": success_message}
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) or key is None:
            entry["error_code"] = error_class("INVALID_REQUEST").code
            entry["error_message"] = (f"unknown coordinator key type {key_type}" if key is not None
                                      else "null coordinator key")
        elif key_type == TRANSACTION_KEY_TYPE and not key:
            entry["error_code"] = error_class("INVALID_REQUEST").code
            entry["error_message"] = "empty transactional id"
        elif denied := self._state.access.check(request, _RESOURCE[key_type], key):
            entry["error_code"] = denied
            entry["error_message"] = None if success_message == "NONE" else ""
        else:
            try:
                broker = self._leader_for(key, key_type)
            except KafkaStorageError as exc:  # the internal topic cannot be created
                error = storage_failure_answer(API_KEY, exc)
                entry.update(error_code=error.code, error_message=error.message)
                return entry
            address = None if broker is None else broker.address(listener)
            if broker is None or address is None:
                entry["error_code"] = error_class("COORDINATOR_NOT_AVAILABLE").code
                entry["error_message"] = "the key's internal-topic partition has no leader"
            else:
                entry.update(node_id=broker.node_id, host=address[0], port=address[1])
        return entry

    def _leader_for(self, key: str, key_type: int) -> BrokerInfo | None:
        """The broker leading the key's partition of ``__consumer_offsets`` (a group) or
        ``__transaction_state`` (a transactional id), as Kafka answers; the first lookup
        creates the topic."""
        state = self._state
        if key_type == TRANSACTION_KEY_TYPE:
            state.ensure_txn_topic()
            name, partition = TXN_TOPIC, state.txns.partition_for(key)
        else:
            state.ensure_offsets_topic()
            name, partition = OFFSETS_TOPIC, state.groups.partition_for(key)
        image = state.store.image
        topic = image.topics.get(name)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return image.brokers.get(topic.partitions[partition].leader)

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        key_type = int(body.key_type) if version >= 1 else GROUP_KEY_TYPE
        if version >= 4:
            coordinators = [self._answer(request, k, key_type, "")
                            for k in body.coordinator_keys]
            return [api.response(API_KEY, version,
                                 {"throttle_time_ms": 0, "coordinators": coordinators})]
        entry = self._answer(request, body.key, key_type, "NONE")
        del entry["key"]
        entry["throttle_time_ms"] = 0
        if version == 0:
            del entry["error_message"]
        return [api.response(API_KEY, version, entry)]
