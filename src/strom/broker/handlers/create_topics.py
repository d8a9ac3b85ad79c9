"""CreateTopics (19), v2-7: with configs, manual assignments, validate_only, topic ids (v7)."""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.configs_view import topic_entries
from strom.broker.state import BrokerState
from strom.common.config import TopicConfig, validate_topic_configs
from strom.common.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    TopicAlreadyExistsError,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CREATE_TOPICS


class CreateTopicsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        names = [t.name for t in body.topics]
        results = []
        for topic in body.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None,
                                     "num_partitions": -1, "replication_factor": -1,
                                     "configs": None}
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(
                        f"Create topics request from client contains a duplicate topic "
                        f"{topic.name}")
                self._create(topic, bool(body.validate_only), entry, version)
            except KafkaError as exc:
                entry["error_code"] = exc.code
                entry["error_message"] = exc.message
            results.append(entry)
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": results})]

    def _create(self, topic: Any, validate_only: bool, entry: dict[str, Any], version: int) -> None:
        state = self._state
        if topic.name in state.store.image.topics:
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
        configs = {c.name: c.value for c in topic.configs or []}
        partitions = topic.num_partitions
        replication = topic.replication_factor
        if topic.assignments:
            if partitions != -1 or replication != -1:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.")
            brokers = set(state.store.image.brokers)
            indexes = sorted(a.partition_index for a in topic.assignments)
            if indexes != list(range(len(indexes))):
                raise InvalidReplicaAssignmentError("Partitions must be numbered 0..N-1.")
            for a in topic.assignments:
                if not a.broker_ids or set(a.broker_ids) - brokers or len(set(a.broker_ids)) != len(
                    a.broker_ids
                ):
                    raise InvalidReplicaAssignmentError(
                        f"Invalid replica assignment for partition {a.partition_index}: "
                        f"{a.broker_ids}")
            partitions = len(indexes)
            replication = len(topic.assignments[0].broker_ids)
        partitions, replication = state.check_new_topic(
            topic.name, partitions, replication, configs
        )
        if not validate_only:
            created = state.create_topic(topic.name, partitions, replication, configs)
            entry["topic_id"] = created.topic_id
        entry["num_partitions"] = partitions
        entry["replication_factor"] = replication
        if version >= 5:
            config = TopicConfig(state.config, validate_topic_configs(configs))
            entry["configs"] = [
                {k: v for k, v in e.items()
                 if k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                for e in topic_entries(config, None, False, False)
            ]
