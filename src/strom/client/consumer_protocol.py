"""Kafka's "consumer" embedded protocol: member subscriptions and assignments (sans-io).

Consumers in a classic group put these bytes in JoinGroup (``metadata``) and SyncGroup
(``assignment``); DescribeGroups hands them back as ``member_metadata`` / ``member_assignment``.
Layouts (Kafka's ``ConsumerProtocolSubscription.json`` / ``ConsumerProtocolAssignment.json``,
never flexible, each prefixed by an ``int16`` version)::

    Subscription v0: topics [string], user_data nullable bytes
                 v1: + owned_partitions [topic string, partitions [int32]]
                 v2: + generation_id int32
                 v3: + rack_id nullable string
    Assignment v0-3: assigned_partitions [topic string, partitions [int32]],
                     user_data nullable bytes

As Kafka does, a version newer than we know is read with the newest layout (fields are only
ever appended) and trailing bytes are ignored; fields the buffer ends before keep their
defaults, because some clients write a version but omit its later, ignorable fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from strom.common.errors import KafkaError, StromError
from strom.common.types import TopicPartition
from strom.protocol.primitives import (
    Reader,
    write_array_length,
    write_int16,
    write_int32,
    write_nullable_bytes,
    write_nullable_string,
    write_string,
)

#: The protocol type of groups that use this embedded protocol.
CONSUMER_PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3


class ConsumerProtocolError(StromError):
    """Subscription or assignment bytes that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    """What a member subscribes to (its JoinGroup metadata for the ``consumer`` protocol)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = SUBSCRIPTION_MAX_VERSION


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    """The partitions the group leader gave a member (its SyncGroup assignment)."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None
    version: int = ASSIGNMENT_MAX_VERSION


# -- encoding ---------------------------------------------------------------------------------
def _write_topic_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [write_array_length(len(by_topic))]
    for topic, indexes in by_topic.items():
        out.append(write_string(topic))
        out.append(write_array_length(len(indexes)))
        out.extend(write_int32(i) for i in indexes)
    return b"".join(out)


def encode_subscription(subscription: ConsumerSubscription, version: int | None = None) -> bytes:
    """The version-prefixed bytes of ``subscription`` (at its own version unless given)."""
    v = subscription.version if version is None else version
    if not 0 <= v <= SUBSCRIPTION_MAX_VERSION:
        raise ValueError(f"ConsumerProtocolSubscription v{v} is not supported")
    out = [write_int16(v), write_array_length(len(subscription.topics))]
    out.extend(write_string(t) for t in subscription.topics)
    out.append(write_nullable_bytes(subscription.user_data))
    if v >= 1:
        out.append(_write_topic_partitions(subscription.owned_partitions))
    if v >= 2:
        out.append(write_int32(subscription.generation_id))
    if v >= 3:
        out.append(write_nullable_string(subscription.rack_id))
    return b"".join(out)


def encode_assignment(assignment: ConsumerAssignment, version: int | None = None) -> bytes:
    """The version-prefixed bytes of ``assignment`` (at its own version unless given)."""
    v = assignment.version if version is None else version
    if not 0 <= v <= ASSIGNMENT_MAX_VERSION:
        raise ValueError(f"ConsumerProtocolAssignment v{v} is not supported")
    return b"".join([write_int16(v), _write_topic_partitions(assignment.partitions),
                     write_nullable_bytes(assignment.user_data)])


# -- decoding ---------------------------------------------------------------------------------
def _read_topic_partitions(reader: Reader) -> tuple[TopicPartition, ...]:
    out: list[TopicPartition] = []
    for _ in range(reader.array_length()):
        topic = reader.string()
        out.extend(TopicPartition(topic, reader.int32()) for _ in range(reader.array_length()))
    return tuple(out)


def _bytes_or_none(view: memoryview | None) -> bytes | None:
    return None if view is None else bytes(view)


def decode_subscription(data: bytes | bytearray | memoryview) -> ConsumerSubscription:
    """A member's subscription; ConsumerProtocolError for bytes that are not one."""
    reader = Reader(data)
    try:
        version = reader.int16()
        if version < 0:
            raise ConsumerProtocolError(f"invalid subscription version {version}")
        topics = tuple(reader.string() for _ in range(reader.array_length()))
        user_data = _bytes_or_none(reader.nullable_bytes())
        owned: tuple[TopicPartition, ...] = ()
        generation_id = -1
        rack_id: str | None = None
        if version >= 1 and not reader.at_end():
            owned = _read_topic_partitions(reader)
        if version >= 2 and not reader.at_end():
            generation_id = reader.int32()
        if version >= 3 and not reader.at_end():
            rack_id = reader.nullable_string()
    except KafkaError as exc:
        raise ConsumerProtocolError(f"malformed consumer subscription: {exc.message}") from None
    return ConsumerSubscription(topics, user_data, owned, generation_id, rack_id, version)


def decode_assignment(data: bytes | bytearray | memoryview) -> ConsumerAssignment:
    """A member's assignment; empty bytes (no assignment yet) give no partitions."""
    if len(data) == 0:
        return ConsumerAssignment((), None, 0)
    reader = Reader(data)
    try:
        version = reader.int16()
        if version < 0:
            raise ConsumerProtocolError(f"invalid assignment version {version}")
        partitions = _read_topic_partitions(reader)
        user_data = _bytes_or_none(reader.nullable_bytes()) if not reader.at_end() else None
    except KafkaError as exc:
        raise ConsumerProtocolError(f"malformed consumer assignment: {exc.message}") from None
    return ConsumerAssignment(partitions, user_data, version)
