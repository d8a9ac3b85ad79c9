"""CreatePartitions (37), v0-3: grow a topic's partition count (validate_only supported).

A request adding more than 10,000 partitions in all (:mod:`strom.controller.limits`) is
refused whole, POLICY_VIOLATION for every topic, before anything is planned. Otherwise a name
given twice gets INVALID_REQUEST, a topic the caller may not ALTER
TOPIC_AUTHORIZATION_FAILED, and the rest go through the broker's
:class:`~strom.controller.topic_writes.TopicWriteQueue` (``validate_only``: planned and
answered at once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import Any

from strom.broker.access import TopicDenied
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.quotas.mutations import MutationQuota
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import InvalidRequestError, KafkaError
from strom.controller.limits import check_added_partitions
from strom.controller.topic_writes import Additions, NewPartitions, Outcome, plan_batch
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CREATE_PARTITIONS


class CreatePartitionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts | Awaitable[ResponseParts]:
        body = api.decode_request(API_KEY, request.version, request.body)
        seen = Counter(t.name for t in body.topics)
        results: list[dict[str, Any]] = []
        wanted: list[tuple[dict[str, Any], NewPartitions]] = []
        image = self._state.store.image
        try:  # Kafka's per-request bound refuses the whole request, before anything else
            check_added_partitions(image, ((t.name, t.count) for t in body.topics))
            refused: KafkaError | None = None
        except KafkaError as exc:
            refused = exc
        for topic in body.topics:
            out: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
            results.append(out)
            try:
                if refused is not None:
                    raise refused
                if seen[topic.name] > 1:
                    raise InvalidRequestError(f"Duplicate topic {topic.name} in the request.")
                if not self._state.access.allowed(request, ResourceType.TOPIC, topic.name):
                    raise TopicDenied()
                assignments = ([list(a.broker_ids) for a in topic.assignments]
                               if topic.assignments is not None else None)
                wanted.append((out, NewPartitions(topic.name, topic.count, assignments)))
            except KafkaError as exc:
                _fail(out, exc)
        quota = MutationQuota(self._state.quotas, request)
        accepted: list[tuple[dict[str, Any], NewPartitions]] = []
        for out, topic in wanted:
            try:
                quota.check()
            except KafkaError as exc:
                _fail(out, exc)
                continue
            accepted.append((out, topic))
            before = image.topics.get(topic.name)
            if not body.validate_only and before is not None:
                quota.record(max(topic.total - len(before.partitions), 0))
        if not accepted:
            return self._respond(request, results)
        topics = [t for _, t in accepted]
        if body.validate_only:
            planned = plan_batch(self._state.topic_admin, image, [Additions(tuple(topics))])
            _fill(accepted, planned[0].outcomes)
            return self._respond(request, results)

        async def written() -> ResponseParts:
            _fill(accepted, await self._state.topic_writes.add_partitions(topics))
            return self._respond(request, results)

        return written()

    @staticmethod
    def _respond(request: Request, results: list[dict[str, Any]]) -> ResponseParts:
        return [api.response(API_KEY, request.version, {
            "throttle_time_ms": request.throttle_ms, "results": results})]


def _fill(accepted: list[tuple[dict[str, Any], NewPartitions]], outcomes: list[Outcome]
          ) -> None:
    for (out, _), outcome in zip(accepted, outcomes, strict=True):
        if isinstance(outcome, KafkaError):
            _fail(out, outcome)


def _fail(out: dict[str, Any], exc: KafkaError) -> None:
    out["error_code"] = exc.code
    out["error_message"] = exc.message
