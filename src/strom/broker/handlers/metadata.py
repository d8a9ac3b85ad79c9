"""Metadata (3), v0-13 (v13: a top-level error code, always NONE here; Kafka answers
REBOOTSTRAP_REQUIRED there to send a client back to its bootstrap servers, KIP-1102): brokers,
cluster id, controller, topics with ids and partitions.

Auto-creates requested topics when ``auto.create.topics.enable`` is on and the client allows it
(v4+). With an authorizer (:mod:`strom.broker.access`): listing every topic shows only those the
caller may DESCRIBE; a requested topic without DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether or not
it exists; auto-creation needs CREATE on the cluster or the topic; authorized operations (v8+, when
asked) are the caller's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from typing import Any

from strom.broker.access import TOPIC_DENIED, Access, host_of
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.handlers.authorized_ops import authorized
from strom.broker.handlers.common import broker_entries
from strom.broker.state import BrokerState
from strom.common.acl import AclOperation, ResourceType
from strom.common.errors import (
    InvalidRequestError,
    KafkaError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from strom.common.names import validate_topic_name
from strom.common.types import ZERO_UUID, kafka_uuid
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.METADATA
log = logging.getLogger("strom.broker.metadata")

TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


class _Caller:
    """Who asks: what they may see and their authorized operations (when asked)."""

    def __init__(self, access: Access, request: Request, include_ops: bool) -> None:
        self.access, self.request, self.include_ops = access, request, include_ops

    def may_describe(self, name: str) -> bool:
        return self.access.allowed(self.request, TOPIC, name)

    def may_create(self, name: str) -> bool:
        return (self.access.allowed(self.request, CLUSTER, operation=AclOperation.CREATE)
                or self.access.allowed(self.request, TOPIC, name, AclOperation.CREATE))

    def ops(self, name: str) -> set[int] | None:
        return authorized(self.access, self.request, TOPIC, name, self.include_ops)


def topic_entry(topic: TopicInfo, ops: set[int] | None,
                live: Collection[int] | None = None) -> dict[str, Any]:
    """A described topic. With ``live`` (the registered brokers), replicas on other brokers
    are ``offline_replicas`` and a partition without a live leader answers
    LEADER_NOT_AVAILABLE with leader -1, as Kafka does."""
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [_partition_entry(p, live) for p in topic.partitions],
        "authorized_operations": ops,
    }


def _partition_entry(p: PartitionInfo, live: Collection[int] | None) -> dict[str, Any]:
    leader, error, offline = p.leader, 0, []
    if live is not None:
        offline = [r for r in p.replicas if r not in live]
        if leader not in live:
            leader, error = -1, LeaderNotAvailableError.code
    return {
        "error_code": error,
        "partition_index": p.partition,
        "leader_id": leader,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "offline_replicas": offline,
    }


def by_id(wanted: Any) -> bool:
    """Whether a requested topic is named by its id: any non-zero id, whatever the name says —
    Java 4.x clients send an id with an empty name, not null, and Kafka looks up the id
    whenever the request carries one (v12+; v10-11 refuse ids before this is asked)."""
    topic_id = getattr(wanted, "topic_id", None)
    return topic_id is not None and topic_id != ZERO_UUID


def distinct(requested: list[Any]) -> list[Any]:
    """The topics a request names, each once, in the order first named; when any is named by
    id, only those (:func:`by_id`) — the names are then ignored, and nothing is auto-created.
    As Kafka answers (it keeps the requested ids, or names, as a set)."""
    ids = any(by_id(t) for t in requested)
    first: dict[Any, Any] = {}
    for t in requested:
        if not ids:
            first.setdefault(t.name, t)
        elif by_id(t):
            first.setdefault(t.topic_id, t)
    return list(first.values())


def error_entry(
    name: str | None, error: KafkaError | int, topic_id: uuid.UUID = ZERO_UUID,
    ops: set[int] | None = None,
) -> dict[str, Any]:
    """A topic that cannot be described; Kafka reports the operations of a topic looked up by
    name (even an unknown one) when asked, never for an unknown topic id."""
    return {
        "error_code": error if isinstance(error, int) else error.code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "authorized_operations": ops,
    }


MAX_CACHED_RESPONSES = 256


class MetadataHandler:
    """Encoded responses are cached per request shape for the current metadata image.

    Encoding is the expensive part (about 7 ms for 1,000 partitions); clients repeat the same
    requests, and any metadata change produces a new image, which empties the cache.
    """

    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self._cache: dict[tuple[Any, ...], bytes] = {}
        self._cached_image: object = None

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        include_ops = bool(body.include_topic_authorized_operations) if version >= 8 else False
        include_cluster_ops = bool(body.include_cluster_authorized_operations) if (
            8 <= version <= 10) else False
        allow_auto = bool(body.allow_auto_topic_creation) if version >= 4 else True
        requested = body.topics
        everything = requested is None or (version == 0 and not requested)
        if not everything and 10 <= version <= 11 and any(
            t.name is None or t.topic_id not in (None, ZERO_UUID) for t in requested
        ):
            return [self._invalid(version, requested)]
        if not everything:
            requested = distinct(requested)
        refused: dict[str, dict[str, Any]] = {}
        access = self._state.access
        caller = _Caller(access, request, include_ops)
        if not everything and allow_auto:
            topics = self._state.store.image.topics
            for wanted in requested:
                if wanted.name is not None and wanted.name not in topics and not by_id(wanted):
                    entry = self._lookup(wanted, allow_auto, caller)  # auto-creates
                    if entry["error_code"] not in (0, UnknownTopicOrPartitionError.code):
                        refused[wanted.name] = entry  # e.g. a name colliding with a topic
        listener = request.conn.listener
        if refused:  # answered with why auto-creation failed; not cached (the key lacks it)
            return [self._encode(version, requested, everything, caller,
                                 include_cluster_ops, listener, refused)]
        image = self._state.store.image
        if image is not self._cached_image:
            self._cache.clear()
            self._cached_image = image
        # With an authorizer the answer depends on who asks (ACL changes are image changes).
        who = (request.conn.principal, host_of(request.conn.peer)) if access.enabled else None
        key = (version, include_ops, include_cluster_ops, listener, who,
               None if everything else tuple((t.name, t.topic_id) for t in requested))
        encoded = self._cache.get(key)
        if encoded is None:
            encoded = self._encode(version, requested, everything, caller,
                                   include_cluster_ops, listener)
            if len(self._cache) < MAX_CACHED_RESPONSES:
                self._cache[key] = encoded
        return [encoded]

    @staticmethod
    def _invalid(version: int, requested: Any) -> bytes:
        """v10-11 cannot look topics up by id, and their response has no null name: Kafka
        answers INVALID_REQUEST for every requested topic, a null name sent as ""."""
        error = InvalidRequestError()
        return api.response(API_KEY, version, {"throttle_time_ms": 0, "topics": [
            error_entry(t.name or "", error, t.topic_id or ZERO_UUID) for t in requested]})

    def _encode(self, version: int, requested: Any, everything: bool, caller: _Caller,
                include_cluster_ops: bool, listener: str | None,
                refused: dict[str, dict[str, Any]] | None = None) -> bytes:
        state = self._state
        entries: list[dict[str, Any]] = []
        if everything:  # only the topics the caller may describe
            entries = [
                topic_entry(t, caller.ops(t.name), state.store.image.brokers)
                for t in state.store.image.topics.values() if caller.may_describe(t.name)
            ]
        else:
            for wanted in requested:
                entries.append((refused or {}).get(wanted.name)
                               or self._lookup(wanted, False, caller))
        image = state.store.image
        fields: dict[str, Any] = {
            "throttle_time_ms": 0,
            "brokers": broker_entries(image, listener, "node_id"),
            "cluster_id": image.cluster_id,
            "controller_id": image.controller_id,
            "topics": entries,
        }
        if 8 <= version <= 10:
            fields["authorized_operations"] = authorized(
                caller.access, caller.request, CLUSTER, requested=include_cluster_ops)
        return api.response(API_KEY, version, fields)

    def _lookup(self, wanted: Any, allow_auto: bool, caller: _Caller) -> dict[str, Any]:
        """One requested topic, by id where it has one (:func:`by_id`), else by name. Without
        DESCRIBE on it the caller learns nothing, not even whether it exists:
        TOPIC_AUTHORIZATION_FAILED (a topic id: without its name).
        Auto-creation also needs CREATE on the cluster or on the topic."""
        state = self._state
        image = state.store.image
        name = wanted.name
        if by_id(wanted):
            topic_id = wanted.topic_id
            found = image.topic_by_id(topic_id)
            if found is None:
                return error_entry(None, UnknownTopicIdError(), topic_id)
            if not caller.may_describe(found.name):
                return error_entry(None, TOPIC_DENIED, topic_id)
            return topic_entry(found, caller.ops(found.name), image.brokers)
        if not caller.may_describe(name):
            return error_entry(name, TOPIC_DENIED, ops=caller.ops(name))
        topic = image.topics.get(name)
        if topic is not None:
            return topic_entry(topic, caller.ops(name), image.brokers)
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return error_entry(name, exc, ops=caller.ops(name))
        if allow_auto and state.config.get("auto.create.topics.enable"):
            if not caller.may_create(name):
                return error_entry(name, TOPIC_DENIED, ops=caller.ops(name))
            try:
                created = state.create_topic(name)
                log.info("auto-created topic %s (id %s) with %d partitions", name,
                         kafka_uuid(created.topic_id), len(created.partitions))
                return topic_entry(created, caller.ops(name),
                                   state.store.image.brokers)
            except TopicAlreadyExistsError:
                # Lost a race with another creation (a CreateTopics, another broker's
                # auto-create) that this broker's image did not hold yet: that topic, with
                # its configs, is the one; answered as Kafka answers a topic being created.
                existing = state.store.image.topics.get(name)
                if existing is not None:
                    return topic_entry(existing, caller.ops(name), state.store.image.brokers)
                return error_entry(name, LeaderNotAvailableError(), ops=caller.ops(name))
            except KafkaError as exc:
                return error_entry(name, exc, ops=caller.ops(name))
        return error_entry(name, UnknownTopicOrPartitionError(), ops=caller.ops(name))
