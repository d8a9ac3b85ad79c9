"""CreateTopics (19), v2-7: with configs, manual assignments, validate_only, topic ids (v7).

A request past Kafka's per-request bounds (:mod:`strom.controller.limits`: 10,000 partitions,
10,000 metadata records) is refused whole, POLICY_VIOLATION for every topic, before anything
is planned."""

from __future__ import annotations

from typing import Any

from strom.broker.access import TopicDenied
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.configs_view import topic_entries
from strom.broker.quotas.mutations import MutationQuota
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.config import TopicConfig, validate_topic_configs
from strom.common.errors import InvalidReplicaAssignmentError, InvalidRequestError, KafkaError
from strom.controller.limits import check_new_topics, requested_partitions
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
        access = self._state.access
        # CREATE on the cluster allows every topic; else CREATE on each topic.
        cluster_create = access.allowed(request, ResourceType.CLUSTER)
        results = []
        quota = MutationQuota(self._state.quotas, request)
        default = int(self._state.config.get("num.partitions"))
        try:  # Kafka's per-request bounds refuse the whole request, before anything else
            check_new_topics(
                (requested_partitions(t.num_partitions, len(t.assignments or []), default),
                 len(t.configs or [])) for t in body.topics)
            refused: KafkaError | None = None
        except KafkaError as exc:
            refused = exc
        for topic in body.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None,
                                     "num_partitions": -1, "replication_factor": -1,
                                     "configs": []}  # v5+: empty, not null, on an error
            try:
                if refused is not None:
                    raise refused
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(
                        f"Create topics request from client contains a duplicate topic "
                        f"{topic.name}")
                if not cluster_create and not access.allowed(request, ResourceType.TOPIC,
                                                             topic.name):
                    raise TopicDenied()
                quota.check()
                self._create(topic, bool(body.validate_only), entry, version)
                if not body.validate_only:
                    quota.record(len(self._state.store.image.topics[topic.name].partitions))
            except KafkaError as exc:
                entry["error_code"] = exc.code
                entry["error_message"] = exc.message
            results.append(entry)
        return [api.response(API_KEY, version, {"throttle_time_ms": request.throttle_ms,
                                                "topics": results})]

    def _create(self, topic: Any, validate_only: bool, entry: dict[str, Any], version: int) -> None:
        state = self._state
        configs = {c.name: c.value for c in topic.configs or []}
        assignments = None
        if topic.assignments:
            assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            if len(assignments) != len(topic.assignments):
                raise InvalidReplicaAssignmentError("Duplicate partition index in the assignment.")
        if validate_only:
            partitions, replication = state.check_new_topic(
                topic.name, topic.num_partitions, topic.replication_factor, configs,
                assignments=assignments)
        else:
            created = state.create_topic(topic.name, topic.num_partitions,
                                         topic.replication_factor, configs,
                                         assignments=assignments)
            entry["topic_id"] = created.topic_id
            partitions, replication = len(created.partitions), len(created.partitions[0].replicas)
        entry["num_partitions"] = partitions
        entry["replication_factor"] = replication
        if version >= 5:
            config = TopicConfig(state.config, validate_topic_configs(configs))
            entry["configs"] = [
                {k: v for k, v in e.items()
                 if k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                for e in topic_entries(config, None, False, False)
            ]
