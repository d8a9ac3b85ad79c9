"""Helpers shared by the consumer-group handlers: parked responses, topic checks, and the
request / response shape OffsetCommit and TxnOffsetCommit share (topics named by name, or by
id from OffsetCommit / OffsetFetch v10, KIP-848), and the group-level refusal of JoinGroup /
SyncGroup / Heartbeat / LeaveGroup.

Coordinator operations answer through a callback: at once (validation errors, reads, writes
committed synchronously) or later (a parked JoinGroup / SyncGroup, a write waiting to commit).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from strom.broker.access import GROUP_DENIED
from strom.broker.dispatch import HandlerResult, Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import UnknownTopicIdError, UnknownTopicOrPartitionError
from strom.common.types import ZERO_UUID
from strom.coordinator.group.coordinator import OffsetToCommit
from strom.metadata.image import MetadataImage
from strom.protocol import api

T = TypeVar("T")


def respond_when_ready(
    start: Callable[[Callable[[T], None]], None], encode: Callable[[T], bytes]
) -> HandlerResult:
    """Run a coordinator operation that answers through a callback: encode at once when it
    answered synchronously, otherwise park the request until it does."""
    answered: list[T] = []
    future: asyncio.Future[T] | None = None

    def deliver(result: T) -> None:
        if future is None:
            answered.append(result)
        elif not future.done():
            future.set_result(result)

    start(deliver)
    if answered:
        return [encode(answered[0])]
    future = asyncio.get_running_loop().create_future()
    return _later(future, encode)


async def _later(future: asyncio.Future[T], encode: Callable[[T], bytes]) -> ResponseParts:
    return [encode(await future)]


def partition_exists(image: MetadataImage, topic: str, partition: int) -> bool:
    info = image.topics.get(topic)
    return info is not None and 0 <= partition < len(info.partitions)


#: (topic, partition) -> the error code answered for it; the topic is a name, or the id
#: of an unknown topic id (:attr:`RequestTopic.key`).
PartitionErrors = dict[tuple[str | uuid.UUID, int], int]


@dataclass(frozen=True)
class RequestTopic:
    """A topic of an OffsetCommit / TxnOffsetCommit / OffsetFetch request as the client named
    it: by name (``topic_id`` None), or by id (v10+) — ``name`` is then the image's name for
    it, None when no topic has that id (answered UNKNOWN_TOPIC_ID)."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: Any

    @property
    def key(self) -> str | uuid.UUID:
        """The topic in :data:`PartitionErrors`: its name, or the unknown id."""
        if self.name is not None:
            return self.name
        assert self.topic_id is not None
        return self.topic_id

    def as_named(self) -> dict[str, Any]:
        """The topic's field in a response: ``name``, or ``topic_id`` when named by id."""
        if self.topic_id is None:
            return {"name": self.name}
        return {"topic_id": self.topic_id}


def by_topic_id(image: MetadataImage, topic_id: uuid.UUID | None
                ) -> tuple[str | None, uuid.UUID]:
    """(the image's name for a requested topic id or None when no topic has it, the id) —
    the zero id, which decodes as None, names no topic."""
    topic_id = topic_id if topic_id is not None else ZERO_UUID
    info = image.topic_by_id(topic_id)
    return (info.name if info is not None else None), topic_id


def request_topics(image: MetadataImage, topics: Iterable[Any], by_id: bool
                   ) -> list[RequestTopic]:
    """The request's topics (each with ``name`` up to v9, ``topic_id`` from v10), resolved
    against ``image``."""
    if not by_id:
        return [RequestTopic(t.name, None, t.partitions) for t in topics]
    return [RequestTopic(*by_topic_id(image, t.topic_id), t.partitions) for t in topics]


def offsets_to_commit(image: MetadataImage, topics: list[RequestTopic], with_leader_epoch: bool,
                      refused: Callable[[str], int] | None = None,
                      ) -> tuple[list[OffsetToCommit], PartitionErrors]:
    """The offsets of an OffsetCommit / TxnOffsetCommit request's ``topics`` whose partitions
    exist, UNKNOWN_TOPIC_ID for those of an unknown topic id and UNKNOWN_TOPIC_OR_PARTITION
    for the others (as Kafka). ``with_leader_epoch``: the version carries
    ``committed_leader_epoch`` (else -1). ``refused(topic)``: the authorization error of a
    topic's partitions (0: allowed), checked before existence."""
    wanted: list[OffsetToCommit] = []
    errors: PartitionErrors = {}
    for topic in topics:
        if topic.name is None:
            for p in topic.partitions:
                errors[(topic.key, p.partition_index)] = UnknownTopicIdError.code
            continue
        denied = refused(topic.name) if refused is not None else 0
        for p in topic.partitions:
            if denied:
                errors[(topic.name, p.partition_index)] = denied
                continue
            if not partition_exists(image, topic.name, p.partition_index):
                errors[(topic.name, p.partition_index)] = UnknownTopicOrPartitionError.code
                continue
            wanted.append(OffsetToCommit(
                topic.name, p.partition_index, int(p.committed_offset),
                int(p.committed_leader_epoch) if with_leader_epoch else -1,
                p.committed_metadata))
    return wanted, errors


def commit_response_topics(topics: list[RequestTopic], errors: PartitionErrors
                           ) -> list[dict[str, Any]]:
    """The response's ``topics``: every requested partition with its error, in request
    order, each topic named as the request named it."""
    return [{**topic.as_named(), "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": errors[(topic.key, p.partition_index)]}
                for p in topic.partitions]}
            for topic in topics]


def group_refused(state: BrokerState, request: Request, group_id: str) -> ResponseParts | None:
    """The response of a request whose group the caller may not use (Kafka: READ on the
    group; GROUP_AUTHORIZATION_FAILED at the top, every other field at its default), or
    None when allowed."""
    if state.access.allowed(request, ResourceType.GROUP, group_id):
        return None
    return [api.response(request.header.api_key, request.version,
                         {"throttle_time_ms": 0, "error_code": GROUP_DENIED})]
