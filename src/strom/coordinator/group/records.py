"""Records of the ``__consumer_offsets`` topic, in Kafka's exact formats (sans-io).

Every record's key starts with an int16 *key version* that names its type; its value starts
with an int16 *value version*. A null value is a tombstone. Strings are int16-length UTF-8
(-1 = null), bytes int32-length, arrays int32-count; value versions 4+ are *flexible*
(unsigned-varint "compact" lengths + 1, and a tagged-field section after each struct).

Keys (never flexible):

- versions 0 and 1 — ``OffsetCommitKey``: group (string), topic (string), partition (int32);
- version 2 — ``GroupMetadataKey``: group (string);
- other versions (KIP-848 consumer groups, share groups …) are not ours: replay skips them.

``OffsetCommitValue`` (versions 0-4, flexible from 4): offset int64, leader_epoch int32 (3+),
metadata string, commit_timestamp int64, expire_timestamp int64 (version 1 only). strom
writes version 3, or version 1 when a v2-v4 OffsetCommit set an explicit retention.

``GroupMetadataValue`` (versions 0-4, flexible from 4): protocol_type string, generation int32,
protocol nullable string, leader nullable string, current_state_timestamp int64 (2+), members
array of [member_id string, group_instance_id nullable string (3+), client_id string,
client_host string, rebalance_timeout int32 (1+), session_timeout int32, subscription bytes,
assignment bytes]. strom writes version 3.

Group → partition: ``(java_string_hashcode(group) & 0x7fffffff) % partitions`` (Kafka's
``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from strom.coordinator import codec
from strom.coordinator.codec import (
    Reader,
    RecordFormatError,
    encode_bytes,
    encode_string,
    java_string_hashcode,
)

__all__ = ["RecordFormatError", "java_string_hashcode"]

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def partition_for(group_id: str, partitions: int) -> int:
    return codec.partition_for(group_id, partitions)


# -- typed records ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default=())


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue
#: A record as the shard writes it: a key and a value (None = tombstone).
Record = tuple[Key, Value | None]


# -- writing ----------------------------------------------------------------------------
def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return b"".join((_I16.pack(OFFSET_COMMIT_KEY_VERSION), encode_string(key.group),
                         encode_string(key.topic), _I32.pack(key.partition)))
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + encode_string(key.group)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp >= 0:
        return b"".join((_I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY),
                         _I64.pack(value.offset), encode_string(value.metadata),
                         _I64.pack(value.commit_timestamp), _I64.pack(value.expire_timestamp)))
    return b"".join((_I16.pack(OFFSET_COMMIT_VALUE_VERSION), _I64.pack(value.offset),
                     _I32.pack(value.leader_epoch), encode_string(value.metadata),
                     _I64.pack(value.commit_timestamp)))


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = [_I16.pack(GROUP_METADATA_VALUE_VERSION), encode_string(value.protocol_type),
           _I32.pack(value.generation), encode_string(value.protocol), encode_string(value.leader),
           _I64.pack(value.current_state_timestamp), _I32.pack(len(value.members))]
    for m in value.members:
        out += [encode_string(m.member_id), encode_string(m.group_instance_id),
                encode_string(m.client_id), encode_string(m.client_host),
                _I32.pack(m.rebalance_timeout), _I32.pack(m.session_timeout),
                encode_bytes(m.subscription), encode_bytes(m.assignment)]
    return b"".join(out)


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        return encode_offset_commit_value(value)
    return encode_group_metadata_value(value)


# -- reading ----------------------------------------------------------------------------
def decode_key(data: bytes) -> Key | None:
    """The key's typed form; None for key versions that are not the classic group's."""
    reader = Reader(bytes(data))
    version = reader.int16()
    if version in (0, 1):
        return OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    if version == 2:
        return GroupMetadataKey(reader.string())
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = Reader(bytes(data))
    version = reader.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    reader.flexible = version >= 4
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else -1
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = Reader(bytes(data))
    version = reader.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    reader.flexible = version >= 4
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.array_length()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        session_timeout = rebalance_timeout = reader.int32()
        if version >= 1:
            session_timeout = reader.int32()
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        reader.skip_tagged_fields()
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                      rebalance_timeout, session_timeout, subscription,
                                      assignment))
    reader.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp,
                              tuple(members))


def decode_value(key: Key, data: bytes | None) -> Value | None:
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_commit_value(data)
    return decode_group_metadata_value(data)


# -- ConsumerProtocol subscription (for OffsetDelete and offset expiry) -------------------
def subscribed_topics(subscription: bytes) -> set[str] | None:
    """Topics of a ``consumer`` protocol subscription (int16 version, then an array of
    topic strings, then user data …; all versions start that way). None if unparsable."""
    try:
        reader = Reader(bytes(subscription))
        reader.int16()
        return {reader.string() for _ in range(reader.array_length())}
    except RecordFormatError:
        return None
