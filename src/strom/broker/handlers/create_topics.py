"""CreateTopics (19), v2-7: with configs, manual assignments, validate_only, topic ids (v7).

A request past Kafka's per-request bounds (:mod:`strom.controller.limits`: 10,000 partitions,
10,000 metadata records) is refused whole, POLICY_VIOLATION for every topic, ``validate_only``
too, before anything is planned. Otherwise, in Kafka's order: a name given twice gets
INVALID_REQUEST, a topic the caller may not create TOPIC_AUTHORIZATION_FAILED; the others are,
one by one, in
strict quota mode stopping at an exceeded controller mutation quota — planned, and written
through the broker's :class:`~strom.controller.topic_writes.TopicWriteQueue` (the response
waits for the write, off the handler; ``validate_only`` is answered at once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import Any

from strom.broker.access import TopicDenied
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.configs_view import topic_entries
from strom.broker.quotas.mutations import MutationQuota
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.config import TopicConfig, validate_topic_configs
from strom.common.errors import InvalidReplicaAssignmentError, InvalidRequestError, KafkaError
from strom.common.slices import Steps, run_in_slices
from strom.controller.limits import check_new_topics, requested_partitions
from strom.controller.topic_writes import Creations, NewTopic, Outcome, plan_batch
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CREATE_TOPICS


class CreateTopicsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts | Awaitable[ResponseParts]:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        seen = Counter(t.name for t in body.topics)
        access = self._state.access
        # CREATE on the cluster allows every topic; else CREATE on each topic.
        cluster_create = access.allowed(request, ResourceType.CLUSTER)
        entries: list[dict[str, Any]] = []
        wanted: list[tuple[dict[str, Any], NewTopic]] = []
        default = int(self._state.config.get("num.partitions"))
        try:  # Kafka's per-request bounds refuse the whole request, before anything else
            check_new_topics(
                (requested_partitions(t.num_partitions, len(t.assignments or []), default),
                 len(t.configs or [])) for t in body.topics)
            refused: KafkaError | None = None
        except KafkaError as exc:
            refused = exc
        for topic in body.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0,
                                     "error_message": None, "num_partitions": -1,
                                     "replication_factor": -1,
                                     "configs": []}  # v5+: empty, not null, on an error
            entries.append(entry)
            try:
                if refused is not None:
                    raise refused
                if seen[topic.name] > 1:
                    raise InvalidRequestError(
                        f"Create topics request from client contains a duplicate topic "
                        f"{topic.name}")
                if not cluster_create and not access.allowed(request, ResourceType.TOPIC,
                                                             topic.name):
                    raise TopicDenied()
                wanted.append((entry, _new_topic(topic)))
            except KafkaError as exc:
                _fail(entry, exc)
        quota = MutationQuota(self._state.quotas, request)
        accepted: list[tuple[dict[str, Any], NewTopic]] = []
        for entry, topic in wanted:
            try:
                quota.check()
            except KafkaError as exc:
                _fail(entry, exc)
                continue
            accepted.append((entry, topic))
            if not body.validate_only:
                quota.record(requested_partitions(topic.partitions, len(topic.assignments or ()),
                                                  default))
        if not accepted:
            return self._respond(request, entries)
        topics = [t for _, t in accepted]
        if body.validate_only:
            state = self._state
            planned = plan_batch(state.topic_admin, state.store.image, [Creations(tuple(topics))])
            self._fill(accepted, planned[0].outcomes, version, validate_only=True)
            return self._respond(request, entries)

        async def written() -> ResponseParts:
            outcomes = await self._state.topic_writes.create_topics(topics)
            self._fill(accepted, outcomes, version, validate_only=False)
            built = await run_in_slices(_built_steps(version, entries))
            return self._respond(request, built)

        return written()

    def _respond(self, request: Request, entries: list[Any]) -> ResponseParts:
        return [api.response(API_KEY, request.version, {
            "throttle_time_ms": request.throttle_ms, "topics": entries})]

    def _fill(self, accepted: list[tuple[dict[str, Any], NewTopic]], outcomes: list[Outcome],
              version: int, *, validate_only: bool) -> None:
        # Topics created with the same configs describe them alike: one listing each, built
        # once for the encoder (about 40 entries a topic; a request of 100 topics built
        # 4,000 in one turn of the loop).
        listings: dict[frozenset[tuple[str, str]], list[Any]] = {}
        for (entry, topic), outcome in zip(accepted, outcomes, strict=True):
            if isinstance(outcome, KafkaError):
                _fail(entry, outcome)
                continue
            if not validate_only:
                entry["topic_id"] = outcome.topic_id
            entry["num_partitions"] = len(outcome.partitions)
            entry["replication_factor"] = len(outcome.partitions[0].replicas)
            if version >= 5:
                key = frozenset(topic.configs.items())
                if key not in listings:
                    listings[key] = api.response_structs(API_KEY, version, ("topics", "configs"),
                                                         self._configs(topic))
                entry["configs"] = listings[key]

    def _configs(self, topic: NewTopic) -> list[dict[str, Any]]:
        """The configs a created topic's entry lists (v5+): every topic config, effective."""
        config = TopicConfig(self._state.config, validate_topic_configs(dict(topic.configs)))
        return [{k: v for k, v in e.items()
                 if k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                for e in topic_entries(config, None, False, False)]


#: Topic entries built for the encoder at once (~5 us each; the encoder then takes ~1 us).
BUILD_CHUNK = 10


def _built_steps(version: int, entries: list[dict[str, Any]]) -> Steps[list[Any]]:
    """The answer's topic entries built for the encoder a few at a time (background work,
    :func:`~strom.common.slices.run_in_slices`): the answer of a request of 100 topics took
    1.3-1.5 ms in one turn of the loop, most of it building the entries."""
    built: list[Any] = []
    for i in range(0, len(entries), BUILD_CHUNK):
        built += api.response_structs(API_KEY, version, ("topics",), entries[i:i + BUILD_CHUNK])
        yield
    return built


def _new_topic(topic: Any) -> NewTopic:
    configs = {c.name: c.value for c in topic.configs or []}
    assignments = None
    if topic.assignments:
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        if len(assignments) != len(topic.assignments):
            raise InvalidReplicaAssignmentError("Duplicate partition index in the assignment.")
    return NewTopic(topic.name, topic.num_partitions, topic.replication_factor, configs,
                    assignments)


def _fail(entry: dict[str, Any], exc: KafkaError) -> None:
    entry["error_code"] = exc.code
    entry["error_message"] = exc.message
